package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/pgtest"
)

// aheadTracer counts the queue reads (session.ahead's statement) a
// backend's pool sends: a contender that starts another one has not taken
// the lease with the one before.
type aheadTracer struct {
	mu      sync.Mutex
	starts  int
	changed chan struct{}
}

// aheadLike matches the start of session.ahead's statement, and of no
// other (the session's own clean-up deletes from sessions without the
// alias x), as a LIKE pattern: pg_stat_activity cuts a long query's text
// (track_activity_query_size).
const aheadLike = "WITH gone AS (%.sessions x %"

// isAhead reports whether sql is session.ahead's statement (aheadLike).
func isAhead(sql string) bool {
	rest, ok := strings.CutPrefix(sql, "WITH gone AS (")
	return ok && strings.Contains(rest, ".sessions x ")
}

func (a *aheadTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if isAhead(d.SQL) {
		a.mu.Lock()
		a.starts++
		close(a.changed)
		a.changed = make(chan struct{})
		a.mu.Unlock()
	}
	return ctx
}

func (a *aheadTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (a *aheadTracer) count() (int, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.starts, a.changed
}

// racePool returns a pool of connections named app, with the tracer tr
// if not nil, closed when the test ends.
func racePool(t *testing.T, app string, tr pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.ConnConfig.Tracer = tr
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestTakeoverRefusedAfterRenewal: every statement that deletes an
// expired session's row, another session's (a contender's queue read,
// ahead; a new session's sweep in Open) or its own (the monitor's
// clearExpired), must leave the row alone when the holder's renewal passed
// its liveness test before the expiry and commits after the deleter read
// the row as expired. The renewal holds the row's lock meanwhile: a DELETE
// waits for it and re-checks its condition on the renewed row (READ
// COMMITTED), the sweep skips the locked row, and the contender counts as
// gone only the rows its DELETE removed, not the expiry its snapshot
// shows. The holder keeps its lease; the contender reads the queue again.
// (TestRenewalStraddlingExpiryKeepsTheLease renews with the test's own
// UPDATE, and checks the contender only.)
//
// The interleaving is forced by the server's locks, with the holder's own
// KeepAlive as the renewal: a trigger of the test's on the holder's row
// (AFTER UPDATE) makes the renewal's transaction wait, past its liveness
// test and holding the row's lock, for an advisory lock the test holds.
// The test lets it go only once the contender's and the holder's own
// DELETEs wait for that row lock (seen in pg_stat_activity) and a new
// session's Open has returned (or its sweep waits too); a tracer on the
// contender's pool then shows its next queue read, and an AFTER DELETE
// trigger of the test's records who deleted the holder's row, if anyone.
// The one thing timed is where the renewal falls in the holder's term: at
// half its TTL, so that the renewed expiry is TTL/2 after the old one,
// which the deleters' readings just past the old one cannot vouch for.
//
// Each of these patches makes it fail (SQL and schema names shortened):
//
// The contender's expiry condition on the snapshot's copy of the row, not
// re-checked on the renewed one (in lease.go's ahead, `DELETE FROM
// q.sessions x WHERE x.id IN (SELECT y.id FROM q.sessions y WHERE
// <expiredGuardSQL on y>) AND x.id IN (...)`):
//
//	takeover_race_test.go:372: the holder's renewed session row was deleted at 2026-12-05T16:27:22.878891Z by the contender's backend (APP_c), its expiry 2026-12-05T16:27:28.866024Z then 5.987133s ahead (old expiry 2026-12-05T16:27:22.773416Z), in:
//	takeover_race_test.go:384: the contender took the lease (token 2) from the holder, whose renewal passed its liveness test before the expiry (2026-12-05 16:27:22.773416 +0000 UTC) and committed after the contender read the row
//
// No expiry condition at all (`(<expiredGuardSQL> OR true)` in ahead's
// DELETE):
//
//	takeover_race_test.go:372: the holder's renewed session row was deleted at 2026-12-05T16:27:34.357056Z by the contender's backend (APP_c), its expiry 2026-12-05T16:27:37.305608Z then 2.948552s ahead (old expiry 2026-12-05T16:27:34.300133Z), in:
//	takeover_race_test.go:384: the contender took the lease (token 2) from the holder, whose renewal passed its liveness test before the expiry (2026-12-05 16:27:34.300133 +0000 UTC) and committed after the contender read the row
//
// The snapshot's expiry counted instead of the rows deleted (in ahead's
// last subquery, `AND x.expires_at > clock_timestamp()` for `AND x.id NOT
// IN (SELECT id FROM gone)`):
//
//	takeover_race_test.go:299: the contender's Acquire returned (granted the lease, token 2) before the contender's DELETE of expired sessions waiting for the renewal's lock; the test's connections: …
//
// Open's sweep without its lock (`LIMIT 8` for `LIMIT 8 FOR UPDATE SKIP
// LOCKED` in backend.go's Open; `FOR UPDATE` alone waits and re-checks,
// and passes):
//
//	takeover_race_test.go:330: a new session's sweep of expired sessions waits for the lock of the holder's renewal in flight
//	takeover_race_test.go:372: the holder's renewed session row was deleted at 2026-12-05T16:27:59.46952Z by the contender's backend (APP_c), its expiry 2026-12-05T16:28:02.380901Z then 2.911381s ahead (old expiry 2026-12-05T16:27:59.36966Z), in:
//	takeover_race_test.go:391: the holder's lease is lost after the renewal
//
// The session's own clean-up without its expiry condition (clearExpired's
// DELETE `WHERE id = $1` alone, in session.go):
//
//	takeover_race_test.go:372: the holder's renewed session row was deleted at 2026-12-05T16:28:09.965732Z by the holder's own backend (APP_h), its expiry 2026-12-05T16:28:12.856734Z then 2.891002s ahead (old expiry 2026-12-05T16:28:09.851845Z), in:
//	takeover_race_test.go:391: the holder's lease is lost after the renewal
//	takeover_race_test.go:400: the holder's candidacy (token 1) with a live session: 0 rows, want 1
//	takeover_race_test.go:405: renewing the holder: simba/postgres: keep-alive: session 2 is over on the server: simba/backend: session done
func TestTakeoverRefusedAfterRenewal(t *testing.T) {
	const (
		ttl   = 6 * time.Second  // the holder's: its renewal falls at ttl/2, the expiry ttl/2 later
		long  = time.Minute      // the others': they do not expire during the test
		bound = 10 * time.Second // every wait's, below ctxT's
	)
	schema := pgtest.Schema(t)
	app := pgtest.UniqueName(t)
	appH, appC := app+"_h", app+"_c"
	tr := &aheadTracer{changed: make(chan struct{})}
	newB := func(pool *pgxpool.Pool) *postgres.Backend {
		b, err := postgres.NewFromPool(pool, postgres.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	admin := racePool(t, app+"_t", nil)
	hb, cb := newB(racePool(t, appH, nil)), newB(racePool(t, appC, tr))
	q := pgx.Identifier{schema}.Sanitize()

	// The contender's readings of the database's clock begin before the
	// holder's session does (see clock.go): its expiry is vouched for
	// as soon as it passes.
	contender := open(t, cb, long)
	holder := open(t, hb, ttl)
	held, err := holder.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatalf("the holder's Acquire: %v", err)
	}
	hid := holder.ID() // a decimal number: safe in SQL text
	key := rand.Int64()
	for _, sql := range []string{
		`CREATE FUNCTION ` + q + `.test_gate() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN PERFORM pg_advisory_xact_lock(` + fmt.Sprint(key) + `); RETURN NULL; END $$`,
		`CREATE TRIGGER test_gate AFTER UPDATE ON ` + q + `.sessions FOR EACH ROW WHEN (NEW.id = ` + hid + `)
			EXECUTE FUNCTION ` + q + `.test_gate()`,
		`CREATE TABLE ` + q + `.test_deleted (app text, query text, expires_at timestamptz, at timestamptz)`,
		`CREATE FUNCTION ` + q + `.test_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO ` + q + `.test_deleted VALUES (current_setting('application_name'), current_query(), OLD.expires_at, clock_timestamp()); RETURN NULL; END $$`,
		`CREATE TRIGGER test_deleted AFTER DELETE ON ` + q + `.sessions FOR EACH ROW WHEN (OLD.id = ` + hid + `)
			EXECUTE FUNCTION ` + q + `.test_deleted()`,
	} {
		if _, err := admin.Exec(ctxT(t), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	waiting := func(app, like, event string) bool {
		var n int
		err := admin.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE $2 AND ($3 = '' OR wait_event = $3)`, app, like, event).Scan(&n)
		if err != nil {
			t.Fatalf("reading pg_stat_activity: %v", err)
		}
		return n > 0
	}
	// activity describes the test's connections as the server sees them.
	activity := func() string {
		rows, err := admin.Query(ctxT(t), `SELECT application_name, state, coalesce(wait_event_type, ''), coalesce(wait_event, ''), left(query, 120)
			FROM pg_stat_activity WHERE application_name LIKE $1 || '%' ORDER BY application_name`, app)
		if err != nil {
			return fmt.Sprintf("(pg_stat_activity: %v)", err)
		}
		var b strings.Builder
		for rows.Next() {
			var a, st, wt, we, qy string
			if err := rows.Scan(&a, &st, &wt, &we, &qy); err != nil {
				return fmt.Sprintf("(pg_stat_activity: %v)", err)
			}
			fmt.Fprintf(&b, "\n\t%s %s %s %s: %s", a, st, wt, we, strings.Join(strings.Fields(qy), " "))
		}
		if rows.Err() != nil {
			return fmt.Sprintf("(pg_stat_activity: %v)", rows.Err())
		}
		return "the test's connections:" + b.String()
	}
	// until polls cond (a reading of the server's state) until it holds,
	// failing with what when it does not within bound, or when one of
	// the calls in flight returns first (its description and result).
	type ended struct {
		what string
		err  error
	}
	var inFlight []<-chan ended
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(bound)
		for !cond() {
			for _, ch := range inFlight {
				select {
				case e := <-ch:
					t.Fatalf("%s returned (%v) before %s; %s", e.what, e.err, what, activity())
				default:
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v; %s", what, bound, activity())
			}
			time.Sleep(5 * time.Millisecond) // a poll's period, not an order
		}
	}

	// The gate: the test's transaction holds the advisory lock.
	gate, err := admin.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Rollback(context.Background())
	if _, err := gate.Exec(ctxT(t), "SELECT pg_advisory_xact_lock($1)", key); err != nil {
		t.Fatal(err)
	}

	// 1. Half-way through the holder's term, it renews: the renewal
	// passes its liveness test, and waits at the gate holding the row.
	var half time.Duration
	var oldExpiry time.Time
	if err := admin.QueryRow(ctxT(t), `SELECT EXTRACT(EPOCH FROM expires_at - ttl/2 - clock_timestamp())::float8 * interval '1 second', expires_at
		FROM `+q+`.sessions WHERE id = $1`, hid).Scan(&half, &oldExpiry); err != nil {
		t.Fatalf("reading the holder's row: %v", err)
	}
	if half > 0 {
		select {
		case <-time.After(half):
		case <-ctxT(t).Done():
			t.Fatal("the test's context ended")
		}
	}
	renewed := make(chan ended, 1)
	inFlight = append(inFlight, renewed)
	go func() {
		_, err := holder.KeepAlive(ctxT(t))
		renewed <- ended{"the holder's renewal", err}
	}()
	until("the holder's renewal waiting at the gate, past its liveness test", func() bool { return waiting(appH, "%UPDATE%", "advisory") })

	// 2. The contender reads the holder's row as expired once it is, by
	// the committed expiry; its DELETE waits for the renewal's lock. So
	// does the holder's own clean-up, at its deadline.
	cctx, ccancel := context.WithCancel(ctxT(t))
	defer ccancel()
	type grant struct {
		l   backend.Lease
		err error
	}
	got := make(chan grant, 1)
	acquired := make(chan ended, 1)
	go func() {
		l, err := contender.Acquire(cctx, "x")
		got <- grant{l, err}
		if err == nil {
			err = fmt.Errorf("granted the lease, token %d", l.Token())
		}
		acquired <- ended{"the contender's Acquire", err}
	}()
	inFlight = append(inFlight, acquired)
	until("the contender's DELETE of expired sessions waiting for the renewal's lock", func() bool { return waiting(appC, aheadLike, "") })
	reads, _ := tr.count()
	until("the holder's own DELETE of its expired row waiting for the renewal's lock", func() bool { return waiting(appH, "WITH gone AS (DELETE%", "") })

	// 3. A new session opens meanwhile: its sweep of expired sessions
	// skips the row the renewal locks (or waits for it, and re-checks).
	opened := make(chan ended, 1)
	go func() {
		s, err := cb.Open(ctxT(t), backend.SessionOptions{TTL: long})
		if err == nil {
			defer s.Close(context.Background())
		}
		opened <- ended{"a new session's Open", err}
	}()
	sweepWaits := func() bool { return waiting(appC, "WITH gc AS%", "") }
	select {
	case e := <-opened:
		if e.err != nil {
			t.Fatalf("a new session's Open while the renewal was in flight: %v", e.err)
		}
	default:
		until("a new session's Open to return, or its sweep to wait for the renewal's lock", func() bool {
			select {
			case e := <-opened:
				if e.err != nil {
					t.Fatalf("a new session's Open while the renewal was in flight: %v", e.err)
				}
				return true
			default:
			}
			if sweepWaits() {
				t.Logf("a new session's sweep of expired sessions waits for the lock of the holder's renewal in flight")
				inFlight = append(inFlight, opened)
				return true
			}
			return false
		})
	}

	// 4. The renewal commits; the DELETEs waiting for it go on.
	if err := gate.Commit(ctxT(t)); err != nil {
		t.Fatalf("opening the gate: %v", err)
	}
	select {
	case e := <-renewed:
		if e.err != nil {
			t.Fatalf("the holder's renewal, past its liveness test before its expiry (%v): %v", oldExpiry, e.err)
		}
	case <-time.After(bound):
		t.Fatalf("the holder's renewal did not return within %v of the gate opening", bound)
	}
	renewing := renewEvery(t, holder, ttl/4)
	until("the DELETEs waiting for the renewal's lock to finish", func() bool {
		return !waiting(appC, aheadLike, "") && !waiting(appH, "WITH gone AS (DELETE%", "") && !sweepWaits()
	})
	rows, err := admin.Query(ctxT(t), `SELECT app, query, expires_at, at FROM `+q+`.test_deleted`)
	if err != nil {
		t.Fatal(err)
	}
	type deletion struct {
		App, Query string
		Expiry, At time.Time
	}
	dels, err := pgx.CollectRows(rows, pgx.RowToStructByPos[deletion])
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dels {
		who := map[string]string{appC: "the contender's backend", appH: "the holder's own backend"}[d.App]
		why := ""
		if !d.Expiry.After(d.At) {
			why = fmt.Sprintf(" (the renewed expiry had passed too: the machine was too slow for the test's margin of TTL/2 = %v, which shows no bug)", ttl/2)
		}
		t.Errorf("the holder's renewed session row was deleted at %v by %s (%s), its expiry %v then %v ahead (old expiry %v)%s, in:\n%s",
			d.At.Format(time.RFC3339Nano), who, d.App, d.Expiry.Format(time.RFC3339Nano), d.Expiry.Sub(d.At), oldExpiry.Format(time.RFC3339Nano), why, strings.Join(strings.Fields(d.Query), " "))
	}

	// 5. The contender reads the queue again instead of taking the lease.
	for n, changed := tr.count(); n <= reads; n, changed = tr.count() {
		select {
		case <-changed:
		case g := <-got:
			if g.err != nil {
				t.Fatalf("the contender's Acquire ended (%v) instead of reading the queue again", g.err)
			}
			t.Fatalf("the contender took the lease (token %d) from the holder, whose renewal passed its liveness test before the expiry (%v) and committed after the contender read the row", g.l.Token(), oldExpiry)
		case <-time.After(bound):
			t.Fatalf("the contender neither read the queue again nor returned within %v of the renewal's commit", bound)
		}
	}
	select {
	case <-held.Lost():
		t.Error("the holder's lease is lost after the renewal")
	default:
	}
	var n int
	if err := admin.QueryRow(ctxT(t), `SELECT count(*) FROM `+q+`.candidacies c JOIN `+q+`.sessions x ON x.id = c.session
		WHERE c.name = 'x' AND c.token = $1 AND x.id = $2 AND x.expires_at > clock_timestamp()`, int64(held.Token()), hid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("the holder's candidacy (token %d) with a live session: %d rows, want 1", held.Token(), n)
	}

	// 6. The holder hands off: the contender is granted, with a newer token.
	if err := renewing(); err != nil {
		t.Errorf("renewing the holder: %v", err)
	}
	if err := held.Release(ctxT(t)); err != nil {
		t.Fatalf("the holder's Release: %v", err)
	}
	select {
	case g := <-got:
		if g.err != nil {
			t.Fatalf("the contender's Acquire after the holder's release: %v", g.err)
		}
		if g.l.Token() <= held.Token() {
			t.Errorf("the contender's token %d after the hand-off, want > the holder's %d", g.l.Token(), held.Token())
		}
	case <-time.After(bound):
		t.Fatalf("the contender was not granted within %v of the holder's release", bound)
	}
	if t.Failed() {
		return
	}
	if _, err := contender.KeepAlive(ctxT(t)); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("the contender's KeepAlive: %v", err)
	}
}

// renewEvery renews s now and every period until the returned function is called,
// which returns the first error of a renewal, if any.
func renewEvery(t *testing.T, s backend.Session, period time.Duration) (stop func() error) {
	ctx, cancel := context.WithCancel(ctxT(t))
	errc := make(chan error, 1)
	go func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			if _, err := s.KeepAlive(ctx); err != nil && ctx.Err() == nil {
				errc <- err
				return
			}
			select {
			case <-ctx.Done():
				errc <- nil
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-errc })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}
