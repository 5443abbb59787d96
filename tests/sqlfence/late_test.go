package sqlfence_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/fence/sqlfence"
	"github.com/simba-go/simba/internal/fencetest"
)

// lateMode is a database and an isolation level for TestLateCheck, and
// what a check made late in a transaction, after a newer token was
// claimed and committed since the transaction read its state, returns.
type lateMode struct {
	name string
	open func(t *testing.T) *sqlDB
	opts *sql.TxOptions
	// blocks: the transaction holds the write lock from BEGIN (SQLite's
	// BEGIN IMMEDIATE), so the newer claim waits for it, always.
	blocks bool
	// lateErr is in the error of the late check after a newer claim
	// committed: "stale" for a *fence.StaleError, else a text of the
	// database's error.
	lateErr string
}

var lateModes = []lateMode{
	{name: "sqlite-immediate", open: func(t *testing.T) *sqlDB { return sqliteDB(t, "immediate") }, blocks: true},
	// The snapshot, taken by the transaction's first read, is out of
	// date once the claim commits: the check's write fails at once with
	// SQLITE_BUSY_SNAPSHOT (517), "database is locked (517)".
	{name: "sqlite-deferred", open: func(t *testing.T) *sqlDB { return sqliteDB(t, "deferred") }, lateErr: "(517)"},
	{name: "postgres", open: func(t *testing.T) *sqlDB { return postgresDB(t) }, lateErr: "stale"},
	{name: "postgres-repeatable-read", open: func(t *testing.T) *sqlDB { return postgresDB(t) }, opts: &sql.TxOptions{Isolation: sql.LevelRepeatableRead}, lateErr: "40001"},
}

// holdOff is how long a claim that must wait for an open transaction is
// watched on SQLite, where nothing shows that it waits: it must not have
// returned by then.
const holdOff = 300 * time.Millisecond

// TestLateCheck: checks made late in a transaction, after a newer token
// was claimed by another connection while the transaction was open, on
// SQLite (BEGIN IMMEDIATE and DEFERRED) and on PostgreSQL (pgx; READ
// COMMITTED and REPEATABLE READ). A term's transaction reads its state
// and checks its token, and its successor claims a newer one:
//
//  1. Checked, then claimed: the claim must wait for the transaction
//     (the check's row lock on PostgreSQL, the write lock on SQLite), as
//     Fence.Claim promises; a check made again late in the transaction
//     passes (the claim has not committed), the transaction commits, and
//     only then does the claim return, after which the old token is
//     refused.
//  2. Claimed, then checked: the transaction read its state before the
//     claim committed, and checks only after. The late check must refuse
//     (PostgreSQL at READ COMMITTED: stale, by the latest committed
//     token, not the transaction's start; at REPEATABLE READ: a
//     serialization error; SQLite DEFERRED: SQLITE_BUSY_SNAPSHOT, its snapshot
//     being out of date), and the transaction's write must not land. With
//     BEGIN IMMEDIATE the claim waits, as in 1.
//
// With a check that only reads when the term's token is already recorded
// (patch: at the top of Check in fence.go, before the upsert, `var cur
// int64; if tx.QueryRowContext(ctx, s.selectToken(t),
// resource).Scan(&cur) == nil && cur == int64(token) { return nil }`),
// this test fails with: "postgres: the claim of token 6 returned <nil>
// while a transaction that had passed its check with token 5 was open: it
// must wait for that transaction", and the same on
// postgres-repeatable-read and sqlite-deferred (there the check takes no
// lock: the claim commits under a transaction that has passed its check).
// TestSQLRace catches that patch too, by the stale writes it lets commit
// among many concurrent ones; this test states the waiting the claim
// promises. With a check that takes the database's refusal for a pass
// (patch: in Check, `return nil` in place of the wrapped error when the
// upsert's error is not sql.ErrNoRows), it fails in part 2 with:
// "sqlite-deferred: the check with token 6 made after token 7 was claimed
// and committed passed, want an error containing (517) (then its write:
// database is locked (517); ...)" and "postgres-repeatable-read: ... want
// an error containing 40001 (then its write: ERROR: current transaction
// is aborted, ...)": the database still refuses the write, but the check
// no longer says that the term is over.
func TestLateCheck(t *testing.T) {
	for _, m := range lateModes {
		t.Run(m.name, func(t *testing.T) {
			d := m.open(t)
			ctx := fencetest.Ctx(t)
			for _, q := range []string{
				"CREATE TABLE " + d.table + " (id INTEGER PRIMARY KEY, value TEXT NOT NULL)",
				"INSERT INTO " + d.table + " (id, value) VALUES (1, 'initial')",
			} {
				if _, err := d.db.ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.fence.Claim(ctx, d.db, "job", 5); err != nil {
				t.Fatalf("the claim of token 5: %v", err)
			}
			lw := &lateWriter{t: t, d: d, m: m}

			// 1. Checked, then claimed.
			x := lw.begin()
			if err := d.fence.Check(ctx, x, "job", 5); err != nil {
				t.Fatalf("%s: the check with token 5, the highest: %v", m.name, err)
			}
			claimed := lw.claim(6)
			lw.mustWait(claimed, 5, 6)
			if err := d.fence.Check(ctx, x, "job", 5); err != nil {
				t.Fatalf("%s: the late check with token 5, while the claim of 6 waits: %v", m.name, err)
			}
			lw.write(x, "five")
			if err := x.Commit(); err != nil {
				t.Fatalf("%s: the commit of the transaction checked with token 5: %v", m.name, err)
			}
			if err := awaitClaim(t, claimed, "the claim of token 6 after the transaction checked with 5 committed"); err != nil {
				t.Fatalf("%s: the claim of token 6: %v", m.name, err)
			}
			lw.want("five", 6)
			if err := checkTx(t, d, "job", 5); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("%s: a check with token 5 after 6 was claimed: %v, want fence.ErrStale", m.name, err)
			}

			// 2. Claimed, then checked.
			x = lw.begin()
			claimed = lw.claim(7)
			if m.blocks {
				lw.mustWait(claimed, 6, 7)
				if err := d.fence.Check(ctx, x, "job", 6); err != nil {
					t.Fatalf("%s: the check with token 6, while the claim of 7 waits: %v", m.name, err)
				}
				lw.write(x, "six")
				if err := x.Commit(); err != nil {
					t.Fatalf("%s: the commit of the transaction checked with token 6: %v", m.name, err)
				}
				if err := awaitClaim(t, claimed, "the claim of token 7 after the transaction checked with 6 committed"); err != nil {
					t.Fatalf("%s: the claim of token 7: %v", m.name, err)
				}
				lw.want("six", 7)
				return
			}
			if err := awaitClaim(t, claimed, "the claim of token 7 while a transaction that had not checked yet was open"); err != nil {
				t.Fatalf("%s: the claim of token 7: %v", m.name, err)
			}
			err := d.fence.Check(ctx, x, "job", 6)
			var se *fence.StaleError
			switch {
			case err == nil:
				_, werr := x.ExecContext(ctx, "UPDATE "+d.table+" SET value = 'six' WHERE id = 1")
				t.Fatalf("%s: the check with token 6 made after token 7 was claimed and committed passed, want an error containing %s (then its write: %v; its commit: %v; the state: %q)",
					m.name, m.lateErr, werr, x.Commit(), lw.value())
			case m.lateErr == "stale" && (!errors.As(err, &se) || se.Token != 6 || se.Highest != 7):
				t.Fatalf("%s: the late check with token 6 after 7 was claimed: %v, want a *fence.StaleError of token 6 with highest 7", m.name, err)
			case m.lateErr != "stale" && (errors.Is(err, fence.ErrStale) || !strings.Contains(strings.ToLower(err.Error()), m.lateErr)):
				t.Fatalf("%s: the late check with token 6 after 7 was claimed: %v, want an error containing %s", m.name, err, m.lateErr)
			}
			if err := x.Rollback(); err != nil {
				t.Fatalf("%s: the rollback after the late check failed: %v", m.name, err)
			}
			lw.want("five", 7)
		})
	}
}

// lateWriter runs TestLateCheck's transactions.
type lateWriter struct {
	t *testing.T
	d *sqlDB
	m lateMode
}

// begin begins a term's transaction and reads the term's state in it
// (the snapshot of REPEATABLE READ and of SQLite's DEFERRED begins here).
func (w *lateWriter) begin() *sql.Tx {
	w.t.Helper()
	ctx := fencetest.Ctx(w.t)
	x, err := w.d.db.BeginTx(ctx, w.m.opts)
	if err != nil {
		w.t.Fatalf("%s: begin: %v", w.m.name, err)
	}
	w.t.Cleanup(func() { x.Rollback() })
	var v string
	if err := x.QueryRowContext(ctx, "SELECT value FROM "+w.d.table+" WHERE id = 1").Scan(&v); err != nil {
		w.t.Fatalf("%s: reading the state in the transaction: %v", w.m.name, err)
	}
	return x
}

// write updates the state in x.
func (w *lateWriter) write(x *sql.Tx, v string) {
	w.t.Helper()
	if _, err := x.ExecContext(fencetest.Ctx(w.t), "UPDATE "+w.d.table+" SET value = "+ph(w.d, 1)+" WHERE id = 1", v); err != nil {
		w.t.Fatalf("%s: the write of %q: %v", w.m.name, v, err)
	}
}

// claim claims token from another connection, and returns its result
// when it returns.
func (w *lateWriter) claim(token uint64) <-chan error {
	ctx := fencetest.Ctx(w.t)
	done := make(chan error, 1)
	go func() { done <- w.d.fence.Claim(ctx, w.d.db, "job", token) }()
	return done
}

// mustWait checks that the claim of token waits for the open transaction
// checked with old: on PostgreSQL until a statement on the fence table is
// seen waiting for a lock, on SQLite for holdOff.
func (w *lateWriter) mustWait(claimed <-chan error, old, token uint64) {
	w.t.Helper()
	returned := func(err error) {
		w.t.Helper()
		w.t.Fatalf("%s: the claim of token %d returned %v while a transaction that had passed its check with token %d was open: it must wait for that transaction", w.m.name, token, err, old)
	}
	if w.d.fence.Dialect == sqlfence.SQLite {
		select {
		case err := <-claimed:
			returned(err)
		case <-time.After(holdOff):
		}
		return
	}
	ctx := fencetest.Ctx(w.t)
	for {
		var n int
		if err := w.d.db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'", w.d.fence.Table).Scan(&n); err != nil {
			w.t.Fatalf("%s: reading pg_stat_activity: %v", w.m.name, err)
		}
		if n > 0 {
			return
		}
		select {
		case err := <-claimed:
			returned(err)
		case <-ctx.Done():
			w.t.Fatalf("%s: the claim of token %d neither returned nor waited for a lock within %v", w.m.name, token, fencetest.OpTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// value returns the committed state.
func (w *lateWriter) value() string {
	w.t.Helper()
	var v string
	if err := w.d.db.QueryRowContext(fencetest.Ctx(w.t), "SELECT value FROM "+w.d.table+" WHERE id = 1").Scan(&v); err != nil {
		w.t.Fatalf("%s: reading the state: %v", w.m.name, err)
	}
	return v
}

// want checks the committed state and the highest token.
func (w *lateWriter) want(value string, highest uint64) {
	w.t.Helper()
	if got := w.value(); got != value {
		w.t.Fatalf("%s: the state is %q, want %q", w.m.name, got, value)
	}
	if got, ok := highestSQL(w.t, w.d, "job"); !ok || got != highest {
		w.t.Fatalf("%s: the highest token is %d (recorded: %v), want %d", w.m.name, got, ok, highest)
	}
}

// awaitClaim waits for a claim's result for up to fencetest.OpTimeout.
func awaitClaim(t *testing.T, claimed <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-claimed:
		return err
	case <-time.After(fencetest.OpTimeout):
		t.Fatalf("%s: it did not return within %v", what, fencetest.OpTimeout)
		return nil
	}
}
