package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/pgtest"
)

// The backend behind PgBouncer 1.18 in pool_mode=transaction
// (pgtest.StartPooler), in front of the shared server: each transaction
// may run on another server connection, so pgx's cached prepared
// statements fail (the DSN needs default_query_exec_mode=exec, or
// simple_protocol or cache_describe) and a LISTEN hears nothing (the
// backend needs WithoutListen).

// newBackendAt returns a backend on dsn in a fresh schema of its own (on
// the shared server, which the pooler is in front of), closed at the end
// of the test.
func newBackendAt(t *testing.T, dsn string, opts ...postgres.Option) *postgres.Backend {
	t.Helper()
	return newBackendIn(t, dsn, pgtest.Schema(t), opts...)
}

// newBackendIn returns a backend on dsn in schema, closed at the end of
// the test.
func newBackendIn(t *testing.T, dsn, schema string, opts ...postgres.Option) *postgres.Backend {
	t.Helper()
	b, err := postgres.New(dsn, append([]postgres.Option{postgres.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// TestConformanceThroughPooler runs the conformance suite through one
// PgBouncer in transaction mode, configured as the package documentation
// tells users to: default_query_exec_mode=exec in the DSN and
// WithoutListen.
func TestConformanceThroughPooler(t *testing.T) {
	t.Parallel()
	p := pgtest.StartPooler(t, pgtest.DSN(t))
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return newBackendAt(t, p.DSN(), postgres.WithoutListen(200*time.Millisecond))
	}, backendtest.WithTTL(2*time.Second), backendtest.WithFingerprint(fingerprint), backendtest.WithServerClockRate(serverClockRate))
}

// TestPoolerQueryModes: through the pooler, pgx's default mode (named
// prepared statements, cached per connection) fails with an error that
// says what to set; exec, simple_protocol and cache_describe work for a
// session, a lease, a fenced record and a release.
func TestPoolerQueryModes(t *testing.T) {
	p := pgtest.StartPooler(t, pgtest.DSN(t))
	t.Run("default", func(t *testing.T) {
		// A pooler of its own, whose one idle server connection the
		// backend's client connection prepares its statements on (a pool
		// of two, the least the backend takes; the idle one is reused);
		// a transaction of another client then takes that server
		// connection, and the backend's next statement runs on a new
		// one, where pgx's cached statement does not exist.
		p := pgtest.StartPooler(t, pgtest.DSN(t))
		b := newBackendAt(t, p.DSNWith("pool_max_conns=2"), postgres.WithoutListen(200*time.Millisecond))
		open(t, b, 10*time.Second)
		other, err := pgx.Connect(ctxT(t), p.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(context.Background())
		tx, err := other.Begin(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctxT(t), "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		_, err = b.Open(ctxT(t), backend.SessionOptions{TTL: 10 * time.Second})
		if err == nil {
			t.Fatal("Open on another server connection than the one pgx prepared its statement on: want an error")
		}
		if want := "set default_query_exec_mode=exec in the DSN"; !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say what to set (%q): %v", want, err)
		}
	})
	for _, mode := range []string{"exec", "simple_protocol", "cache_describe"} {
		t.Run(mode, func(t *testing.T) {
			b := newBackendAt(t, p.DSNWith("default_query_exec_mode="+mode), postgres.WithoutListen(200*time.Millisecond))
			for i := range 3 { // on several server connections, as it happens
				s := open(t, b, 10*time.Second)
				if _, err := s.KeepAlive(ctxT(t)); err != nil {
					t.Fatalf("KeepAlive: %v", err)
				}
				l, err := s.Acquire(ctxT(t), "x")
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				rs := s.(backend.Records)
				r, err := rs.PutRecord(ctxT(t), "k", []byte{byte(i)}, backend.Condition{Lease: "x", Token: l.Token()})
				if err != nil {
					t.Fatalf("PutRecord fenced by token %d: %v", l.Token(), err)
				}
				if got, err := rs.GetRecord(ctxT(t), "k"); err != nil || got.Version != r.Version || got.Value[0] != byte(i) {
					t.Fatalf("GetRecord: %+v, %v; want version %d, value %d", got, err, r.Version, i)
				}
				if err := l.Release(ctxT(t)); err != nil {
					t.Fatalf("Release: %v", err)
				}
				if err := s.Close(ctxT(t)); err != nil {
					t.Fatalf("Close: %v", err)
				}
			}
		})
	}
}

// logRecorder is a slog.Handler that sends each message logged at Warn or
// above (at any level with all) on a channel, dropping them when nobody
// reads.
type logRecorder struct {
	msgs chan string
	all  bool
}

func (h logRecorder) Enabled(_ context.Context, l slog.Level) bool {
	return h.all || l >= slog.LevelWarn
}
func (h logRecorder) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.msgs <- r.Message:
	default:
	}
	return nil
}
func (h logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logRecorder) WithGroup(string) slog.Handler      { return h }

// TestPoolerDetected: a backend given the pooler's DSN without
// WithoutListen sees that a pooler answers for the server (the process ID
// the connection announced is not the server process's), says so, and
// never LISTENs through it. While a backend on the server directly writes
// records in the same schema (each one a NOTIFY on the schema's channel),
// PgBouncer logs no "not linked" (a notification arriving on a server
// connection it has lent to no client: a LISTEN left there, which
// PgBouncer 1.18 to 1.20 can exit on) and keeps answering; a lease hands
// off through the pooler by the fallback's reads. Without the check
// (WithoutPoolerCheck) the log shows "not linked".
func TestPoolerDetected(t *testing.T) {
	dsn := pgtest.DSN(t)
	p := pgtest.StartPooler(t, dsn)
	schema := pgtest.Schema(t)
	warnings := make(chan string, 16)
	b := newBackendIn(t, p.DSN(), schema, postgres.WithLogger(slog.New(logRecorder{msgs: warnings})))
	open(t, b, 10*time.Second) // the listener starts with the first session
	if err := awaitWarning(warnings, "a connection pooler stands between"); err != nil {
		t.Error(err)
	}

	direct := newBackendIn(t, dsn, schema)
	rec := open(t, direct, 10*time.Second).(backend.Records)
	for i := range 200 {
		if _, err := rec.PutRecord(ctxT(t), fmt.Sprintf("notify/%d", i%20), []byte("x"), backend.Condition{}); err != nil {
			t.Fatalf("PutRecord on the server directly: %v", err)
		}
	}
	// A round trip through the pooler after the notifications: PgBouncer
	// has read what its server connections received by then.
	requirePoolerAnswers(t, p)
	if log := p.Log(); strings.Contains(log, "not linked") {
		t.Errorf("PgBouncer received notifications on a server connection lent to no client (a LISTEN left through it):\n%s", log)
	}
	handOffThroughPooler(t, open(t, b, 10*time.Second), open(t, b, 10*time.Second))
}

// TestPoolerListenProbe: with the pooler check off (a pooler it does not
// detect), a backend that LISTENs through the pooler hears nothing, not
// even its probe, says so in its log, and hands a lease off anyway, by the
// reads of the fallback: what the probe is for. It remains a safety net,
// not a set-up to run (see the package documentation): the LISTEN stays
// on whichever server connection ran it, which then receives the
// notifications while PgBouncer has lent it to nobody.
func TestPoolerListenProbe(t *testing.T) {
	postgres.WithoutPoolerCheck(t)
	p := pgtest.StartPooler(t, pgtest.DSN(t))
	warnings := make(chan string, 16)
	b := newBackendAt(t, p.DSN(), postgres.WithLogger(slog.New(logRecorder{msgs: warnings})))
	a, c := open(t, b, 10*time.Second), open(t, b, 10*time.Second)
	if err := awaitWarning(warnings, "notifications do not arrive"); err != nil {
		t.Fatal(err)
	}
	handOffThroughPooler(t, a, c)
}

// awaitWarning waits up to 30s for a message in warnings that holds want.
func awaitWarning(warnings chan string, want string) error {
	deadline := time.After(30 * time.Second)
	for {
		select {
		case msg := <-warnings:
			if strings.Contains(msg, want) {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("no warning that says %q within 30s", want)
		}
	}
}

// requirePoolerAnswers fails t unless a query through p answers.
func requirePoolerAnswers(t *testing.T, p *pgtest.Pooler) {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), p.DSN())
	if err != nil {
		t.Fatalf("connecting through PgBouncer: %v", err)
	}
	defer conn.Close(context.Background())
	var one int
	if err := conn.QueryRow(ctxT(t), "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("a query through PgBouncer: %v", err)
	}
}

// handOffThroughPooler hands a lease off between two sessions of a
// backend that does not hear notifications: the waiter c gets it by the
// fallback's reads every poll interval, well before the holder's expiry.
func handOffThroughPooler(t *testing.T, a, c backend.Session) {
	t.Helper()
	la, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	type acquired struct {
		l   backend.Lease
		err error
	}
	got := make(chan acquired, 1)
	go func() {
		l, err := c.Acquire(ctxT(t), "x")
		got <- acquired{l, err}
	}()
	// c queues behind a (its candidacy is there) before a lets go, so that
	// the hand-off is a wake-up of a waiter, not a free lease.
	for {
		cands, err := a.(backend.CandidateLister).Candidates(ctxT(t), "x")
		if err != nil {
			t.Fatalf("Candidates: %v", err)
		}
		if len(cands) == 2 {
			break
		}
		select {
		case r := <-got:
			t.Fatalf("the waiter's Acquire returned while x was held: %v, %v", r.l, r.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// The waiter's timer is a's expiry, 10s away: the fallback's reads
	// every poll interval (1s) hand the lease off well before.
	r := await.For(t, got, 8*time.Second, "the waiter's Acquire after the release (the fallback reads every second)")
	if r.err != nil {
		t.Fatalf("the waiter's Acquire: %v", r.err)
	}
	if r.l.Token() <= la.Token() {
		t.Errorf("token %d after the hand-off, want > %d", r.l.Token(), la.Token())
	}
}

// TestPoolerCrashFailover: a holder behind the pooler crashes (its
// backend closes without releasing: its session is abandoned, its pool's
// connections to PgBouncer close); a waiter on another backend behind the
// same pooler gets the lease once the holder's session has expired by the
// database's clock, no earlier than the deadline a simba client would
// keep for the holder (the start of its last renewal plus the TTL, less
// the default drift margin), and with a larger token.
func TestPoolerCrashFailover(t *testing.T) {
	p := pgtest.StartPooler(t, pgtest.DSN(t))
	const ttl = 2 * time.Second
	schema := pgtest.Schema(t)
	holder, err := postgres.New(p.DSN(), postgres.WithSchema(schema), postgres.WithoutListen(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	waiter, err := postgres.New(p.DSN(), postgres.WithSchema(schema), postgres.WithoutListen(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	h := open(t, holder, ttl)
	lh, err := h.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	w := open(t, waiter, ttl)
	type acquired struct {
		l    backend.Lease
		err  error
		when time.Time
	}
	got := make(chan acquired, 1)
	go func() {
		l, err := w.Acquire(ctxT(t), "x")
		got <- acquired{l, err, time.Now()}
	}()
	start := time.Now()
	if _, err := h.KeepAlive(ctxT(t)); err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
	holder.Close() // the crash: no Release, no session Close
	// w renews its own session meanwhile, as a simba client would.
	renew := time.NewTicker(ttl / 3)
	defer renew.Stop()
	deadline := time.After(2*ttl + 5*time.Second)
	var r acquired
wait:
	for {
		select {
		case r = <-got:
			break wait
		case <-renew.C:
			if _, err := w.KeepAlive(ctxT(t)); err != nil {
				t.Fatalf("the waiter's KeepAlive: %v", err)
			}
		case <-deadline:
			t.Fatalf("the waiter did not get x within 2×TTL+5s of the holder's crash")
		}
	}
	if r.err != nil {
		t.Fatalf("the waiter's Acquire: %v", r.err)
	}
	margin := max(ttl/10, 100*time.Millisecond) // simba's default drift margin
	if since := r.when.Sub(start); since < ttl-margin {
		t.Errorf("x granted %v after the start of the crashed holder's last renewal: before its deadline (TTL %v less the drift margin %v)", since, ttl, margin)
	} else {
		t.Logf("x granted %v after the start of the crashed holder's last renewal (TTL %v)", since, ttl)
	}
	if r.l.Token() <= lh.Token() {
		t.Errorf("token %d after the fail-over, want > %d", r.l.Token(), lh.Token())
	}
	if err := lh.Release(ctxT(t)); err == nil {
		t.Error("Release by the crashed holder succeeded")
	}
}
