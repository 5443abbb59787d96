package kubernetes_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/kubetest"
)

var (
	serverOnce sync.Once
	server     *kubetest.Server
)

// newBackend returns a backend in a fresh namespace of its own on the
// test's server, closed at the end of the test.
func newBackend(t *testing.T, srv *kubetest.Server, opts ...kubernetes.Option) *kubernetes.Backend {
	t.Helper()
	ns := srv.Namespace(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := kubernetes.New(srv.Admin(), append([]kubernetes.Option{kubernetes.WithNamespace(ns), kubernetes.WithLogger(log)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// The conformance suite runs in TestLeastPrivilege (rbac_test.go), as a
// user bound only to kubernetes.Role, each case in a namespace of its own:
// the stricter of the two ways, so the suite does not run a second time as
// the admin. The TTL is 2s, as for etcd and PostgreSQL, so that renewals
// every TTL/3 keep sessions alive on a busy machine under the race
// detector.

var malformer = backendtest.Malformer{
	SpoilRecord: func(t *testing.T, b backend.Backend, key string) {
		kb := b.(*kubernetes.Backend)
		leases := kb.Client().CoordinationV1().Leases(kb.Namespace())
		list, err := leases.List(t.Context(), metav1.ListOptions{LabelSelector: "simba.io/kind=record"})
		if err != nil {
			t.Fatalf("SpoilRecord: %v", err)
		}
		for _, l := range list.Items {
			if l.Annotations["simba.io/key"] != key {
				continue
			}
			l.Annotations["simba.io/value"] = "!!not base64!!"
			if _, err := leases.Update(t.Context(), &l, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("SpoilRecord: %v", err)
			}
			return
		}
		t.Fatalf("SpoilRecord: no record object for %q", key)
	},
	PlantMember: func(t *testing.T, b backend.Backend, group string) string {
		kb := b.(*kubernetes.Backend)
		leases := kb.Client().CoordinationV1().Leases(kb.Namespace())
		list, err := leases.List(t.Context(), metav1.ListOptions{LabelSelector: "simba.io/kind=session"})
		if err != nil || len(list.Items) == 0 {
			t.Fatalf("PlantMember: listing sessions: %v (%d)", err, len(list.Items))
		}
		// The group label of a live member, copied onto a planted object.
		var label string
		for k := range list.Items[0].Labels {
			if strings.HasPrefix(k, "g.simba.io/") {
				label = k
			}
		}
		if label == "" {
			t.Fatalf("PlantMember: no member of %q", group)
		}
		var raw [16]byte
		_, _ = rand.Read(raw[:])
		id := hex.EncodeToString(raw[:])
		ttl := "60000"
		_, err = leases.Create(t.Context(), &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name:        "simba-s-" + id,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "simba", "simba.io/kind": "session", label: "1"},
			Annotations: map[string]string{"simba.io/ttl-ms": ttl, "m.simba.io/" + strings.TrimPrefix(label, "g.simba.io/"): "{garbage"},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("PlantMember: %v", err)
		}
		return id
	},
}

// fingerprint describes every simba object but the sessions' renewals.
func fingerprint(t *testing.T, b backend.Backend) string {
	kb := b.(*kubernetes.Backend)
	list, err := kb.Client().CoordinationV1().Leases(kb.Namespace()).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("fingerprint: %v", err)
	}
	var out []string
	for _, l := range list.Items {
		if l.Labels["simba.io/kind"] == "session" {
			out = append(out, l.Name)
			continue
		}
		out = append(out, fmt.Sprintf("%s %s %v", l.Name, l.ResourceVersion, l.Annotations))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// TestCrashedHolderTakeover: a holder whose client is gone (its backend
// closed: nothing renews it and nothing deletes it) is taken over by a
// waiter of another backend, no sooner than TTL + margin after the waiter
// began to observe it, with a larger token.
func TestCrashedHolderTakeover(t *testing.T) {
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	mk := func() *kubernetes.Backend {
		b, err := kubernetes.New(srv.Admin(), kubernetes.WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	ba, bb := mk(), mk()
	const ttl = 2 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sa, err := ba.Open(ctx, backend.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	la, err := sa.Acquire(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	ba.Close() // the crash: sa's object stays, unrenewed
	sb, err := bb.Open(ctx, backend.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	renewed := make(chan struct{})
	rctx, stop := context.WithCancel(ctx)
	go func() { // sb renews itself while it waits
		defer close(renewed)
		for backoff.Sleep(rctx, ttl/3) {
			if _, err := sb.KeepAlive(rctx); err != nil && rctx.Err() == nil {
				t.Errorf("KeepAlive of the waiter: %v", err)
				return
			}
		}
	}()
	defer func() { stop(); <-renewed }()
	start := time.Now()
	lb, err := sb.Acquire(ctx, "crash")
	if err != nil {
		t.Fatalf("Acquire after the holder crashed: %v", err)
	}
	if took, least := time.Since(start), ttl+ttl/10; took < least {
		t.Errorf("took over after %v, before TTL + margin (%v) of observation", took, least)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after the take-over, want > %d", lb.Token(), la.Token())
	}
	if _, err := bb.Client().CoordinationV1().Leases(ns).Get(ctx, "simba-s-"+sa.ID(), metav1.GetOptions{}); err == nil {
		t.Errorf("the crashed session's object still exists after the take-over")
	}
}
