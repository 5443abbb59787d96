package etcd_test

import (
	"errors"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/etcdtest"
)

// TestReleaseOfDeletedHoldingClosesLost: a Release that finds the holding's
// candidacy key deleted (by an operator) while the session's watch of the
// lease keys has not yet told the holding returns ErrNotHeld and closes
// Lost itself: the Release unregisters the holding from the watch, so the
// deletion's event, when the watch gets to it, no longer reaches it.
//
// The watch is held back by the test: the OnLost function of another
// holding of the same session, which runs on the watch's goroutine, waits
// until the Release has returned (a watch goroutine descheduled on a
// loaded machine does the same).
//
// Kills the mutant backend/etcd/lease.go:413:3:call (l.sig.Lose()
// removed from release's failed-compare branch): fails with "Lost of the
// deleted holding not closed within 5s of its Release returning ErrNotHeld
// (...) and of the watch going on".
func TestReleaseOfDeletedHoldingClosesLost(t *testing.T) {
	srv := etcdtest.Start(t)
	b := newBackend(t, srv.Endpoints(), etcd.WithPrefix(testPrefix(t)))
	s := open(t, b, 10*time.Second) // not renewed: a TTL that outlasts the test
	blocker, err := s.Acquire(op(t), "blocker")
	if err != nil {
		t.Fatalf("Acquire(blocker): %v", err)
	}
	held, err := s.Acquire(op(t), "held")
	if err != nil {
		t.Fatalf("Acquire(held): %v", err)
	}

	// The watch's goroutine stops in blocker's OnLost until unblock
	// (bounded: it never outlives the test by more than opTimeout).
	entered, unblock := make(chan struct{}), make(chan struct{})
	blocker.(backend.LostNotifier).OnLost(func() {
		close(entered)
		select {
		case <-unblock:
		case <-time.After(opTimeout):
		}
	})
	released := false
	defer func() {
		if !released {
			close(unblock)
		}
	}()
	cli := b.Client()
	key := func(name string) string { return b.Prefix() + "lease/" + name + "/" + s.ID() }
	if _, err := cli.Delete(op(t), key("blocker")); err != nil {
		t.Fatalf("deleting %s: %v", key("blocker"), err)
	}
	if !waitFor(entered, opTimeout) {
		t.Fatalf("blocker's OnLost not called within %v of the deletion of its key %s", opTimeout, key("blocker"))
	}
	if _, err := cli.Delete(op(t), key("held")); err != nil {
		t.Fatalf("deleting %s: %v", key("held"), err)
	}
	if closed(held.Lost()) {
		t.Fatalf("held's Lost closed while the watch's goroutine was held back: the test does not reach the release's own check")
	}
	err = held.Release(op(t))
	if !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("Release of a holding whose key was deleted: error %v, want one wrapping ErrNotHeld", err)
	}
	released = true
	close(unblock)
	if !waitFor(held.Lost(), 5*time.Second) {
		t.Errorf("Lost of the deleted holding not closed within 5s of its Release returning ErrNotHeld (%v) and of the watch going on", err)
	}
}
