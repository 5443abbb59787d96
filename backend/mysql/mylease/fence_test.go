package mylease_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/backend/mysql/mylease"
	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/fencetest"
	"github.com/simba-go/simba/internal/mytest"
)

// bound is how long a step expected to happen promptly may take.
const bound = 20 * time.Second

// nowUS is the database's clock as the backend reads it, in microseconds.
const nowUS = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

// env is a backend with the tables of prefix in a database of the test's
// own, an application table "app" in that database, and the application's
// pool on it.
type env struct {
	prefix string // the backend's, as given: "" is the default
	b      *mysql.Backend
	db     *sql.DB
	f      mylease.Fence
	strict *sql.DB // with innodb_snapshot_isolation on, made by snapshot
}

// newEnv makes an env whose backend's tables have the prefix "fenced_"
// (not the default: a fence that ignored TablePrefix would find no table).
func newEnv(t *testing.T) *env { return newEnvPrefix(t, "fenced_") }

// newEnvPrefix makes an env whose backend's tables have prefix ("": the
// backend's default, "simba_").
func newEnvPrefix(t *testing.T, prefix string) *env {
	t.Helper()
	dsn := mytest.DatabaseDSN(t)
	e := &env{prefix: prefix, f: mylease.Fence{TablePrefix: prefix}}
	var opts []mysql.Option
	if prefix != "" {
		opts = append(opts, mysql.WithTablePrefix(prefix))
	}
	var err error
	opts = append(opts, mysql.WithLogger(slog.New(slog.DiscardHandler)))
	if e.b, err = mysql.New(dsn, opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b.Close() })
	if e.db, err = sql.Open("mysql", dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close() })
	// The first session creates the backend's tables.
	s := e.open(t, time.Minute)
	if err := s.Close(fencetest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(fencetest.Ctx(t), "CREATE TABLE app (k VARCHAR(64) PRIMARY KEY, v BIGINT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	return e
}

// table is the backend's table name (meta, sessions, candidacies,
// lease_names), quoted.
func (e *env) table(name string) string {
	p := e.prefix
	if p == "" {
		p = "simba_"
	}
	return "`" + p + name + "`"
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

// level is an isolation level the application's transactions run at.
type level struct {
	name string
	opts *sql.TxOptions
}

// levels are the server's default (REPEATABLE READ, InnoDB's, unless the
// server is configured otherwise) and READ COMMITTED; allLevels adds
// SERIALIZABLE and REPEATABLE READ named explicitly.
var (
	levels = []level{
		{"default", nil},
		{"read committed", &sql.TxOptions{Isolation: sql.LevelReadCommitted}},
	}
	allLevels = append(append([]level(nil), levels...),
		level{"repeatable read", &sql.TxOptions{Isolation: sql.LevelRepeatableRead}},
		level{"serializable", &sql.TxOptions{Isolation: sql.LevelSerializable}})
)

// tx is an open transaction of the application.
type tx struct {
	x *sql.Tx
	e *env
	t *testing.T
}

// begin begins a transaction at level l, rolled back at the end of the
// test if still open.
func (e *env) begin(t *testing.T, l level) tx {
	t.Helper()
	// The transaction's context ends with the test only: database/sql
	// rolls a transaction back when its context ends, which would end a
	// fenced transaction that a test holds open on purpose.
	x, err := e.db.BeginTx(t.Context(), l.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Rollback() })
	return tx{x, e, t}
}

func (x tx) check(lease string, token uint64) error {
	return x.e.f.Check(fencetest.Ctx(x.t), x.x, lease, token)
}

func (x tx) exec(query string, args ...any) error {
	_, err := x.x.ExecContext(fencetest.Ctx(x.t), query, args...)
	return err
}

func (x tx) commit() error   { return x.x.Commit() }
func (x tx) rollback() error { return x.x.Rollback() }

// upsert is the application's write of v at key "job".
const upsert = "INSERT INTO app (k, v) VALUES ('job', ?) ON DUPLICATE KEY UPDATE v = VALUES(v)"

// write stores v at key "job" in a transaction at level l fenced by the
// lease "job" with token, and commits it.
func (e *env) write(t *testing.T, l level, token uint64, v int64) error {
	t.Helper()
	x := e.begin(t, l)
	if err := x.check("job", token); err != nil {
		// A refused check may have locked the rows it read (the expired
		// session's): roll back at once, as the package says.
		if rerr := x.rollback(); rerr != nil {
			t.Fatalf("rolling back after the check's error %v: %v", err, rerr)
		}
		return err
	}
	if err := x.exec(upsert, v); err != nil {
		t.Fatal(err)
	}
	return x.commit()
}

// value returns the committed value at "job", or -1 if there is none.
func (e *env) value(t *testing.T) int64 {
	t.Helper()
	var v int64
	err := e.db.QueryRowContext(fencetest.Ctx(t), "SELECT v FROM app WHERE k = 'job'").Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
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
		var left int64
		err := e.db.QueryRowContext(ctx, "SELECT expires_us - "+nowUS+" FROM "+e.table("sessions")+" WHERE id = ?", id).Scan(&left)
		if errors.Is(err, sql.ErrNoRows) || err == nil && left < 0 {
			return
		}
		if err != nil {
			t.Fatalf("reading the expiry of session %s: %v", s.ID(), err)
		}
		if !backoff.Sleep(ctx, time.Duration(left)*time.Microsecond+time.Millisecond) {
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

// TestHeldTermCommits: a transaction fenced by a held term commits, at
// every isolation level, and again and again in the term; with the
// backend's default table prefix too.
func TestHeldTermCommits(t *testing.T) {
	for _, prefix := range []string{"fenced_", ""} {
		for _, l := range allLevels {
			t.Run(l.name+" prefix "+strconv.Quote(prefix), func(t *testing.T) {
				t.Parallel()
				e := newEnvPrefix(t, prefix)
				lease := acquire(t, e.open(t, time.Minute))
				for v := int64(1); v <= 3; v++ {
					if err := e.write(t, l, lease.Token(), v); err != nil {
						t.Fatalf("write %d of the holder of token %d: %v", v, lease.Token(), err)
					}
				}
				if got := e.value(t); got != 3 {
					t.Fatalf("value %d, want 3, the holder's last write", got)
				}
			})
		}
	}
}

// TestExpiredTermRefused: once the term's session has expired by the
// database's clock (it stopped renewing, like a paused leader), its write
// is refused although nobody has written since and no candidate came
// after it; once a successor holds, the error names its token.
func TestExpiredTermRefused(t *testing.T) {
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			s := e.open(t, time.Second)
			lease := acquire(t, s)
			if err := e.write(t, l, lease.Token(), 1); err != nil {
				t.Fatalf("the holder's write before its expiry: %v", err)
			}
			e.waitExpired(t, s)
			stale(t, e.write(t, l, lease.Token(), 2), lease.Token(), lease.Token())
			if got := e.value(t); got != 1 {
				t.Fatalf("value %d after the expired term's write, want 1: the refused write committed", got)
			}
			// A successor takes the lease over; the old term's write is
			// refused with the successor's token as the highest.
			next := acquire(t, e.open(t, time.Minute))
			if next.Token() <= lease.Token() {
				t.Fatalf("the successor's token %d is not above %d", next.Token(), lease.Token())
			}
			stale(t, e.write(t, l, lease.Token(), 3), lease.Token(), next.Token())
			if err := e.write(t, l, next.Token(), 4); err != nil {
				t.Fatalf("the successor's write: %v", err)
			}
			if got := e.value(t); got != 4 {
				t.Fatalf("value %d, want 4, the successor's write", got)
			}
		})
	}
}

// TestReleasedTermRefused: after the term released its lease (no one else
// waiting), its write is refused; after another session acquired it, the
// error names that session's token.
func TestReleasedTermRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lease := acquire(t, e.open(t, time.Minute))
	if err := lease.Release(fencetest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	stale(t, e.write(t, levels[0], lease.Token(), 1), lease.Token(), lease.Token())
	next := acquire(t, e.open(t, time.Minute))
	stale(t, e.write(t, levels[0], lease.Token(), 2), lease.Token(), next.Token())
	if got := e.value(t); got != -1 {
		t.Fatalf("value %d, want none: a refused write committed", got)
	}
}

// TestClosedSessionRefused: after the term's session closed (a graceful
// shutdown: its row and candidacies deleted) and another session acquired
// the lease, the old term's write is refused before the new holder wrote
// anything, and the new holder's write commits.
func TestClosedSessionRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, time.Minute)
	lease := acquire(t, s)
	if err := e.write(t, levels[0], lease.Token(), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(fencetest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	next := acquire(t, e.open(t, time.Minute))
	stale(t, e.write(t, levels[0], lease.Token(), 2), lease.Token(), next.Token())
	if got := e.value(t); got != 1 {
		t.Fatalf("value %d, want 1: the closed term's write committed", got)
	}
	if err := e.write(t, levels[0], next.Token(), 3); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}
}

// TestTakeoverWaitsForCommit: a fenced transaction that passed its check
// holds off a successor's takeover past the holder's expiry, and the
// holder's renewals are not blocked meanwhile; when it commits, the
// takeover proceeds, the successor sees the committed write, and the old
// term's next write is refused.
func TestTakeoverWaitsForCommit(t *testing.T) {
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const ttl = 2 * time.Second
			s := e.open(t, ttl)
			lease := acquire(t, s)
			x := e.begin(t, l)
			if err := x.check("job", lease.Token()); err != nil {
				t.Fatalf("the holder's check: %v", err)
			}
			// The check's lock, on the candidacy, does not block the
			// renewal, an UPDATE of the session's row.
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
			e.waitTakeoverWaits(t, next)
			select {
			case a := <-next:
				t.Fatalf("the successor's Acquire returned (%v, %v) while the fenced transaction of the expired holder was open", a.l, a.err)
			default:
			}
			if err := x.exec(upsert, 1); err != nil {
				t.Fatal(err)
			}
			if err := x.commit(); err != nil {
				t.Fatalf("the commit of the holder's transaction, which outlasted its TTL: %v", err)
			}
			a := await.For(t, next, bound, "the successor's Acquire did not return after the fenced transaction committed")
			if a.err != nil {
				t.Fatalf("the successor's Acquire: %v", a.err)
			}
			if a.value != 1 {
				t.Fatalf("value %d when the successor's Acquire returned, want 1: its term began before the old holder's write committed", a.value)
			}
			stale(t, e.write(t, l, lease.Token(), 2), lease.Token(), a.l.Token())
		})
	}
}

// acquired is what an Acquire returned, and the value at "job" read right
// after.
type acquired struct {
	l     backend.Lease
	err   error
	value int64
}

// successor opens a session of a minute and starts its Acquire of "job",
// which returns on the channel with the value the application's table
// had then; the Acquire ends with the test.
func (e *env) successor(t *testing.T) <-chan acquired {
	next := make(chan acquired, 1)
	s := e.open(t, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		l, err := s.Acquire(ctx, "job")
		a := acquired{l: l, err: err, value: -1}
		if err == nil {
			if err := e.db.QueryRowContext(ctx, "SELECT v FROM app WHERE k = 'job'").Scan(&a.value); err != nil && !errors.Is(err, sql.ErrNoRows) {
				a.err = err
			}
		}
		next <- a
	}()
	return next
}

// waitTakeoverWaits waits until a statement of the successor's Acquire
// waits for a row lock in the test's database: its registration's bump of
// the name's counter (at SERIALIZABLE, where the check's subquery locks
// the counter's row), or its deletion of the expired holder's session row
// (DELETE x FROM sessions x ..., which deletes the checked candidacy too). (The holder's own session
// deletes its expired row with DELETE FROM sessions, which does not
// count.) It fails if the successor's Acquire returns first.
func (e *env) waitTakeoverWaits(t *testing.T, next <-chan acquired) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	patterns := []any{
		"INSERT INTO " + e.table("lease_names") + " %",
		"DELETE x FROM " + e.table("sessions") + " x %",
	}
	for {
		// Each poll is bounded on its own: a server busy with other
		// tests' work may be slow to list its transactions.
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		var n int
		err := e.db.QueryRowContext(pctx, `SELECT COUNT(*) FROM information_schema.INNODB_TRX t
			JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
			WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE() AND (t.trx_query LIKE ? OR t.trx_query LIKE ?)`, patterns...).Scan(&n)
		pcancel()
		switch {
		case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			t.Logf("listing the transactions waiting for a lock: %v; polling again", err)
		case err != nil:
			t.Fatalf("reading information_schema.INNODB_TRX: %v", err)
		case n > 0:
			return
		}
		select {
		case a := <-next:
			t.Fatalf("the successor's Acquire returned (%v, %v, value %d) while the expired holder's fenced transaction was open", a.l, a.err, a.value)
		default:
		}
		// InnoDB refreshes INNODB_TRX only when it has not been read for
		// 100 ms: a faster poll would read a stale list forever.
		if !backoff.Sleep(ctx, 200*time.Millisecond) {
			t.Fatalf("no statement of the successor's Acquire waited for a lock within %v", bound)
		}
	}
}

// TestBadInput: invalid arguments match fence.ErrInvalidArgument, without
// a query; tables missing are a database error, not a stale term.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		f     mylease.Fence
		lease string
		token uint64
		why   string // what the error must name (each case has one fault, and the nil transaction is one too: the argument's own complaint must come first)
	}{
		{"token 0", mylease.Fence{}, "job", 0, "token 0 of lease"},
		{"token above MaxInt64", mylease.Fence{}, "job", 1 << 63, "token 9223372036854775808 of lease"},
		{"empty lease", mylease.Fence{}, "", 1, "lease name"},
		{"bad lease", mylease.Fence{}, "a b", 1, "lease name"},
		{"long lease", mylease.Fence{}, strings.Repeat("a", 129), 1, "lease name"},
		{"bad prefix", mylease.Fence{TablePrefix: "x`; DROP TABLE y; --"}, "job", 1, "table prefix"},
		{"upper-case prefix", mylease.Fence{TablePrefix: "Simba_"}, "job", 1, "table prefix"},
		{"nil transaction", mylease.Fence{}, "job", 1, "nil transaction"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.f.Check(ctx, nil, c.lease, c.token)
			if !errors.Is(err, fence.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "simba/fence: ") || !strings.Contains(err.Error(), c.why) {
				t.Errorf("got %v, want an error matching fence.ErrInvalidArgument about %q", err, c.why)
			}
		})
	}
	// The highest token simba's types carry is an argument like any other:
	// the check runs, and finds it not held. (Kills the mutant that
	// refuses math.MaxInt64 as invalid, token >= MaxInt64.)
	t.Run("token MaxInt64", func(t *testing.T) {
		e := newEnv(t)
		x := e.begin(t, levels[0])
		if err := x.check("job", math.MaxInt64); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("check of token MaxInt64, never granted: got %v, want an error matching fence.ErrStale", err)
		}
	})
	t.Run("no tables", func(t *testing.T) {
		db, err := sql.Open("mysql", mytest.DatabaseDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		x, err := db.BeginTx(fencetest.Ctx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Rollback()
		err = mylease.Fence{TablePrefix: "nothing_"}.Check(fencetest.Ctx(t), x, "job", 1)
		if err == nil || errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), `prefix "nothing_"`) {
			t.Fatalf("got %v, want a database error naming the prefix nothing_ as the check's", err)
		}
	})
}
