package mylease_test

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/internal/fencetest"
	"github.com/simba-go/simba/internal/mytest"
)

// The conditions of the check, each tested on rows the test writes by
// hand: through the backend's API some of them look redundant (a term's
// token is granted only once every candidacy ahead of it is gone, so a
// check of a granted token never meets one), and a fence that dropped
// them would pass every other test.

// rowIDs numbers the sessions the tests insert by hand (the backend's own
// are random 62-bit numbers).
var rowIDs atomic.Int64

// rowSession inserts a session row, alive for a minute or expired a
// second ago by the database's clock, and returns its id.
func (e *env) rowSession(t *testing.T, alive bool) int64 {
	t.Helper()
	expiry := nowUS + " - 1000000"
	if alive {
		expiry = nowUS + " + 60000000"
	}
	id := 1000 + rowIDs.Add(1)
	if _, err := e.db.ExecContext(fencetest.Ctx(t), "INSERT INTO "+e.table("sessions")+" (id, ttl_us, expires_us) VALUES (?, 60000000, "+expiry+")", id); err != nil {
		t.Fatalf("inserting a session row: %v", err)
	}
	return id
}

// rowCandidacy inserts the candidacy (lease, token) of session, and makes
// token the lease's last if it is above it.
func (e *env) rowCandidacy(t *testing.T, lease string, token, session int64) {
	t.Helper()
	if _, err := e.db.ExecContext(fencetest.Ctx(t), "INSERT INTO "+e.table("candidacies")+" (name, token, session) VALUES (?, ?, ?)", lease, token, session); err != nil {
		t.Fatalf("inserting the candidacy (%s, %d) of session %d: %v", lease, token, session, err)
	}
	e.rowLast(t, lease, token)
}

// rowLast makes last the lease's last granted token if it is above it.
func (e *env) rowLast(t *testing.T, lease string, last int64) {
	t.Helper()
	if _, err := e.db.ExecContext(fencetest.Ctx(t), "INSERT INTO "+e.table("lease_names")+" (name, last, settled_epoch) VALUES (?, ?, 0) ON DUPLICATE KEY UPDATE last = GREATEST(last, VALUES(last))", lease, last); err != nil {
		t.Fatalf("setting the last token of %s: %v", lease, err)
	}
}

// checkOnce checks (lease, token) in a transaction at level l, which it
// rolls back.
func (e *env) checkOnce(t *testing.T, l level, lease string, token uint64) error {
	t.Helper()
	x := e.begin(t, l)
	defer x.rollback()
	return x.check(lease, token)
}

// TestConditions checks each condition of the check on rows arranged by
// hand, at every isolation level: the candidacy (lease, token) must
// exist, its session must be alive by the database's clock, no candidacy
// of the lease may be ahead of it (an expired one counts until it is
// deleted), and another lease's rows do not count.
func TestConditions(t *testing.T) {
	e := newEnv(t)
	type check struct {
		token   uint64
		held    bool
		highest uint64 // when refused
	}
	cases := []struct {
		name    string
		lease   string
		arrange func(lease string)
		checks  []check
	}{
		{"held, with a live waiter behind", "held", func(lease string) {
			e.rowCandidacy(t, lease, 4, e.rowSession(t, true))
			e.rowCandidacy(t, lease, 6, e.rowSession(t, true))
		}, []check{{token: 4, held: true}, {token: 6, highest: 6}}},
		{"never registered, below a live holder", "never", func(lease string) {
			e.rowLast(t, lease, 6)
			e.rowCandidacy(t, lease, 7, e.rowSession(t, true))
		}, []check{{token: 5, highest: 7}, {token: 7, held: true}, {token: 8, highest: 7}}},
		{"no row of the lease at all", "none", func(string) {}, []check{{token: 1, highest: 0}}},
		{"of an expired session, nobody ahead", "expired", func(lease string) {
			e.rowCandidacy(t, lease, 3, e.rowSession(t, false))
		}, []check{{token: 3, highest: 3}}},
		{"queued behind a live holder", "queued", func(lease string) {
			e.rowCandidacy(t, lease, 3, e.rowSession(t, true))
			e.rowCandidacy(t, lease, 5, e.rowSession(t, true))
		}, []check{{token: 5, highest: 5}, {token: 3, held: true}}},
		{"behind an expired holder not deleted yet", "behind-expired", func(lease string) {
			e.rowCandidacy(t, lease, 3, e.rowSession(t, false))
			e.rowCandidacy(t, lease, 5, e.rowSession(t, true))
		}, []check{{token: 5, highest: 5}, {token: 3, highest: 5}}},
		{"held, another lease's candidacy has a lower token", "mine", func(lease string) {
			e.rowCandidacy(t, "theirs", 1, e.rowSession(t, true))
			e.rowCandidacy(t, lease, 5, e.rowSession(t, true))
		}, []check{{token: 5, held: true}}},
		{"another lease's candidacy has the token", "gone", func(lease string) {
			e.rowLast(t, lease, 2) // its token 2 was granted, and released
			e.rowCandidacy(t, "other", 2, e.rowSession(t, true))
		}, []check{{token: 2, highest: 2}}},
		{"a lease whose name differs only in case", "Case", func(lease string) {
			e.rowCandidacy(t, "case", 2, e.rowSession(t, true)) // names compare byte by byte (ascii_bin)
		}, []check{{token: 2, highest: 0}}},
	}
	for _, c := range cases {
		c.arrange(c.lease)
		for _, l := range allLevels {
			for _, k := range c.checks {
				err := e.checkOnce(t, l, c.lease, k.token)
				what := fmt.Sprintf("%s (lease %q, %s): check of token %d", c.name, c.lease, l.name, k.token)
				if k.held {
					if err != nil {
						t.Errorf("%s: refused (%v), want it to pass", what, err)
					}
					continue
				}
				var se *fence.StaleError
				switch {
				case err == nil:
					t.Errorf("%s: passed, want refused with highest %d", what, k.highest)
				case !errors.As(err, &se):
					t.Errorf("%s: %v, want a *fence.StaleError", what, err)
				case *se != fence.StaleError{Resource: c.lease, Token: k.token, Highest: k.highest}:
					t.Errorf("%s: %+v, want highest %d", what, *se, k.highest)
				}
			}
		}
	}
}

// TestCheckLocks: a check that passed locks the candidacy until its
// transaction ends, at every isolation level: against its deletion (a
// release deletes it, a successor's takeover or the session's Close
// deletes the session's row and with it its candidacies) and a new
// candidate's registration (which scans the lease's candidacy rows); not
// against the session's renewal (an UPDATE of its row), but at
// SERIALIZABLE, where the check's subqueries lock the session's row too.
// A refused check that found the candidacy of an expired session locks it
// as well. Other transactions, with a lock wait timeout of a second, find
// the lock or not.
func TestCheckLocks(t *testing.T) {
	for _, l := range allLevels {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			lockers := e.lockWaitDB(t)
			live := e.rowSession(t, true)
			e.rowCandidacy(t, "job", 1, live)
			dead := e.rowSession(t, false)
			e.rowCandidacy(t, "old", 1, dead)
			for _, c := range []struct {
				lease   string
				session int64
				held    bool
			}{{"job", live, true}, {"old", dead, false}} {
				x := e.begin(t, l)
				err := x.check(c.lease, 1)
				switch {
				case c.held && err != nil:
					t.Fatalf("the check of the holder: %v", err)
				case !c.held && !errors.Is(err, fence.ErrStale):
					t.Fatalf("the check of the expired session's candidacy: got %v, want it refused", err)
				}
				what := "a transaction that passed its check"
				if !c.held {
					what = "a transaction whose check was refused"
				}
				serializable := l.opts != nil && l.opts.Isolation == sql.LevelSerializable
				for _, w := range []struct {
					what, sql string
					waits     bool
				}{
					{"deleting the candidacy (a release)", "DELETE FROM " + e.table("candidacies") + " WHERE name = ? AND token = 1", true},
					{"deleting the session's row (a takeover, a Close)", "DELETE FROM " + e.table("sessions") + " WHERE id = ?", true},
					{"renewing the session", "UPDATE " + e.table("sessions") + " SET expires_us = expires_us + 1 WHERE id = ?", serializable},
					// The backend's registration of a new candidate deletes
					// its session's older candidacies of the name first,
					// a statement that scans the name's candidacy rows.
					{"registering a candidate (its DELETE of its older candidacies)", "DELETE FROM " + e.table("candidacies") + " WHERE name = ? AND session = 999", true},
					{"reading the rows (a plain SELECT)", "SELECT COUNT(*) FROM " + e.table("candidacies") + " c JOIN " + e.table("sessions") + " x ON x.id = c.session WHERE c.name = ? AND x.id = ?", false},
				} {
					var args []any
					switch {
					case strings.Contains(w.sql, "name = ? AND x.id = ?"):
						args = []any{c.lease, c.session}
					case strings.Contains(w.sql, "name = ?"):
						args = []any{c.lease}
					case strings.Contains(w.sql, "id = ?"):
						args = []any{c.session}
					}
					err := tryLocked(t, lockers, w.sql, args...)
					var me *gomysql.MySQLError
					locked := errors.As(err, &me) && me.Number == 1205 // ER_LOCK_WAIT_TIMEOUT
					switch {
					case w.waits && err == nil:
						t.Errorf("lease %s: %s while %s is open: it went through, want it to wait for the check's lock", c.lease, w.what, what)
					case w.waits && !locked:
						t.Errorf("lease %s: %s: %v, want a lock wait timeout", c.lease, w.what, err)
					case !w.waits && err != nil:
						t.Errorf("lease %s: %s while %s is open: %v, want it to go through", c.lease, w.what, what, err)
					}
				}
				if err := x.rollback(); err != nil {
					t.Fatalf("rollback: %v", err)
				}
			}
		})
	}
}

// lockWaitDB returns a pool on the test's database whose connections wait
// a second for a row lock (innodb_lock_wait_timeout = 1, the least).
func (e *env) lockWaitDB(t *testing.T) *sql.DB {
	t.Helper()
	return e.dbWith(t, "innodb_lock_wait_timeout", "1")
}

// dbWith returns a pool on the test's database whose connections set the
// system variable name to value, closed at the end of the test.
func (e *env) dbWith(t *testing.T, name, value string) *sql.DB {
	t.Helper()
	var database string
	if err := e.db.QueryRowContext(fencetest.Ctx(t), "SELECT DATABASE()").Scan(&database); err != nil {
		t.Fatal(err)
	}
	cfg, err := gomysql.ParseDSN(mytest.DSNFor(t, database))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params[name] = value
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// tryLocked runs query in a transaction of its own on db, and rolls it
// back: it returns the statement's error, a lock wait timeout (error
// 1205) when it waited for a lock.
func tryLocked(t *testing.T, db *sql.DB, query string, args ...any) error {
	t.Helper()
	ctx := fencetest.Ctx(t)
	x, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Rollback()
	if strings.HasPrefix(query, "SELECT") {
		var n int
		return x.QueryRowContext(ctx, query, args...).Scan(&n)
	}
	_, err = x.ExecContext(ctx, query, args...)
	return err
}
