package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/pgtest"
	"github.com/simba-go/simba/internal/plant"
)

// skewedClock gives the test a database clock it can step: a function
// clock_timestamp() in a schema of the test's own, which returns
// pg_catalog's plus an offset held in a table, shadows pg_catalog's on
// connections whose search_path names that schema first (the backend's
// statements call clock_timestamp() unqualified). It returns the DSN of
// such connections and a function that sets the offset.
func skewedClock(t *testing.T) (dsn string, step func(time.Duration)) {
	t.Helper()
	clock := pgtest.Schema(t)
	q := pgx.Identifier{clock}.Sanitize()
	pgtest.Exec(t, "CREATE SCHEMA "+q)
	pgtest.Exec(t, "CREATE TABLE "+q+".skew (d interval NOT NULL)")
	pgtest.Exec(t, "INSERT INTO "+q+".skew VALUES (interval '0')")
	pgtest.Exec(t, "CREATE FUNCTION "+q+".clock_timestamp() RETURNS timestamptz LANGUAGE sql VOLATILE AS $$ SELECT pg_catalog.clock_timestamp() + (SELECT d FROM "+q+".skew) $$")
	dsn = pgtest.DSN(t) + "&search_path=" + url.QueryEscape(clock+",pg_catalog")
	return dsn, func(d time.Duration) {
		pgtest.Exec(t, "UPDATE "+q+".skew SET d = $1", d)
	}
}

// TestClockStepForward: the database's clock steps forward by more than
// the TTL while a session holds a lease and another waits for it, so that
// by the database's clock every session has expired at once. The waiter
// must not be granted the lease before the holder's own deadline (the
// start of its last successful renewal plus the TTL, on its clock): its
// client cannot know of the step before its next renewal fails, and until
// its deadline its term counts as valid. The waiter does get the lease
// after, and the step is seen and counted.
//
// The step comes as soon as the waiter queues, before the holder has
// renewed within the waiter's chain of samples (see clock.go): the holder's
// session is then vouched for only by the chain's age, which a chain that
// does not restart on the step has not reached either.
// TestClockStepAfterRenewal steps after such a renewal.
func TestClockStepForward(t *testing.T) {
	granted, deadline, steps := clockStep(t, false)
	if granted.Before(deadline) {
		t.Fatalf("the waiter was granted the lease %v before the holder's deadline: two valid terms", deadline.Sub(granted))
	}
	if steps == 0 {
		t.Error("no step of the database's clock was seen")
	}
	t.Logf("granted %v after the holder's deadline", granted.Sub(deadline).Round(time.Millisecond))
}

// TestClockStepAfterRenewal is TestClockStepForward with the step made
// only once the holder has renewed after the waiter's chain of agreeing
// samples began: the holder's renewal (expires_at − ttl) is then at or
// after the chain's first database time, which vouches for the session's
// expiry as long as the chain lasts. The step must end that chain, so
// that the renewal, made before the step, no longer counts as made within
// it; then the waiter takes the session over only once its new chain is
// 1.1 × TTL old, or when the holder itself deletes its row past its
// deadline, and never before that deadline.
//
// Without the chain's restart on a step (patch: delete the line
// `k.chainAt, k.chainDB = received, db` in the step branch of dbClock.note
// in clock.go), this test fails with: "the waiter was granted the lease
// 1.872006974s before the holder's deadline: two valid terms" (once it
// had seen the step, the waiter deleted the holder's row at once: a
// renewal within the unbroken chain, and an expiry before the stepped
// time the chain verified), while TestClockStepForward, which steps
// before any renewal within the chain, passes. With
// SIMBA_PLANT=trust-db-clock (the guard planted out) it fails the same
// way ("granted the lease 1.880304202s before").
func TestClockStepAfterRenewal(t *testing.T) {
	granted, deadline, steps := clockStep(t, true)
	if granted.Before(deadline) {
		t.Fatalf("the waiter was granted the lease %v before the holder's deadline: two valid terms", deadline.Sub(granted))
	}
	if steps == 0 {
		t.Error("no step of the database's clock was seen")
	}
	t.Logf("granted %v after the holder's deadline", granted.Sub(deadline).Round(time.Millisecond))
}

// TestClockStepCaughtWithoutGuard plants the bug the step guard fixes
// (expired sessions deleted by the statement's own clock, the holder's
// own row included): the same steps, before and after a renewal within
// the waiter's chain, must then grant the lease before the holder's
// deadline, or TestClockStepForward and TestClockStepAfterRenewal prove
// nothing.
func TestClockStepCaughtWithoutGuard(t *testing.T) {
	plant.ForTest(t, "trust-db-clock")
	for _, renewed := range []bool{false, true} {
		t.Run(map[bool]string{false: "before renewal", true: "after renewal"}[renewed], func(t *testing.T) {
			granted, deadline, _ := clockStep(t, renewed)
			if !granted.Before(deadline) {
				t.Fatalf("with the guard planted out, the waiter was granted the lease only %v after the holder's deadline: the test cannot tell the guard's work", granted.Sub(deadline))
			}
		})
	}
}

// clockStep runs the scenario of TestClockStepForward and returns when
// the waiter was granted the lease, the holder's deadline, and how many
// steps the waiter's backend saw. The step expires the waiter's own
// session too: like simba's client, it opens another and contends again.
// With renewed, the step waits until the holder has renewed after the
// waiter's backend took its first sample of the database's clock (its
// first Open), that is within the waiter's chain of agreeing samples.
func clockStep(t *testing.T, renewed bool) (granted, deadline time.Time, steps int) {
	const ttl = 2 * time.Second
	dsn, step := skewedClock(t)
	schema := pgtest.Schema(t)
	newB := func() *postgres.Backend {
		b, err := postgres.New(dsn, postgres.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	holderB, waiterB := newB(), newB()
	holder := open(t, holderB, ttl)
	if _, err := holder.Acquire(ctxT(t), "x"); err != nil {
		t.Fatal(err)
	}
	hr := renew(t, holder)

	got := make(chan time.Time, 1)
	gotErr := make(chan error, 1)
	go func() {
		for {
			s, err := waiterB.Open(ctxT(t), backend.SessionOptions{TTL: ttl})
			if err != nil {
				gotErr <- err
				return
			}
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			renew(t, s)
			_, err = s.Acquire(ctxT(t), "x")
			if err == nil {
				got <- time.Now()
				return
			}
			if !errors.Is(err, backend.ErrSessionDone) {
				gotErr <- err
				return
			}
		}
	}()
	q := pgx.Identifier{schema}.Sanitize()
	mustEventually(t, "the waiter's candidacy", func() bool {
		n := 0
		_ = holderB.Pool().QueryRow(ctxT(t), "SELECT count(*) FROM "+q+".candidacies WHERE name = 'x'").Scan(&n)
		return n == 2
	})

	if renewed {
		// The waiter's first sample, its first Open, came before its
		// candidacy: a renewal of the holder's later than now is within
		// the waiter's chain.
		ctx := ctxT(t)
		var chainBy, renewedAt time.Time
		if err := holderB.Pool().QueryRow(ctx, "SELECT clock_timestamp()").Scan(&chainBy); err != nil {
			t.Fatal(err)
		}
		id, err := strconv.ParseInt(holder.ID(), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		mustEventually(t, "a renewal of the holder's after the waiter's first sample", func() bool {
			err := holderB.Pool().QueryRow(ctx, "SELECT expires_at - ttl FROM "+q+".sessions WHERE id = $1", id).Scan(&renewedAt)
			return err == nil && renewedAt.After(chainBy)
		})
		t.Logf("the holder renewed %v after the waiter's chain began at the latest", renewedAt.Sub(chainBy).Round(time.Millisecond))
	}
	step(5 * time.Second) // more than the TTL: every session looks expired
	// Wake the waiter at once, rather than at the expiry it last read.
	pgtest.Exec(t, "SELECT pg_notify($1, 'c x')", "simba."+schema)

	select {
	case <-holder.Done():
	case <-time.After(opTimeout):
		t.Fatal("the holder's session still lives after the step")
	}
	deadline = hr.halt()
	select {
	case granted = <-got:
	case err := <-gotErr:
		t.Fatalf("the waiter: %v", err)
	case <-time.After(opTimeout):
		t.Fatalf("the waiter was not granted the lease within %v of the step", opTimeout)
	}
	steps, _ = postgres.StepsSeen(waiterB)
	return granted, deadline, steps
}
