package postgres_test

import (
	"context"
	"errors"
	"net/url"
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
func TestClockStepForward(t *testing.T) {
	granted, deadline, steps := clockStep(t)
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
// own row included): the same step must then grant the lease before the
// holder's deadline, or TestClockStepForward proves nothing.
func TestClockStepCaughtWithoutGuard(t *testing.T) {
	undo, err := plant.Set("trust-db-clock")
	if err != nil {
		t.Fatal(err)
	}
	defer undo()
	granted, deadline, _ := clockStep(t)
	if !granted.Before(deadline) {
		t.Fatalf("with the guard planted out, the waiter was granted the lease only %v after the holder's deadline: the test cannot tell the guard's work", granted.Sub(deadline))
	}
}

// clockStep runs the scenario of TestClockStepForward and returns when
// the waiter was granted the lease, the holder's deadline, and how many
// steps the waiter's backend saw. The step expires the waiter's own
// session too: like simba's client, it opens another and contends again.
func clockStep(t *testing.T) (granted, deadline time.Time, steps int) {
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
