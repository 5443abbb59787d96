package kubetest_test

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/simba-go/simba/internal/kubetest"
)

// TestPeerAndFront: a peer started on a server's etcd serves the server's
// objects to the same credentials (the administrator's and a user's
// certificate) and with the same certificate; a client of the front
// reaches the first server, then, once it is killed, the peer, and the
// front stays on the peer after the server is back.
func TestPeerAndFront(t *testing.T) {
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	ctx := t.Context()
	if _, err := clientset(t, srv.Admin()).CoordinationV1().Leases(ns).Create(ctx, lease("a", "node-1"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a lease: %v", err)
	}

	peer := srv.StartPeer(t)
	if peer.Addr() == srv.Addr() {
		t.Fatalf("the peer listens on the server's address %s", srv.Addr())
	}
	if _, err := clientset(t, peer.Admin()).CoordinationV1().Leases(ns).Get(ctx, "a", metav1.GetOptions{}); err != nil {
		t.Fatalf("the peer, as the administrator: reading the server's lease: %v", err)
	}
	// A user's certificate from the server's authority is known to the
	// peer: authenticated (403 for a user without a role, not 401).
	_, err := clientset(t, peer.User(t, "someone")).CoordinationV1().Leases(ns).Get(ctx, "a", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("the peer, as a user without a role: want 403 Forbidden, got %v", err)
	}

	front := kubetest.StartFront(t, srv, peer)
	via := clientset(t, srv.ConfigVia(front.Addr(), srv.Admin()))
	get := func(d time.Duration) error {
		return within(ctx, d, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := via.CoordinationV1().Leases(ns).Get(ctx, "a", metav1.GetOptions{})
			return err
		})
	}
	if err := get(30 * time.Second); err != nil {
		t.Fatalf("through the front: %v", err)
	}
	if front.Target() != srv {
		t.Fatalf("the front's first target is %s, want the first server %s", front.Target().Addr(), srv.Addr())
	}

	killed := time.Now()
	srv.Crash()
	if err := get(30 * time.Second); err != nil {
		t.Fatalf("through the front, the server killed: %v", err)
	}
	moves := front.Moves()
	if len(moves) != 1 || moves[0].From != srv.Addr() || moves[0].To != peer.Addr() || front.Target() != peer {
		t.Fatalf("the front's moves after the kill: %+v, want one, from %s to %s", moves, srv.Addr(), peer.Addr())
	}
	t.Logf("the front moved %v after the kill", moves[0].At.Sub(killed).Round(time.Millisecond))

	srv.Start()
	if err := get(30 * time.Second); err != nil {
		t.Fatalf("through the front, the server back: %v", err)
	}
	if n := len(front.Moves()); n != 1 || front.Target() != peer {
		t.Fatalf("the front moved %d times (target %s) once the server was back: want it kept on the peer %s", n, front.Target().Addr(), peer.Addr())
	}
}
