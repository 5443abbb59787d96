package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
)

// The checks an Acquire makes on its own candidacy each time it reads the
// queue (queue.Ahead and ahead in lease.go), besides "nobody ahead": that
// its session is alive and that its candidacy is still there. Through the
// API they look redundant (the session's renewals and its monitor end a
// waiter whose session expires; nothing else deletes a waiting
// candidacy), so these tests arrange what makes them count: a waiter's row
// expired by the database's clock before the waiter's own deadline, and a
// waiting candidacy deleted by the session's own second Acquire.

// TestWaiterExpiredLate: a waiter's session expires by the database's
// clock while it waits (its row is set expired by hand, as a forward step
// of the database's clock that its client cannot see yet does; its own
// deadline is far, so nothing of its client ends the session), and then
// the holder releases. The waiter must not be granted the lease: its
// Acquire fails with ErrSessionDone, and the session ends.
//
// Without the liveness check (patch: `case !alive:` to `case !alive &&
// false:` in queue.Ahead in lease.go), this test fails with: "the waiter whose session
// had expired by the database's clock was granted the lease (token 2)": a
// term on a session that any contender may delete, and then be granted the
// lease too.
func TestWaiterExpiredLate(t *testing.T) {
	b := newBackend(t)
	a := open(t, b, time.Minute)
	la, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	w := open(t, b, time.Minute) // nothing renews it: its deadline is a minute away
	got := backendtest.AcquireAsync(ctxT(t), w, "x")
	q := `"` + b.Schema() + `"`
	mustEventually(t, "the waiter's candidacy", func() bool {
		var n int
		err := b.Pool().QueryRow(ctxT(t), "SELECT count(*) FROM "+q+".candidacies WHERE name = 'x' AND session = $1::bigint", w.ID()).Scan(&n)
		return err == nil && n == 1
	})
	if _, err := b.Pool().Exec(ctxT(t), "UPDATE "+q+".sessions SET expires_at = clock_timestamp() - interval '1 second' WHERE id = $1::bigint", w.ID()); err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatalf("the holder's Release: %v", err)
	}
	select {
	case r := <-got:
		if r.Err == nil {
			t.Fatalf("the waiter whose session had expired by the database's clock was granted the lease (token %d)", r.Lease.Token())
		}
		if !errors.Is(r.Err, backend.ErrSessionDone) {
			t.Fatalf("the waiter whose session had expired: %v, want an error wrapping ErrSessionDone", r.Err)
		}
	case <-time.After(opTimeout):
		t.Fatalf("the waiter whose session had expired did not return within %v of the release", opTimeout)
	}
	select {
	case <-w.Done():
	case <-time.After(opTimeout):
		t.Fatalf("Done of the waiter's expired session not closed within %v", opTimeout)
	}
}

// TestWaiterReplacedLate: a session waits for a lease, and Acquires it
// again while it waits; the second registration deletes the first
// candidacy (a re-Acquire queues at the back). The first Acquire must then
// fail, not wait on and be granted the lease with a token no candidacy
// holds, once the holder has released; the second gets the lease.
//
// Without the check that the candidacy is still there (patch: `case
// !mine:` to `case !mine && false:` in queue.Ahead in lease.go), this test
// fails with:
// "the first Acquire, whose candidacy the second deleted, was granted the
// lease with token 2, as the second was with token 3": two terms of one
// session at once, the first fencing nothing.
func TestWaiterReplacedLate(t *testing.T) {
	b := newBackend(t)
	a := open(t, b, time.Minute)
	la, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	w := open(t, b, time.Minute)
	renew(t, w)
	q := `"` + b.Schema() + `"`
	tokens := func() (n int, last int64) {
		err := b.Pool().QueryRow(ctxT(t), "SELECT count(*), COALESCE(max(token), 0) FROM "+q+".candidacies WHERE name = 'x' AND session = $1::bigint", w.ID()).Scan(&n, &last)
		if err != nil {
			t.Fatal(err)
		}
		return n, last
	}
	first := backendtest.AcquireAsync(ctxT(t), w, "x")
	mustEventually(t, "the first candidacy", func() bool { n, _ := tokens(); return n == 1 })
	second := backendtest.AcquireAsync(ctxT(t), w, "x")
	mustEventually(t, "the second candidacy, in place of the first", func() bool {
		n, last := tokens()
		return n == 1 && last > int64(la.Token())+1
	})
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatalf("the holder's Release: %v", err)
	}
	var r1, r2 backendtest.Acquired
	for _, c := range []struct {
		ch  <-chan backendtest.Acquired
		r   *backendtest.Acquired
		why string
	}{{first, &r1, "the first Acquire"}, {second, &r2, "the second Acquire"}} {
		select {
		case *c.r = <-c.ch:
		case <-time.After(opTimeout):
			t.Fatalf("%s did not return within %v of the release", c.why, opTimeout)
		}
	}
	if r1.Err == nil {
		t.Fatalf("the first Acquire, whose candidacy the second deleted, was granted the lease with token %d, as the second was with token %v", r1.Lease.Token(), tokenOf(r2))
	}
	if !strings.Contains(r1.Err.Error(), "deleted while it waited") {
		t.Errorf("the first Acquire: %v, want an error saying its candidacy was deleted while it waited", r1.Err)
	}
	if r2.Err != nil {
		t.Fatalf("the second Acquire: %v", r2.Err)
	}
	if r2.Lease.Token() <= la.Token() {
		t.Fatalf("the second Acquire's token %d is not above the holder's %d", r2.Lease.Token(), la.Token())
	}
}

// tokenOf is the token of r's lease, or its error.
func tokenOf(r backendtest.Acquired) any {
	if r.Err != nil {
		return r.Err
	}
	return r.Lease.Token()
}
