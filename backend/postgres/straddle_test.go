package postgres_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/internal/pgtest"
)

// TestRenewalStraddlingExpiryKeepsTheLease: a renewal whose UPDATE passed
// its liveness test before the holder's expiry and commits after it holds
// the session row's lock meanwhile. A waiter that reads the queue then
// sees, in its snapshot, the old and past expiry; its DELETE of the expired
// session waits for the renewal and leaves the renewed row alone. The
// waiter must not take the lease on the strength of its snapshot: the
// holder's renewal succeeded, so its term goes on.
//
// The straddle is built without timing: a first transaction makes the
// committed row expired while a second, queued behind it on the row's
// lock, renews it and stays open; the waiter is woken by a notification,
// and the renewal commits once the waiter's DELETE waits for its lock.
func TestRenewalStraddlingExpiryKeepsTheLease(t *testing.T) {
	b := newBackend(t)
	a, c := open(t, b, 30*time.Second), open(t, b, 30*time.Second)
	la, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	id, err := strconv.ParseInt(a.ID(), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{b.Schema()}.Sanitize()
	conn := func() *pgx.Conn {
		cn, err := pgx.Connect(ctxT(t), pgtest.DSN(t)+"&application_name=straddle")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cn.Close(context.Background()) })
		return cn
	}
	expirer, renewer := conn(), conn()

	waiting, cancelWait := context.WithCancel(ctxT(t))
	defer cancelWait()
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(waiting, "x")
		if err == nil {
			err = errors.New("the waiter got the lease (token " + strconv.FormatUint(l.Token(), 10) + ")")
		}
		got <- err
	}()
	// The waiter has registered and sleeps until the holder's expiry.
	mustEventually(t, "the waiter's candidacy", func() bool {
		n := 0
		_ = b.Pool().QueryRow(ctxT(t), "SELECT count(*) FROM "+q+".candidacies WHERE name = 'x'").Scan(&n)
		return n == 2
	})

	tx1, err := expirer.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	// The expiry made is one the waiter's step guard vouches for (see
	// clock.go): an hour ago, with a TTL of 1ms, which the waiter's
	// readings of the database's clock have covered many times over.
	if _, err := tx1.Exec(ctxT(t), "UPDATE "+q+".sessions SET expires_at = clock_timestamp() - interval '1 hour', ttl = interval '1 millisecond' WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}
	tx2, err := renewer.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	renewed := make(chan error, 1)
	go func() {
		// The renewal, past its liveness test: it waits for tx1's lock.
		_, err := tx2.Exec(ctxT(t), "UPDATE "+q+".sessions SET expires_at = clock_timestamp() + interval '30 seconds', ttl = interval '30 seconds' WHERE id = $1", id)
		renewed <- err
	}()
	mustEventually(t, "the renewal waiting for the expirer's lock", func() bool { return lockWaiters(t, "straddle") > 0 })
	if err := tx1.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-renewed; err != nil {
		t.Fatalf("renewal: %v", err)
	}
	// Committed: expired. Locked by the open renewal: alive. Wake the
	// waiter, and let the renewal commit once its DELETE waits.
	if _, err := expirer.Exec(ctxT(t), "SELECT pg_notify($1, 'c x')", "simba."+b.Schema()); err != nil {
		t.Fatal(err)
	}
	mustEventually(t, "the waiter's DELETE waiting for the renewal's lock", func() bool {
		n := 0
		_ = b.Pool().QueryRow(ctxT(t), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%gone AS%'").Scan(&n)
		return n > 0
	})
	if err := tx2.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// The waiter's statement finishes; with the bug it returns the lease
	// at once. Give it time to, then end its wait.
	mustEventually(t, "the waiter's read to finish", func() bool {
		n := 1
		_ = b.Pool().QueryRow(ctxT(t), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%gone AS%'").Scan(&n)
		return n == 0
	})
	select {
	case err := <-got:
		t.Fatalf("while the holder's renewal succeeded: %v", err)
	case <-time.After(time.Second):
	}
	cancelWait()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter's Acquire, its ctx cancelled: %v, want context.Canceled", err)
	}
	select {
	case <-la.Lost():
		t.Fatal("the holder's lease was lost, though its session was renewed")
	default:
	}
	if _, err := a.KeepAlive(ctxT(t)); err != nil {
		t.Fatalf("the holder's next KeepAlive: %v", err)
	}
}

// mustEventually polls cond (see eventually) for up to opTimeout, and
// fails the test, naming what, if it never holds.
func mustEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !eventually(opTimeout, cond) {
		t.Fatalf("%s: not within %v", what, opTimeout)
	}
}
