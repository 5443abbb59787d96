package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/dbclock"
	"github.com/simba-go/simba/backend/kit/limit"
	"github.com/simba-go/simba/backend/kit/option"
)

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Viewer  = (*Backend)(nil)
)

// Backend is the MySQL and MariaDB backend: sessions, leases, memberships
// and records as rows of InnoDB tables in one database. It is safe for
// concurrent use by multiple goroutines.
type Backend struct {
	db      *sql.DB
	ownsDB  bool
	prefix  string
	dbName  string // DATABASE(), read by prepare
	t       tables
	log     *slog.Logger
	poll    time.Duration
	maxReq  int
	lim     *limit.Limiter
	noBells bool

	ctx    context.Context // ends with Close
	cancel context.CancelFunc

	readyMu sync.Mutex
	ready   bool

	hub *hub

	clock  dbclock.Clock // the database's clock as this client's confirms it
	epochs epochs        // the highest epoch seen (epoch.go)

	gcRunning atomic.Bool

	closeOnce sync.Once
	wg        sync.WaitGroup
}

// Option configures a Backend. Options refuse bad values: [New] and
// [NewFromDB] return their error instead of correcting them.
type Option func(*config) error

type config struct {
	prefix  string
	log     *slog.Logger
	poll    time.Duration
	maxReq  int
	noBells bool
}

// validPrefix is the form of a table prefix: one that needs no quoting
// and leaves room for the longest table name within MySQL's 64.
var validPrefix = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// WithTablePrefix names the backend's tables (default "simba_": the
// tables simba_meta, simba_sessions, …) in the DSN's database: 1-40
// characters of a-z 0-9 _, starting with a letter. They are created on
// first use when none exists (see the package documentation for their
// SQL). Backends that share a prefix in one database share leases, groups
// and records.
func WithTablePrefix(prefix string) Option {
	return func(c *config) error {
		if !validPrefix.MatchString(prefix) {
			return fmt.Errorf("simba/mysql: table prefix %q: want 1-40 characters of a-z 0-9 _, starting with a letter", prefix)
		}
		c.prefix = prefix
		return nil
	}
}

// WithLogger sets the logger of the backend's own events (a step of the
// database's clock, a change of server, a withdrawal retried; warnings
// all): default [slog.Default] when New is called. Pass
// slog.New(slog.DiscardHandler) to log nothing; nil is refused.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("simba/mysql: WithLogger: nil logger")
		}
		c.log = l
		return nil
	}
}

// DefaultPollInterval is how often watches re-read when [WithPollInterval]
// is not given.
const DefaultPollInterval = time.Second

// WithPollInterval sets how often the watches of members and records send
// a hint with nothing seen to change (default [DefaultPollInterval]):
// MySQL has no LISTEN/NOTIFY, so a change made by another process is seen
// at the next hint (a change made through this Backend wakes its watches at
// once). Waiting Acquires do not poll (see the package documentation,
// "Waiting"). The interval must be positive.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("simba/mysql: WithPollInterval: %v: want a positive interval", d)
		}
		c.poll = d
		return nil
	}
}

// WithoutBells makes waiting Acquires wait for the earliest expiry ahead
// of them, or a change made through this Backend, and never on a holder's
// named lock (see the package documentation, "Waiting"): a hand-off
// between processes then takes up to a TTL. For tests and for servers
// where GET_LOCK is not allowed. A pool of fewer than 4 connections
// (SetMaxOpenConns) has no bells either: the bells take one connection,
// and their waiters statement slots.
func WithoutBells() Option {
	return func(c *config) error {
		c.noBells = true
		return nil
	}
}

// DefaultMaxRequests is the bound on statements in flight when
// [WithMaxRequests] is not given (further bounded by the pool's size).
const DefaultMaxRequests = 64

// WithMaxRequests bounds the backend's statements in flight at once whose
// number grows with what its sessions hold (default
// [DefaultMaxRequests]): Acquire's registration and queue reads,
// withdrawals, releases, record reads and writes, candidate lists, and
// the waits on bells. More wait for a slot within their caller's ctx,
// holding no connection. The bound in effect is the smaller of n and the
// pool's MaxOpenConns minus one, or minus two with bells (when the pool
// has a limit), so that the sessions' renewals always find a connection.
// n must be positive.
func WithMaxRequests(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("simba/mysql: max requests must be positive, got %d", n)
		}
		c.maxReq = n
		return nil
	}
}

// minBellConns is the smallest pool with bells.
const minBellConns = 4

// NeedMultiStatements sets in cfg what the backend needs of its pool's
// connections: several statements in one query (MultiStatements) and the
// arguments interpolated by the driver (InterpolateParams), so that a
// transaction is one round trip. Call it on the Config of a pool given to
// [NewFromDB]; [New] calls it on the DSN's.
func NeedMultiStatements(cfg *mysql.Config) {
	cfg.MultiStatements = true
	cfg.InterpolateParams = true
}

// defaultMaxConns is the size of the pool New makes.
const defaultMaxConns = 16

// New returns a backend on a pool of its own of 16 connections, made from
// dsn (the format of github.com/go-sql-driver/mysql:
// user:password@tcp(host:3306)/db?tls=true): a server's max_connections
// (151 by default) allows nine such clients.
// It does not connect: the first Open or View does, and creates the
// tables. Close closes the pool.
func New(dsn string, opts ...Option) (*Backend, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("simba/mysql: the DSN does not parse: %w", err)
	}
	if cfg.DBName == "" {
		return nil, errors.New("simba/mysql: the DSN names no database (user:password@tcp(host:3306)/DATABASE)")
	}
	NeedMultiStatements(cfg)
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("simba/mysql: the DSN: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(defaultMaxConns)
	db.SetMaxIdleConns(defaultMaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	b, err := newBackend(db, true, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	return b, nil
}

// NewFromDB returns a backend on the caller's pool, which Close leaves
// open. Its DSN must name a database and allow several statements in one
// query, with the arguments interpolated by the driver (multiStatements=true
// and interpolateParams=true: [NeedMultiStatements] sets both in a
// *mysql.Config), for the backend's transactions of one round trip (see
// the package documentation, "Transactions"); the first Open or View
// checks it. The pool must allow at least two
// connections (SetMaxOpenConns, 0 being no limit): the backend's bounded
// statements use at most all but one, the sessions' renewals the one
// left; the application's queries on a shared pool can take that one, so
// give the backend a pool of its own or one with room to spare.
func NewFromDB(db *sql.DB, opts ...Option) (*Backend, error) {
	if db == nil {
		return nil, errors.New("simba/mysql: NewFromDB: nil *sql.DB")
	}
	return newBackend(db, false, opts)
}

func newBackend(db *sql.DB, owns bool, opts []Option) (*Backend, error) {
	c := config{prefix: "simba_", log: slog.Default(), poll: DefaultPollInterval, maxReq: DefaultMaxRequests}
	if err := option.Apply("simba/mysql", &c, opts); err != nil {
		return nil, err
	}
	n := c.maxReq
	if maxConns := db.Stats().MaxOpenConnections; maxConns > 0 {
		if maxConns < 2 {
			return nil, fmt.Errorf("simba/mysql: the pool allows %d connection(s) (SetMaxOpenConns): want at least 2, one of them left free for the sessions' renewals", maxConns)
		}
		// One connection is left for the renewals; with bells, one more
		// holds the bells (bells.go), which needs a pool of 4 or more.
		free := 1
		if maxConns < minBellConns {
			c.noBells = true
		}
		if !c.noBells {
			free = 2
		}
		n = min(n, maxConns-free)
	}
	lim, err := limit.New(n)
	if err != nil {
		return nil, fmt.Errorf("simba/mysql: %w", err)
	}
	b := &Backend{db: db, ownsDB: owns, prefix: c.prefix, t: newTables(c.prefix), log: c.log, poll: c.poll, maxReq: c.maxReq, lim: lim, noBells: c.noBells}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.hub = newHub(b)
	return b, nil
}

// TablePrefix returns the prefix of the backend's tables.
func (b *Backend) TablePrefix() string { return b.prefix }

// MaxRequests returns the bound on statements in flight in effect.
func (b *Backend) MaxRequests() int { return b.lim.Cap() }

// DB returns the backend's pool (for tests and tools).
func (b *Backend) DB() *sql.DB { return b.db }

// Close stops the backend's goroutines, releases its named locks and
// closes its pool if it made it. Sessions still open are abandoned: they
// expire by the database's clock. Close is idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.cancel()
		b.wg.Wait() // the bells' keeper among them, which closes its connection and so frees the named locks
		if b.ownsDB {
			b.db.Close()
		}
	})
	return nil
}

func (b *Backend) closed() bool { return b.ctx.Err() != nil }

// prepare makes sure, once, that the tables exist and are as this code
// made them.
func (b *Backend) prepare(ctx context.Context) error {
	if b.closed() {
		return backend.ErrClosed
	}
	b.readyMu.Lock()
	defer b.readyMu.Unlock()
	if b.ready {
		return nil
	}
	var name sql.NullString
	if err := b.db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name); err != nil {
		return b.connErr("connecting", err)
	}
	if !name.Valid {
		return errors.New("simba/mysql: the connection has no database (name one in the DSN: user:password@tcp(host:3306)/DATABASE)")
	}
	b.dbName = name.String
	if err := b.checkMultiStatements(ctx); err != nil {
		return err
	}
	if err := b.ensureSchema(ctx); err != nil {
		return err
	}
	b.ready = true
	b.warnAsyncReplicas(ctx)
	b.hub.start()
	return nil
}

// MySQL's error numbers the backend tells apart.
const (
	errDupEntry        = 1062
	errAccessDenied    = 1045
	errDBAccessDenied  = 1044
	errTableAccess     = 1142
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
	errReadOnly        = 1290
	errOptionPrevents  = 1836 // MySQL's read_only variant
)

// connErr wraps an error of the pool or the server for what.
func (b *Backend) connErr(what string, err error) error {
	if b.closed() {
		return fmt.Errorf("simba/mysql: %s: %w", what, backend.ErrClosed)
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case errAccessDenied, errDBAccessDenied:
			return fmt.Errorf("simba/mysql: %s: the server refused the login: %w", what, err)
		case errTableAccess:
			return fmt.Errorf("simba/mysql: %s: the user may not use the backend's tables: %w", what, err)
		case errReadOnly, errOptionPrevents:
			return fmt.Errorf("simba/mysql: %s: the server is read-only (a replica, or a primary being demoted): %w", what, err)
		}
	}
	return fmt.Errorf("simba/mysql: %s: %w", what, err)
}

// retryable reports whether err is a deadlock or a lock wait timeout:
// InnoDB rolled the transaction back (or the statement), which may be
// tried again.
func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == errDeadlock || me.Number == errLockWaitTimeout)
}

// Open inserts a session row that expires TTL after the statement, by the
// database's clock.
func (b *Backend) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	ttl := o.TTL
	if ttl <= 0 {
		return nil, fmt.Errorf("simba/mysql: Open: TTL %v: want a positive TTL", ttl)
	}
	ttl = max(ttl.Round(time.Millisecond), time.Millisecond)
	for attempt := 0; ; attempt++ {
		id := rand.Int64N(1<<62) + 1 // never reused (see "Sessions" in the package documentation)
		start := time.Now()
		var s sample
		err := b.onConn(ctx, func(conn *sql.Conn) error {
			if _, err := conn.ExecContext(ctx, `INSERT INTO `+b.t.sessions+` (id, ttl_us, expires_us) VALUES (?, ?, `+nowUS+` + ?)`,
				id, ttl.Microseconds(), ttl.Microseconds()); err != nil {
				return err
			}
			var err error
			s, err = b.sampleOn(ctx, conn, "opening a session", start)
			return err
		})
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == errDupEntry && attempt < 3 {
			continue
		}
		if epochErr(err) {
			return nil, err
		}
		if err != nil {
			return nil, b.connErr("opening a session", err)
		}
		b.gcSoon()
		sess := newSession(b, id, ttl, start, s.epoch)
		sess.grantPrefix = o.GrantRecords
		return sess, nil
	}
}

// onConn runs f on one connection of the pool, so that its statements
// reach one server.
func (b *Backend) onConn(ctx context.Context, f func(*sql.Conn) error) error {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return f(conn)
}

// noteClock records a sample of the database's clock (see package
// dbclock) read by a statement of op on epoch epoch, and logs a step or a
// change of server. It refuses an epoch below the highest seen.
func (b *Backend) noteClock(op string, sent, received, db time.Time, epoch int64) error {
	if err := b.epochs.note(op, epoch); err != nil {
		b.log.Error(err.Error())
		return err
	}
	step, changed := b.clock.Note(sent, received, db, epoch)
	if step > 0 {
		b.log.Warn("simba/mysql: the database's clock stepped forward: expired sessions are taken over only once this client's clock confirms their expiry",
			"step", step.Round(time.Millisecond))
	}
	if changed {
		b.log.Warn("simba/mysql: the server changed (a failover: another epoch): expired sessions are taken over, and leases granted, only once this client's clock has run a TTL plus the margin on the new server",
			"epoch", epoch)
	}
	return nil
}

// gcSoon deletes, in the background, a few expired sessions (with their
// candidacies and members) whose rows nobody else would delete (a crashed
// client's, of names nobody waits for), by the database time this client
// has verified: one statement, bounded by a ctx of 10 s.
func (b *Backend) gcSoon() {
	if !b.gcRunning.CompareAndSwap(false, true) {
		return
	}
	b.wg.Go(func() {
		defer b.gcRunning.Store(false)
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		v, c, a := b.guardArgs(time.Now())
		_, err := b.db.ExecContext(ctx, `DELETE FROM `+b.t.sessions+` WHERE `+guardSQL(b.t.sessions)+` LIMIT 8`, guardVals(v, c, a)...)
		if err != nil {
			b.log.Debug("simba/mysql: deleting expired sessions", "err", err)
		}
	})
}

// checkMultiStatements checks that the pool's connections run several
// statements of one query with interpolated arguments (see
// NeedMultiStatements).
func (b *Backend) checkMultiStatements(ctx context.Context) error {
	var one, two int
	err := b.batch(ctx, []string{"SET @simba_probe = ?"}, "SELECT @simba_probe, 2", []any{1}, &one, &two)
	if err == nil && (one != 1 || two != 2) {
		err = fmt.Errorf("read %d, %d", one, two)
	}
	if err != nil {
		return fmt.Errorf("simba/mysql: the pool's connections do not run several statements in one query with the driver interpolating arguments (set multiStatements=true and interpolateParams=true in its DSN, or call mysql.NeedMultiStatements on its Config): %w", b.connErr("checking the connection", err))
	}
	return nil
}
