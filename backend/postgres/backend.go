package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/dbclock"
	"github.com/simba-go/simba/backend/kit/limit"
	"github.com/simba-go/simba/backend/kit/option"
)

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Viewer  = (*Backend)(nil)
)

// Backend is the PostgreSQL backend: sessions, leases, memberships and
// records as rows of the tables of one schema. It is safe for concurrent
// use by multiple goroutines.
type Backend struct {
	pool     *pgxpool.Pool
	ownsPool bool
	schema   string
	q        string // the quoted schema name
	log      *slog.Logger
	noListen bool
	poll     time.Duration
	maxReq   int            // WithMaxRequests' n
	lim      *limit.Limiter // the bound in effect: min(maxReq, the pool's MaxConns - 1)

	ctx    context.Context // ends with Close
	cancel context.CancelFunc

	readyMu sync.Mutex
	ready   bool

	hub *hub

	clock     dbclock.Clock // the database's clock as this client's confirms it
	timelines timelines     // the highest timeline seen (timeline.go)

	closeOnce sync.Once
	wg        sync.WaitGroup
}

// Option configures a Backend. Options refuse bad values: [New] and
// [NewFromPool] return their error instead of correcting them.
type Option func(*config) error

// config is what the options set.
type config struct {
	schema   string
	log      *slog.Logger
	noListen bool
	poll     time.Duration
	maxReq   int
}

// WithSchema names the schema of the backend's tables (default "simba"):
// 1-57 characters of a-z 0-9 _, starting with a letter. They are created
// on first use when the schema has none (see the package documentation
// for their SQL). Backends that share a schema share leases, groups and
// records.
func WithSchema(name string) Option {
	return func(c *config) error {
		if !validSchema.MatchString(name) {
			return fmt.Errorf("simba/postgres: schema name %q: want 1-57 characters of a-z 0-9 _, starting with a letter", name)
		}
		c.schema = name
		return nil
	}
}

// WithLogger sets the logger of the backend's own events (its listening
// connection lost and regained, a pooler detected, a withdrawal retried;
// warnings all): default [slog.Default] when New is called. Pass
// slog.New(slog.DiscardHandler) to log nothing; nil is refused.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("simba/postgres: WithLogger: nil logger")
		}
		c.log = l
		return nil
	}
}

// WithoutListen makes the backend never LISTEN: waiting Acquires read the
// queue at the expiry times of the candidacies ahead and at least every
// interval (default 1s when interval is 0; a negative interval is
// refused), and watches send a hint every interval. Without this option
// the backend LISTENs unless it detects a connection pooler between it
// and the server (then it reads as here; see the package documentation),
// and falls back to the same reading while its listening connection is
// down. Pass it for a pooler in transaction mode that the detection might
// miss.
func WithoutListen(interval time.Duration) Option {
	return func(c *config) error {
		if interval < 0 {
			return fmt.Errorf("simba/postgres: WithoutListen: negative interval %v (0 means the default, %v)", interval, defaultPoll)
		}
		c.noListen = true
		if interval > 0 {
			c.poll = interval
		}
		return nil
	}
}

// DefaultMaxRequests is the bound on statements in flight when
// [WithMaxRequests] is not given (further bounded by the pool's size).
const DefaultMaxRequests = 64

// WithMaxRequests bounds the backend's statements in flight at once
// (default [DefaultMaxRequests], 64) whose number grows with what its
// sessions hold: Acquire's registration and queue reads, withdrawals,
// releases, record reads and writes, candidate lists, and a view's record
// reads. More wait their turn for a slot, each within its caller's ctx,
// without a connection of the pool; one that gives up meanwhile has sent
// nothing. An Acquire waiting for its turn at the lease holds no slot
// while it sleeps, only during each read of the queue.
//
// The bound in effect is the smaller of n and the pool's MaxConns minus
// one ([Backend.MaxRequests]), so that the statements going around it
// always find a connection no bounded statement holds: the sessions'
// keep-alives above all, and the statements whose number does not grow
// with the leases held (Open and Close of a session, its monitor's read of
// its own row, group membership, held-lease listings). n must be positive;
// the pool must allow at least two connections.
func WithMaxRequests(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("simba/postgres: max requests must be positive, got %d", n)
		}
		c.maxReq = n
		return nil
	}
}

// validSchema is the form of a schema name: one that needs no quoting in
// SQL text and in the NOTIFY channel's name.
var validSchema = regexp.MustCompile(`^[a-z][a-z0-9_]{0,56}$`)

// defaultPoll is the interval of the fallback reads (see WithoutListen).
const defaultPoll = time.Second

// New returns a backend on a pool of its own, made from dsn (a URL or
// keyword/value string, as pgx parses it). It does not connect: the first
// Open or View does, and creates the tables. Close closes the pool.
func New(dsn string, opts ...Option) (*Backend, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("simba/postgres: the DSN does not parse: %w", err)
	}
	b, err := newBackend(opts, cfg.MaxConns)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.cancel()
		return nil, fmt.Errorf("simba/postgres: making the pool: %w", err)
	}
	b.pool, b.ownsPool = pool, true
	b.hub = newHub(b)
	return b, nil
}

// NewFromPool returns a backend on the caller's pool, which Close leaves
// open. The backend takes one of its connections for LISTEN (unless
// WithoutListen), which leaves the pool (pgxpool's Hijack), so that the
// pool may open another. The pool must allow at least two connections
// (MaxConns): the backend's bounded statements use at most MaxConns - 1
// at once (see [WithMaxRequests]), and its renewals the one left. That
// holds for the backend's own statements: the application's queries on a
// shared pool can take the connection left for renewals, and a pool of
// its own for the backend, or one with room to spare, keeps them apart.
func NewFromPool(pool *pgxpool.Pool, opts ...Option) (*Backend, error) {
	if pool == nil {
		return nil, errors.New("simba/postgres: NewFromPool: nil pool")
	}
	b, err := newBackend(opts, pool.Config().MaxConns)
	if err != nil {
		return nil, err
	}
	b.pool = pool
	b.hub = newHub(b)
	return b, nil
}

func newBackend(opts []Option, maxConns int32) (*Backend, error) {
	c := config{schema: "simba", log: slog.Default(), poll: defaultPoll, maxReq: DefaultMaxRequests}
	if err := option.Apply("simba/postgres", &c, opts); err != nil {
		return nil, err
	}
	if maxConns < 2 {
		return nil, fmt.Errorf("simba/postgres: the pool allows %d connection(s) (MaxConns, pool_max_conns): want at least 2, one of them left free for the sessions' renewals", maxConns)
	}
	b := &Backend{schema: c.schema, log: c.log, noListen: c.noListen, poll: c.poll, maxReq: c.maxReq}
	lim, err := limit.New(min(b.maxReq, int(maxConns)-1))
	if err != nil {
		return nil, fmt.Errorf("simba/postgres: %w", err)
	}
	b.lim = lim
	b.q = pgx.Identifier{b.schema}.Sanitize()
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// Schema returns the name of the backend's schema.
func (b *Backend) Schema() string { return b.schema }

// MaxRequests returns the bound on statements in flight in effect: the
// smaller of [WithMaxRequests]' n and the pool's MaxConns minus one.
func (b *Backend) MaxRequests() int { return b.lim.Cap() }

// Pool returns the backend's pool (for tests and tools).
func (b *Backend) Pool() *pgxpool.Pool { return b.pool }

// Close stops the backend's goroutines and closes its pool if it made it.
// Sessions still open are abandoned: they expire by the database's clock.
// Close is idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.cancel()
		b.wg.Wait()
		if b.ownsPool {
			b.pool.Close()
		}
	})
	return nil
}

func (b *Backend) closed() bool { return b.ctx.Err() != nil }

// prepare makes sure, once, that the schema exists and the listener runs.
func (b *Backend) prepare(ctx context.Context) error {
	if b.closed() {
		return backend.ErrClosed
	}
	b.readyMu.Lock()
	defer b.readyMu.Unlock()
	if b.ready {
		return nil
	}
	if err := b.ensureSchema(ctx); err != nil {
		return err
	}
	b.ready = true
	// Before the hub takes its connection: run after it, on the first
	// Open's path or on a goroutine of its own, this read made the
	// sessions of a client whose replies came 1 s late miss every renewal
	// (TestSlowRepliesThenCut), or perturbed which server connection a
	// pooler gave the next statement (TestPoolerQueryModes).
	b.warnAsyncStandbys(ctx)
	b.hub.start()
	return nil
}

// connErr wraps an error of the pool or the server for what.
func (b *Backend) connErr(what string, err error) error {
	if b.closed() {
		// Whatever failed, the backend's Close is why (its pool closed, or
		// the call's ctx, derived from the backend's, cancelled).
		return fmt.Errorf("simba/postgres: %s: %w", what, backend.ErrClosed)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000":
			return fmt.Errorf("simba/postgres: %s: the server refused the login: %w", what, describe(err))
		}
		return fmt.Errorf("simba/postgres: %s: %w", what, describe(err))
	}
	return fmt.Errorf("simba/postgres: %s: %w", what, err)
}

// Open inserts a session row that expires TTL after the statement, by the
// database's clock.
func (b *Backend) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	ttl := o.TTL
	if ttl <= 0 {
		return nil, fmt.Errorf("simba/postgres: Open: TTL %v: want a positive TTL", ttl)
	}
	ttl = ttl.Round(time.Millisecond)
	if ttl < time.Millisecond {
		ttl = time.Millisecond
	}
	start := time.Now()
	var (
		id, tl int64
		db     time.Time
	)
	// The statement also deletes a few expired sessions (with their
	// candidacies and members), skipping rows another statement locks,
	// by the database time this client has verified (see clock.go).
	v, c, a := guardArgs(b.clock.Guard(start))
	err := b.pool.QueryRow(ctx, `WITH gc AS (DELETE FROM `+b.q+`.sessions WHERE id IN (
			SELECT id FROM `+b.q+`.sessions x WHERE `+expiredGuardSQL("x", "$2", "$3", "$4")+` LIMIT 8 FOR UPDATE SKIP LOCKED))
		INSERT INTO `+b.q+`.sessions (id, ttl, expires_at)
		VALUES (nextval('`+b.q+`.session_ids') + `+baseSQL()+`, $1, clock_timestamp() + $1) RETURNING id, clock_timestamp(), `+timelineSQL, ttl, v, c, a).Scan(&id, &db, &tl)
	if err != nil {
		return nil, b.connErr("opening a session", err)
	}
	if err := b.noteClock("opening a session", start, time.Now(), db, tl); err != nil {
		return nil, err
	}
	sess := newSession(b, id, ttl, start, tl)
	sess.grantPrefix = o.GrantRecords
	return sess, nil
}

// noteClock records a sample of the database's clock (see clock.go), read
// by a statement of op on timeline tl, and logs a step or a change of
// server. It refuses a timeline below the highest seen (see timeline.go).
// (A session tells its own change of server by the timeline of its
// renewals: see session.recheck.)
func (b *Backend) noteClock(op string, sent, received, db time.Time, tl int64) error {
	if err := b.timelines.note(op, tl); err != nil {
		b.log.Error(err.Error())
		return err
	}
	step, changed := b.clock.Note(sent, received, db, tl)
	if step > 0 {
		b.log.Warn("simba/postgres: the database's clock stepped forward: expired sessions are taken over only once this client's clock confirms their expiry",
			"step", step.Round(time.Millisecond))
	}
	if changed {
		b.log.Warn("simba/postgres: the server changed (a failover: another timeline): expired sessions are taken over, and leases granted, only once this client's clock has run a TTL plus the margin on the new server",
			"timeline", tl)
	}
	return nil
}
