package pglease_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/internal/fencetest"
)

// The conditions of the check, each tested on rows the test writes by
// hand: through the backend's API some of them look redundant (a term's
// token is granted only once every candidacy ahead of it is gone, so a
// check of a granted token never meets one), and a fence that dropped
// them would pass every other test.

// rowSession inserts a session row, alive for a minute or expired a
// second ago by the database's clock, and returns its id.
func (e *env) rowSession(t *testing.T, alive bool) int64 {
	t.Helper()
	expiry := "clock_timestamp() - interval '1 second'"
	if alive {
		expiry = "clock_timestamp() + interval '1 minute'"
	}
	var id int64
	if err := e.pool.QueryRow(fencetest.Ctx(t), "INSERT INTO "+e.schema+".sessions (ttl, expires_at) VALUES (interval '1 minute', "+expiry+") RETURNING id").Scan(&id); err != nil {
		t.Fatalf("inserting a session row: %v", err)
	}
	return id
}

// rowCandidacy inserts the candidacy (lease, token) of session, and makes
// token the lease's last if it is above it.
func (e *env) rowCandidacy(t *testing.T, lease string, token, session int64) {
	t.Helper()
	ctx := fencetest.Ctx(t)
	if _, err := e.pool.Exec(ctx, "INSERT INTO "+e.schema+".candidacies (name, token, session) VALUES ($1, $2, $3)", lease, token, session); err != nil {
		t.Fatalf("inserting the candidacy (%s, %d) of session %d: %v", lease, token, session, err)
	}
	e.rowLast(t, lease, token)
}

// rowLast makes last the lease's last granted token if it is above it.
func (e *env) rowLast(t *testing.T, lease string, last int64) {
	t.Helper()
	if _, err := e.pool.Exec(fencetest.Ctx(t), "INSERT INTO "+e.schema+".lease_names AS l (name, last) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET last = GREATEST(l.last, excluded.last)", lease, last); err != nil {
		t.Fatalf("setting the last token of %s: %v", lease, err)
	}
}

// checkOnce checks (lease, token) in a transaction of driver d, which it
// rolls back.
func (e *env) checkOnce(t *testing.T, d driver, lease string, token uint64) error {
	t.Helper()
	x := d.begin(t, e)
	defer x.rollback()
	return x.check(lease, token)
}

// TestConditions checks each condition of the check on rows arranged by
// hand, with both drivers. The patches that drop a condition (in fenceSQL,
// backend/postgres/records.go), and what this test then fails with (on
// both drivers; "pgx" shown):
//
//   - the candidacy must exist (patch: drop `AND c.token = $TOK`): "never
//     registered, below a live holder (lease "never", pgx): check of token
//     5: passed, want refused with highest 7";
//   - its session must be alive (patch: drop `AND x.expires_at >
//     clock_timestamp()`): "of an expired session, nobody ahead (lease
//     "expired", pgx): check of token 3: passed, want refused with highest
//     3";
//   - no candidacy ahead (patch: drop the `AND NOT EXISTS (...)` clause):
//     "queued behind a live holder (lease "queued", pgx): check of token 5:
//     passed, want refused with highest 5" (a token never granted, queued
//     behind a live holder);
//   - an expired candidacy ahead counts until it is deleted (patch: count
//     only those of a live session, `AND NOT EXISTS (SELECT 1 FROM
//     candidacies o JOIN sessions y ON y.id = o.session WHERE o.name =
//     $NAME AND o.token < $TOK AND y.expires_at > clock_timestamp())`):
//     "behind an expired holder not deleted yet (lease "behind-expired",
//     pgx): check of token 5: passed, want refused with highest 5", while
//     every other test of the package passes;
//   - of the lease's own queue (patch: drop `o.name = $NAME AND` from the
//     NOT EXISTS clause): "held, another lease's candidacy has a lower
//     token (lease "mine", pgx): check of token 5: refused (simba/fence:
//     stale token 5 for resource "mine": the term no longer holds its
//     lease), want it to pass";
//   - of the lease's own name (patch: drop `c.name = $NAME::text AND`):
//     "another lease's candidacy has the token (lease "gone", pgx): check
//     of token 2: passed, want refused with highest 2".
//
// fenceSQL's `$TOK::bigint <> 0` never matters here: Check refuses token 0
// before any query (TestBadInput), and a candidacy's token is above 0 (a
// CHECK of the table); it is there for the backend's fenced records, for
// which token 0 means no fence.
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
	}
	for _, c := range cases {
		c.arrange(c.lease)
		for _, d := range drivers {
			for _, k := range c.checks {
				err := e.checkOnce(t, d, c.lease, k.token)
				what := fmt.Sprintf("%s (lease %q, %s): check of token %d", c.name, c.lease, d.name, k.token)
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

// TestCheckLocks: a check that passed locks the candidacy and the
// session's row until its transaction ends, against their deletion (a
// release deletes the candidacy, a successor's takeover or the session's
// Close its row) but not against a renewal (an UPDATE of expires_at, a
// non-key column): the other transactions, with a lock_timeout, find the
// lock or not.
//
// Without the candidacy's lock (patch: `FOR KEY SHARE OF c, x` to
// `FOR KEY SHARE OF x` in fenceSQL, backend/postgres/records.go), this
// test fails with: "pgx: deleting the candidacy (a release) while a
// transaction that passed its check is open: it went through, want it to
// wait for the check's lock" (and the same for database/sql), while every
// other test of the package passes: a release could then hand the lease on
// while a fenced write of the old term is in flight. With a lock that
// conflicts with the renewal (patch: `FOR SHARE OF c, x`) it fails with:
// "pgx: renewing the session while a transaction that passed its check is
// open: ERROR: canceling statement due to lock timeout (SQLSTATE 55P03),
// want it to go through".
func TestCheckLocks(t *testing.T) {
	e := newEnv(t)
	sess := e.rowSession(t, true)
	e.rowCandidacy(t, "job", 1, sess)
	for _, d := range drivers {
		x := d.begin(t, e)
		if err := x.check("job", 1); err != nil {
			t.Fatalf("%s: the check of the holder: %v", d.name, err)
		}
		for _, w := range []struct {
			what, sql string
			waits     bool
		}{
			{"deleting the candidacy (a release)", "DELETE FROM " + e.schema + ".candidacies WHERE name = 'job' AND token = 1", true},
			{"deleting the session's row (a takeover, a Close)", "DELETE FROM " + e.schema + ".sessions WHERE id = $1", true},
			{"renewing the session", "UPDATE " + e.schema + ".sessions SET expires_at = clock_timestamp() + ttl WHERE id = $1", false},
		} {
			var args []any
			if strings.Contains(w.sql, "$1") {
				args = append(args, sess)
			}
			err := e.tryLocked(t, w.sql, args...)
			var pe *pgconn.PgError
			locked := errors.As(err, &pe) && pe.Code == "55P03"
			switch {
			case w.waits && err == nil:
				t.Errorf("%s: %s while a transaction that passed its check is open: it went through, want it to wait for the check's lock", d.name, w.what)
			case w.waits && !locked:
				t.Errorf("%s: %s: %v, want a lock timeout", d.name, w.what, err)
			case !w.waits && err != nil:
				t.Errorf("%s: %s while a transaction that passed its check is open: %v, want it to go through", d.name, w.what, err)
			}
		}
		if err := x.commit(); err != nil {
			t.Fatalf("%s: commit: %v", d.name, err)
		}
	}
}

// tryLocked runs sql in a transaction of its own with a lock_timeout,
// and rolls it back: it returns the statement's error, a lock timeout
// (SQLSTATE 55P03) when it waited for a lock.
func (e *env) tryLocked(t *testing.T, sql string, args ...any) error {
	t.Helper()
	ctx := fencetest.Ctx(t)
	var err error
	txErr := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '300ms'"); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, sql, args...)
		return errRollback
	})
	if !errors.Is(txErr, errRollback) && err == nil {
		t.Fatalf("running %q: %v", sql, txErr)
	}
	return err
}

var errRollback = errors.New("roll back")
