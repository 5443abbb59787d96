package pglease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/fencetest"
)

// lateDrivers are the drivers, and pgx at REPEATABLE READ, where the
// transaction's snapshot is the first statement's: a late check must not
// go by it either.
var lateDrivers = append(append([]driver(nil), drivers...), pgxDriver("pgx repeatable read", pgx.TxOptions{IsoLevel: pgx.RepeatableRead}))

// TestLateCheckAfterExpiry: a transaction checks its term (it holds), writes,
// and stays open while the term's session expires (the holder stops
// renewing, as a paused or cut-off leader does) and a successor queues,
// whose takeover of the expired session waits for the transaction's locks.
// A check made then, in the same transaction, must refuse the term: the
// session's liveness is of the statement's instant by the database's
// clock (clock_timestamp()), not of the transaction's start (now(), which
// agrees with it only at the transaction's first statement, where the
// other tests check). The transaction rolls back, its write never lands,
// and the successor takes over once it has ended.
//
// With the transaction's clock (patch: `x.expires_at > clock_timestamp()`
// to `x.expires_at > now()` in fenceSQL in backend/postgres/records.go),
// this test fails on every driver with: "the check made in the
// transaction after the session had expired (0.03s after, by the
// database's clock) passed: the term counted as alive at the
// transaction's start", while every other test of the package passes.
func TestLateCheckAfterExpiry(t *testing.T) {
	for _, d := range lateDrivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const ttl = time.Second
			s := e.open(t, ttl)
			l := acquire(t, s)
			// A full TTL for the transaction's first check.
			if _, err := s.KeepAlive(fencetest.Ctx(t)); err != nil {
				t.Fatal(err)
			}
			x := d.begin(t, e)
			if err := x.check("job", l.Token()); err != nil {
				t.Fatalf("the holder's first check, within its TTL: %v", err)
			}
			if err := x.exec("INSERT INTO " + e.schema + ".app (k, v) VALUES ('job', 1)"); err != nil {
				t.Fatal(err)
			}

			next := e.successor(t)
			e.waitExpired(t, s)
			e.waitLockWaiter(t, func() bool { return len(next) > 0 })
			var since float64
			if err := e.pool.QueryRow(fencetest.Ctx(t), "SELECT EXTRACT(EPOCH FROM clock_timestamp() - expires_at)::float8 FROM "+e.schema+".sessions WHERE id = $1::bigint", s.ID()).Scan(&since); err != nil {
				t.Fatalf("reading the expired session's row, which the successor's deletion waits to delete: %v", err)
			}

			err := x.check("job", l.Token())
			if err == nil {
				t.Fatalf("the check made in the transaction after the session had expired (%.2fs after, by the database's clock) passed: the term counted as alive at the transaction's start", since)
			}
			var se *fence.StaleError
			if !errors.As(err, &se) || se.Resource != "job" || se.Token != l.Token() || se.Highest < l.Token() {
				t.Fatalf("the late check: got %v, want a *fence.StaleError of lease job, token %d, highest at least %d", err, l.Token(), l.Token())
			}
			if err := x.rollback(); err != nil {
				t.Fatalf("the rollback after the refused check: %v", err)
			}
			if got := e.value(t); got != -1 {
				t.Fatalf("value %d after the rollback, want none: the refused transaction's write landed", got)
			}
			a := await.For(t, next, bound, "the successor's Acquire did not return after the refused transaction rolled back")
			if a.err != nil {
				t.Fatalf("the successor's Acquire: %v", a.err)
			}
			stale(t, e.write(t, d, l.Token(), 2), l.Token(), a.l.Token())
			if err := e.write(t, d, a.l.Token(), 3); err != nil {
				t.Fatalf("the successor's write: %v", err)
			}
			if got := e.value(t); got != 3 {
				t.Fatalf("value %d, want 3, the successor's write", got)
			}
		})
	}
}
