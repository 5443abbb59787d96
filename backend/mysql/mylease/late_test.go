package mylease_test

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/fencetest"
)

// TestLateCheckAfterExpiry: a transaction checks its term (it holds), writes,
// and stays open while the term's session expires (the holder stops
// renewing, as a paused or cut-off leader does) and a successor waits for
// the transaction's locks. A check made then, in the same transaction,
// must refuse the term: the session's liveness is of the statement's
// instant by the database's clock (UTC_TIMESTAMP, fixed per statement),
// not of the transaction's start, at every isolation level (at REPEATABLE
// READ the session's expiry comes from the snapshot of the first check,
// but the clock it is compared with is the late statement's). The
// transaction rolls back, its write never lands, and the successor takes
// over once it has ended.
func TestLateCheckAfterExpiry(t *testing.T) {
	for _, l := range allLevels {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const ttl = time.Second
			s := e.open(t, ttl)
			lease := acquire(t, s)
			// A full TTL for the transaction's first check.
			if _, err := s.KeepAlive(fencetest.Ctx(t)); err != nil {
				t.Fatal(err)
			}
			x := e.begin(t, l)
			if err := x.check("job", lease.Token()); err != nil {
				t.Fatalf("the holder's first check, within its TTL: %v", err)
			}
			if err := x.exec("INSERT INTO app (k, v) VALUES ('job', 1)"); err != nil {
				t.Fatal(err)
			}

			next := e.successor(t)
			e.waitExpired(t, s)
			e.waitTakeoverWaits(t, next)
			var since int64
			if err := e.db.QueryRowContext(fencetest.Ctx(t), "SELECT "+nowUS+" - expires_us FROM "+e.table("sessions")+" WHERE id = ?", s.ID()).Scan(&since); err != nil {
				t.Fatalf("reading the expired session's row, which the successor waits to delete: %v", err)
			}

			err := x.check("job", lease.Token())
			if err == nil {
				t.Fatalf("the check made in the transaction after the session had expired (%.2fs after, by the database's clock) passed: the term counted as alive at the transaction's start", float64(since)/1e6)
			}
			var se *fence.StaleError
			if !errors.As(err, &se) || se.Resource != "job" || se.Token != lease.Token() || se.Highest < lease.Token() {
				t.Fatalf("the late check: got %v, want a *fence.StaleError of lease job, token %d, highest at least %d", err, lease.Token(), lease.Token())
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
			stale(t, e.write(t, l, lease.Token(), 2), lease.Token(), a.l.Token())
			if err := e.write(t, l, a.l.Token(), 3); err != nil {
				t.Fatalf("the successor's write: %v", err)
			}
			if got := e.value(t); got != 3 {
				t.Fatalf("value %d, want 3, the successor's write", got)
			}
		})
	}
}

// snapshot begins a REPEATABLE READ transaction and takes its snapshot
// now, with a plain SELECT of the application's table (InnoDB takes a
// transaction's snapshot at its first consistent read, of every table).
// With strict, the transaction runs on a connection with MariaDB's
// innodb_snapshot_isolation on: a locking read of a row changed since the
// snapshot fails (error 1020) instead of reading it.
func (e *env) snapshot(t *testing.T, strict bool) tx {
	t.Helper()
	rr := &sql.TxOptions{Isolation: sql.LevelRepeatableRead}
	var x tx
	if strict {
		if e.strict == nil {
			e.strict = e.dbWith(t, "innodb_snapshot_isolation", "ON")
		}
		sx, err := e.strict.BeginTx(t.Context(), rr)
		if err != nil {
			t.Skipf("no innodb_snapshot_isolation (MariaDB 10.6.18, 10.11.8 or later): %v", err)
		}
		t.Cleanup(func() { sx.Rollback() })
		x = tx{sx, e, t}
	} else {
		x = e.begin(t, level{"repeatable read", rr})
	}
	var n int
	if err := x.x.QueryRowContext(fencetest.Ctx(t), "SELECT COUNT(*) FROM app").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return x
}

// checkOnly checks (lease, token) in x and rolls x back: a refused check
// has locked the rows it read too, which would hold the backend's next
// steps off until x ended.
func (x tx) checkOnly(lease string, token uint64) error {
	x.t.Helper()
	err := x.check(lease, token)
	if rerr := x.rollback(); rerr != nil {
		x.t.Fatalf("rolling back after the check of (%s, %d): %v", lease, token, rerr)
	}
	return err
}

// refused checks that err refuses the term: a stale error, or (strict)
// the error of a row changed since the snapshot.
func refused(t *testing.T, err error, strict bool, what string) {
	t.Helper()
	var me *gomysql.MySQLError
	switch {
	case errors.Is(err, fence.ErrStale):
	case strict && errors.As(err, &me) && me.Number == 1020: // ER_CHECKREAD: record has changed since last read
		t.Logf("%s: %v", what, err)
	case err == nil:
		t.Fatalf("%s: passed, with a snapshot taken before the term was deposed: want it refused", what)
	default:
		t.Fatalf("%s: %v, want it refused (stale%s)", what, err, map[bool]string{true: " or error 1020", false: ""}[strict])
	}
}

// TestSnapshotBeforeCheck: at REPEATABLE READ the check's locking read
// reads the term's candidacy as committed now, but its subqueries (the
// session's expiry, a candidacy ahead, the last token) read the
// transaction's snapshot. A snapshot taken before the check, by an
// earlier plain SELECT of the transaction, can make a term's check fail
// wrongly, never pass wrongly:
//
//   - a term deposed after the snapshot (its session expired and a
//     successor took the lease over, or its lease released and acquired
//     again) is refused, though the snapshot still shows it holding;
//   - the successor's check, with a snapshot from before its grant, is
//     refused too (the snapshot lacks its session and still shows its
//     predecessor's candidacy ahead of it): the wrong failure, and why the
//     check should be the transaction's first statement; with a fresh
//     snapshot it passes;
//   - a term granted after the snapshot, to a session older than the
//     snapshot, with no predecessor in it, passes.
//
// With MariaDB's innodb_snapshot_isolation on, the refusals may instead
// be error 1020 (a row changed since the snapshot).
//
// The limit of the claim: a token never granted (still queued), checked
// with a snapshot from before its queue existed, passes. No term has such
// a token.
func TestSnapshotBeforeCheck(t *testing.T) {
	for _, strict := range []bool{false, true} {
		name := "innodb_snapshot_isolation off"
		if strict {
			name = "innodb_snapshot_isolation on"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			s := e.open(t, time.Second)
			first := acquire(t, s)
			if err := e.write(t, levels[0], first.Token(), 1); err != nil {
				t.Fatalf("the first holder's write: %v", err)
			}
			deposed, successor := e.snapshot(t, strict), e.snapshot(t, strict)
			next := acquire(t, e.open(t, time.Minute)) // after the first's expiry, and the deletion of its row
			refused(t, deposed.checkOnly("job", first.Token()), strict, "the check of the term deposed by expiry and takeover after the snapshot")
			err := successor.checkOnly("job", next.Token())
			refused(t, err, strict, "the successor's check with a snapshot from before its grant")
			if !strict {
				stale(t, err, next.Token(), first.Token()) // the snapshot's last token, and its candidacy ahead
			}
			if err := e.write(t, levels[0], next.Token(), 2); err != nil {
				t.Fatalf("the successor's check with a fresh snapshot: %v", err)
			}

			// Released and acquired again by another session.
			old := e.snapshot(t, strict)
			if err := next.Release(fencetest.Ctx(t)); err != nil {
				t.Fatal(err)
			}
			third := acquire(t, e.open(t, time.Minute))
			refused(t, old.checkOnly("job", next.Token()), strict, "the check of the term released and acquired again after the snapshot")
			if err := e.write(t, levels[0], third.Token(), 3); err != nil {
				t.Fatalf("the third holder's write: %v", err)
			}

			// A term granted after the snapshot, none before it, to a
			// session older than the snapshot.
			older := e.open(t, time.Minute)
			before := e.snapshot(t, strict)
			fresh, err := older.Acquire(fencetest.Ctx(t), "fresh")
			if err != nil {
				t.Fatal(err)
			}
			err = before.checkOnly("fresh", fresh.Token())
			var me *gomysql.MySQLError
			switch {
			case err == nil:
			case strict && errors.As(err, &me) && me.Number == 1020:
				t.Logf("the check of a term granted after the snapshot: %v", err)
			default:
				t.Errorf("the check of a term granted after the snapshot, to a session older than it, with none before it: %v, want it to pass", err)
			}

			// The limit: a queued token, its queue newer than the snapshot
			// (its sessions older).
			if !strict {
				first, second := e.rowSession(t, true), e.rowSession(t, true)
				early := e.snapshot(t, false)
				e.rowCandidacy(t, "queued", 3, first)
				e.rowCandidacy(t, "queued", 5, second)
				if err := early.checkOnly("queued", 5); err != nil {
					t.Errorf("the check of token 5, queued behind 3, with a snapshot from before both: %v; the check no longer reads the candidacies ahead from the snapshot: the package's caveat about tokens never granted can go", err)
				}
				if err := e.checkOnce(t, levels[0], "queued", 5); !errors.Is(err, fence.ErrStale) {
					t.Errorf("the check of token 5, queued behind 3, in a fresh transaction: %v, want it refused", err)
				}
			}
			if got := e.value(t); got != 3 {
				t.Errorf("value %d, want 3, the third holder's write", got)
			}
		})
	}
}
