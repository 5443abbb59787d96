package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/pgtest"
)

// TestLateRegistrationOfCancelledAcquire: a registration whose Acquire's
// ctx ended while its statement was on its way (the outcome unknown) and
// that reaches the server only after the session's next Acquire of the
// name holds it changes nothing: the holding stays, its Release frees the
// name, and no candidacy is left that the session does not know.
func TestLateRegistrationOfCancelledAcquire(t *testing.T) {
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	// The simple protocol: the statement goes out whole, not after a
	// round trip to prepare it.
	qv := u.Query()
	qv.Set("default_query_exec_mode", "simple_protocol")
	u.RawQuery = qv.Encode()
	b := newBackendAt(t, u.String())
	a, c := open(t, b, time.Minute), open(t, b, time.Minute)
	// Connections in the pool, so that the registration is sent at once.
	for range 3 {
		l, err := a.Acquire(ctxT(t), "warm")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	const arrival = 2 * time.Second
	p.DelayRequests(arrival)
	sent := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := a.Acquire(ctx, "x")
		res <- err
	}()
	time.Sleep(100 * time.Millisecond)
	p.DelayRequests(0) // what is sent from now on goes through at once
	if err := <-res; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the Acquire whose registration is held: %v, want DeadlineExceeded", err)
	}
	if time.Since(sent) > arrival {
		t.Skipf("the cancelled Acquire took %v, past the registration's arrival", time.Since(sent))
	}
	l, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatalf("the next Acquire: %v", err)
	}
	t.Logf("the next Acquire holds token %d, %v after the first was sent", l.Token(), time.Since(sent))
	// The sessions table locked, on a connection of the test's own, so
	// that the late registration, when it reaches the server, waits for it
	// where the test sees it: the proof that it ran.
	cn, mon := connect(t), connect(t) // mon outside the transaction: a transaction sees one snapshot of pg_stat_activity
	tx, err := cn.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	q := pgx.Identifier{b.Schema()}.Sanitize()
	if _, err := tx.Exec(ctxT(t), "LOCK TABLE "+q+".sessions IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	if time.Since(sent) > arrival {
		t.Skipf("the sessions table was locked %v after the first registration was sent, past its arrival", time.Since(sent))
	}
	// The backends running a registration's statement in this test's
	// schema (with the values in its text: the simple protocol), that also
	// meet cond.
	running := func(cond string) int {
		var n int
		if err := mon.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()
			AND query LIKE 'WITH alive AS%' AND strpos(query, $1) > 0 AND state = 'active' AND `+cond, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	await.Until(t, opTimeout, "the late registration waiting for the sessions table", func() bool { return running("wait_event_type = 'Lock'") > 0 },
		func() string { return "not seen in pg_stat_activity" })
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	await.Until(t, opTimeout, "the late registration done", func() bool { return running("true") == 0 },
		func() string { return "still running in pg_stat_activity" })
	select {
	case <-l.Lost():
		t.Errorf("the holding was lost when the cancelled registration arrived")
	default:
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Errorf("Release: %v", err)
	}
	ids, err := c.(backend.CandidateLister).Candidates(ctxT(t), "x")
	if err != nil || len(ids) != 0 {
		t.Errorf("candidacies of x after the Release: %q, %v; want none", ids, err)
	}
}

// TestRegistrationUnderTheFloor: a registration numbered at or under the
// session's floor (raised by the withdrawal of another whose outcome was
// unknown, here by hand) writes nothing and is tried again with a new
// number; one that stays under it fails with an error that says so, and
// leaves nothing.
func TestRegistrationUnderTheFloor(t *testing.T) {
	b := newBackend(t)
	a := open(t, b, time.Minute)
	id, err := strconv.ParseInt(a.ID(), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{b.Schema()}.Sanitize()
	setFloor := func(floor int64) {
		t.Helper()
		if _, err := b.Pool().Exec(ctxT(t), "UPDATE "+q+".sessions SET reg_floor = $1 WHERE id = $2", floor, id); err != nil {
			t.Fatal(err)
		}
	}
	// Two numbers to come are under the floor: the third attempt holds.
	setFloor(2)
	l, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatalf("Acquire with two numbers under the floor: %v", err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	setFloor(1000)
	if _, err := a.Acquire(ctxT(t), "x"); err == nil || !strings.Contains(err.Error(), "superseded") {
		t.Errorf("Acquire with every attempt under the floor: %v, want an error saying it was superseded", err)
	}
	var n int
	if err := b.Pool().QueryRow(ctxT(t), "SELECT count(*) FROM "+q+".candidacies").Scan(&n); err != nil || n != 0 {
		t.Errorf("candidacies left: %d, %v; want none", n, err)
	}
}

// TestUpgradeFromVersion1: a schema of version 1 (without the
// registrations' numbers) is upgraded to version 2 on first use, and
// works.
func TestUpgradeFromVersion1(t *testing.T) {
	dsn, schema := pgtest.DSN(t), pgtest.Schema(t)
	old := newBackendIn(t, dsn, schema)
	open(t, old, time.Minute) // the schema, of version 2
	q := pgx.Identifier{schema}.Sanitize()
	execOn(t, dsn, "ALTER TABLE "+q+".candidacies DROP COLUMN reg; ALTER TABLE "+q+".sessions DROP COLUMN reg_floor; UPDATE "+q+".meta SET value = 1 WHERE key = 'version'")
	b := newBackendIn(t, dsn, schema)
	a := open(t, b, time.Minute)
	l, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatalf("Acquire on the upgraded schema: %v", err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var v int64
	if err := b.Pool().QueryRow(ctxT(t), "SELECT value FROM "+q+".meta WHERE key = 'version'").Scan(&v); err != nil || v != 2 {
		t.Errorf("version after the upgrade: %d, %v; want 2", v, err)
	}
}

// connect opens a connection of the test's own to the test server, not
// through a proxy, closed at the end of the test.
func connect(t *testing.T) *pgx.Conn {
	t.Helper()
	cn, err := pgx.Connect(ctxT(t), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cn.Close(context.Background()) })
	return cn
}
