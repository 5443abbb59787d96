package pglease_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver of database/sql

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/backend/postgres/pglease"
	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/fencetest"
	"github.com/simba-go/simba/internal/pgtest"
)

// bound is how long a step expected to happen promptly may take.
const bound = 20 * time.Second

// env is a backend in a schema of the test's own, an application table
// "app" in that schema, and the application's handles on the database.
type env struct {
	schema string
	b      *postgres.Backend
	pool   *pgxpool.Pool
	db     *sql.DB
	f      pglease.Fence
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dsn := pgtest.DSN(t)
	e := &env{schema: pgtest.Schema(t)}
	e.f = pglease.Fence{Schema: e.schema}
	var err error
	if e.b, err = postgres.New(dsn, postgres.WithSchema(e.schema)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b.Close() })
	if e.pool, err = pgxpool.New(context.Background(), dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pool.Close)
	if e.db, err = sql.Open("pgx", dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close() })
	// The first session creates the backend's tables.
	s := e.open(t, time.Minute)
	if err := s.Close(fencetest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, "CREATE TABLE "+e.schema+".app (k text PRIMARY KEY, v bigint NOT NULL)")
	return e
}

// open opens a session of ttl, closed when the test ends. Nothing renews
// it: it expires ttl after Open unless the test calls KeepAlive.
func (e *env) open(t *testing.T, ttl time.Duration) backend.Session {
	t.Helper()
	s, err := e.b.Open(fencetest.Ctx(t), backend.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// acquire acquires the lease "job" on s.
func acquire(t *testing.T, s backend.Session) backend.Lease {
	t.Helper()
	l, err := s.Acquire(fencetest.Ctx(t), "job")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// tx is an open transaction of either driver.
type tx struct {
	check    func(lease string, token uint64) error
	exec     func(sql string, args ...any) error
	commit   func() error
	rollback func() error
}

// driver begins transactions through pgx or database/sql.
type driver struct {
	name  string
	begin func(t *testing.T, e *env) tx
}

// pgxDriver is the driver of pgx's own transactions, begun with opts.
func pgxDriver(name string, opts pgx.TxOptions) driver {
	return driver{name, func(t *testing.T, e *env) tx {
		ctx := fencetest.Ctx(t)
		x, err := e.pool.BeginTx(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Rollback(context.Background()) })
		return tx{
			check: func(lease string, token uint64) error { return e.f.CheckPgx(ctx, x, lease, token) },
			exec: func(sql string, args ...any) error {
				_, err := x.Exec(ctx, sql, args...)
				return err
			},
			commit:   func() error { return x.Commit(ctx) },
			rollback: func() error { return x.Rollback(ctx) },
		}
	}}
}

var drivers = []driver{
	pgxDriver("pgx", pgx.TxOptions{}),
	{"database/sql", func(t *testing.T, e *env) tx {
		ctx := fencetest.Ctx(t)
		x, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Rollback() })
		return tx{
			check: func(lease string, token uint64) error { return e.f.Check(ctx, x, lease, token) },
			exec: func(sql string, args ...any) error {
				_, err := x.ExecContext(ctx, sql, args...)
				return err
			},
			commit:   x.Commit,
			rollback: x.Rollback,
		}
	}},
}

// write stores v at key "job" in a transaction fenced by the lease "job"
// with token, and commits it.
func (e *env) write(t *testing.T, d driver, token uint64, v int64) error {
	t.Helper()
	x := d.begin(t, e)
	if err := x.check("job", token); err != nil {
		return err
	}
	if err := x.exec("INSERT INTO "+e.schema+".app (k, v) VALUES ('job', $1) ON CONFLICT (k) DO UPDATE SET v = excluded.v", v); err != nil {
		t.Fatal(err)
	}
	return x.commit()
}

// value returns the committed value at "job", or -1 if there is none.
func (e *env) value(t *testing.T) int64 {
	t.Helper()
	var v int64
	err := e.pool.QueryRow(fencetest.Ctx(t), "SELECT v FROM "+e.schema+".app WHERE k = 'job'").Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitExpired waits until the database's clock has passed the expiry of
// session s (or the row is gone).
func (e *env) waitExpired(t *testing.T, s backend.Session) {
	t.Helper()
	id, err := strconv.ParseInt(s.ID(), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound+s.TTL())
	defer cancel()
	for {
		var left float64
		err := e.pool.QueryRow(ctx, "SELECT EXTRACT(EPOCH FROM expires_at - clock_timestamp())::float8 FROM "+e.schema+".sessions WHERE id = $1", id).Scan(&left)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && left < 0 {
			return
		}
		if err != nil {
			t.Fatalf("reading the expiry of session %s: %v", s.ID(), err)
		}
		if !backoff.Sleep(ctx, time.Duration(left*float64(time.Second))+time.Millisecond) {
			t.Fatalf("session %s did not expire by the database's clock within %v", s.ID(), bound+s.TTL())
		}
	}
}

// stale checks that err is the stale error of the lease "job" for token,
// with highest as the last granted token.
func stale(t *testing.T, err error, token, highest uint64) {
	t.Helper()
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the check of token %d: got %v, want an error matching fence.ErrStale", token, err)
	}
	var se *fence.StaleError
	if !errors.As(err, &se) {
		t.Fatalf("the check of token %d: %v is not a *fence.StaleError", token, err)
	}
	want := fence.StaleError{Resource: "job", Token: token, Highest: highest}
	if *se != want {
		t.Fatalf("the check of token %d: got %+v, want %+v", token, *se, want)
	}
	if token == highest && !strings.Contains(err.Error(), "the term no longer holds its lease") {
		t.Fatalf("the check of token %d, with no later candidate: %q does not say that the term no longer holds its lease", token, err)
	}
}

// TestHeldTermCommits: a transaction fenced by a held term commits, on
// either driver, and again and again in the term.
func TestHeldTermCommits(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			e := newEnv(t)
			l := acquire(t, e.open(t, time.Minute))
			for v := int64(1); v <= 3; v++ {
				if err := e.write(t, d, l.Token(), v); err != nil {
					t.Fatalf("write %d of the holder of token %d: %v", v, l.Token(), err)
				}
			}
			if got := e.value(t); got != 3 {
				t.Fatalf("value %d, want 3, the holder's last write", got)
			}
		})
	}
}

// TestExpiredTermRefused: once the term's session has expired by the
// database's clock (it stopped renewing, like a paused leader), its write
// is refused although nobody has written since and no candidate came
// after it; once a successor holds, the error names its token.
func TestExpiredTermRefused(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			e := newEnv(t)
			s := e.open(t, time.Second)
			l := acquire(t, s)
			if err := e.write(t, d, l.Token(), 1); err != nil {
				t.Fatalf("the holder's write before its expiry: %v", err)
			}
			e.waitExpired(t, s)
			stale(t, e.write(t, d, l.Token(), 2), l.Token(), l.Token())
			if got := e.value(t); got != 1 {
				t.Fatalf("value %d after the expired term's write, want 1: the refused write committed", got)
			}
			// A successor takes the lease over; the old term's write is
			// refused with the successor's token as the highest.
			next := acquire(t, e.open(t, time.Minute))
			if next.Token() <= l.Token() {
				t.Fatalf("the successor's token %d is not above %d", next.Token(), l.Token())
			}
			stale(t, e.write(t, d, l.Token(), 3), l.Token(), next.Token())
			if err := e.write(t, d, next.Token(), 4); err != nil {
				t.Fatalf("the successor's write: %v", err)
			}
			if got := e.value(t); got != 4 {
				t.Fatalf("value %d, want 4, the successor's write", got)
			}
		})
	}
}

// TestReleasedTermRefused: after the term released its lease (no one else
// waiting), its write is refused.
func TestReleasedTermRefused(t *testing.T) {
	e := newEnv(t)
	l := acquire(t, e.open(t, time.Minute))
	if err := l.Release(fencetest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	stale(t, e.write(t, drivers[0], l.Token(), 1), l.Token(), l.Token())
}

// TestTakeoverWaitsForCommit: a fenced transaction that passed its check
// holds off a successor's takeover past the holder's expiry, and the
// holder's renewals are not blocked meanwhile; when it commits, the
// takeover proceeds, and the old term's next write is refused.
func TestTakeoverWaitsForCommit(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			e := newEnv(t)
			const ttl = 2 * time.Second
			s := e.open(t, ttl)
			l := acquire(t, s)
			x := d.begin(t, e)
			if err := x.check("job", l.Token()); err != nil {
				t.Fatalf("the holder's check: %v", err)
			}
			// The check's KEY SHARE locks do not block the renewal.
			if err := await.For(t, await.Returned(func() error {
				_, err := s.KeepAlive(fencetest.Ctx(t))
				return err
			}), bound, "a renewal while a fenced transaction is open did not return"); err != nil {
				t.Fatalf("a renewal while a fenced transaction is open: %v", err)
			}

			next := e.successor(t)
			// The holder stops renewing; the successor finds its session
			// expired and its deletion waits for the transaction's lock.
			e.waitExpired(t, s)
			e.waitLockWaiter(t, func() bool { return len(next) > 0 })
			select {
			case a := <-next:
				t.Fatalf("the successor's Acquire returned (%v, %v) while the fenced transaction of the expired holder was open", a.l, a.err)
			default:
			}
			if err := x.exec("INSERT INTO " + e.schema + ".app (k, v) VALUES ('job', 1)"); err != nil {
				t.Fatal(err)
			}
			if err := x.commit(); err != nil {
				t.Fatalf("the commit of the holder's transaction, which outlasted its TTL: %v", err)
			}
			a := await.For(t, next, bound, "the successor's Acquire did not return after the fenced transaction committed")
			if a.err != nil {
				t.Fatalf("the successor's Acquire: %v", a.err)
			}
			if got := e.value(t); got != 1 {
				t.Fatalf("value %d, want 1, the old holder's committed write", got)
			}
			stale(t, e.write(t, d, l.Token(), 2), l.Token(), a.l.Token())
		})
	}
}

// acquired is what an Acquire returned.
type acquired struct {
	l   backend.Lease
	err error
}

// successor opens a session of a minute and starts its Acquire of "job",
// which returns on the channel; the Acquire ends with the test.
func (e *env) successor(t *testing.T) <-chan acquired {
	next := make(chan acquired, 1)
	s := e.open(t, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		l, err := s.Acquire(ctx, "job")
		next <- acquired{l, err}
	}()
	return next
}

// waitLockWaiter waits until a statement deleting from the schema's
// sessions table waits for a lock, failing if acquired returns true first.
func (e *env) waitLockWaiter(t *testing.T, acquired func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	pattern := `%DELETE FROM "` + e.schema + `".sessions%`
	for attempt := 1; ; attempt++ {
		var n int
		err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`, pattern).Scan(&n)
		if err != nil {
			t.Fatalf("reading pg_stat_activity: %v", err)
		}
		if n > 0 {
			return
		}
		if acquired() {
			t.Fatal("the successor took the lease over while the expired holder's fenced transaction was open")
		}
		if !backoff.Sleep(ctx, backoff.Wait(attempt, 100*time.Millisecond)) {
			t.Fatalf("no statement deleting from %s.sessions waited for a lock within %v: the successor did not try to take the lease over", e.schema, bound)
		}
	}
}

// TestBadInput: invalid arguments match fence.ErrInvalidArgument, without
// a query; a schema without simba's tables is a database error, not a
// stale term.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		f     pglease.Fence
		lease string
		token uint64
		why   string // what the error must name (each case has one fault, and the nil transaction is one too: the argument's own complaint must come first)
	}{
		{"token 0", pglease.Fence{}, "job", 0, "token 0 of lease"},
		{"token above MaxInt64", pglease.Fence{}, "job", 1 << 63, "token 9223372036854775808 of lease"},
		{"empty lease", pglease.Fence{}, "", 1, "lease name"},
		{"bad lease", pglease.Fence{}, "a b", 1, "lease name"},
		{"bad schema", pglease.Fence{Schema: `x"; DROP TABLE y; --`}, "job", 1, "schema"},
		{"nil transaction", pglease.Fence{}, "job", 1, "nil transaction"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, err := range []error{c.f.Check(ctx, nil, c.lease, c.token), c.f.CheckPgx(ctx, nil, c.lease, c.token)} {
				if !errors.Is(err, fence.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "simba/fence: ") || !strings.Contains(err.Error(), c.why) {
					t.Errorf("got %v, want an error matching fence.ErrInvalidArgument about %q", err, c.why)
				}
			}
		})
	}
	// The highest token simba grants is an argument like any other: the
	// check runs, and finds it not held. (Kills the mutant that refuses
	// math.MaxInt64 as invalid, token >= MaxInt64.)
	t.Run("token MaxInt64", func(t *testing.T) {
		e := newEnv(t)
		err := pgx.BeginFunc(fencetest.Ctx(t), e.pool, func(tx pgx.Tx) error {
			return e.f.CheckPgx(fencetest.Ctx(t), tx, "job", math.MaxInt64)
		})
		if !errors.Is(err, fence.ErrStale) {
			t.Fatalf("check of token MaxInt64, never granted: got %v, want an error matching fence.ErrStale", err)
		}
	})
	t.Run("no tables", func(t *testing.T) {
		schema := pgtest.Schema(t)
		pgtest.Exec(t, "CREATE SCHEMA "+schema)
		pool, err := pgxpool.New(context.Background(), pgtest.DSN(t))
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		err = pgx.BeginFunc(fencetest.Ctx(t), pool, func(tx pgx.Tx) error {
			return pglease.Fence{Schema: schema}.CheckPgx(fencetest.Ctx(t), tx, "job", 1)
		})
		if err == nil || errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), "in schema \""+schema+"\"") {
			t.Fatalf("got %v, want a database error naming the schema %s as the check's", err, schema)
		}
	})
}
