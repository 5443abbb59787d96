package mypeers

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/backend/kit/backoff"
)

// GetLockConfig configures a [GetLock].
type GetLockConfig struct {
	// Conn is the configuration of the elector's dedicated connection
	// (go-sql-driver/mysql's; a clone is used). Its Params are sent as
	// session variables at each connect (wait_timeout, say).
	Conn *mysql.Config
	// Name is the named lock, the election: 1 to 64 characters.
	Name string
	// Wait is how long a contender blocks in GET_LOCK(Name, Wait) at each
	// try (MariaDB takes fractions of a second); 0 makes it try
	// GET_LOCK(Name, 0) every Interval instead.
	Wait time.Duration
	// Interval is the wait between two pings of the holder, between two
	// tries of a contender that does not block (Wait 0), and before a
	// contender that lost its connection connects again; each wait is
	// jittered by backoff.Jitter, in [Interval/2, Interval].
	Interval time.Duration
	// Timeout bounds each connect, ping and statement (a blocking
	// GET_LOCK gets Wait more); 0 means Interval.
	Timeout time.Duration
	// OnLead, if set, is called from the elector's goroutine with each
	// spell of leadership as it starts.
	OnLead func(*Leadership)
}

// GetLock is the named-lock elector of Go libraries such as
// sanketplus/go-mysql-lock. A contender opens a dedicated connection and
// runs SELECT GET_LOCK(name, wait) on it until it gets the lock (blocked
// in the server for up to wait at each try, so that a release wakes it at
// once; or, with Wait 0, once per interval). It then leads for as long as
// that connection lives, pinging it every interval, and stops believing
// it leads when a ping fails (or on Resign, which runs RELEASE_LOCK
// first). The server frees the lock when the connection ends, so a
// connection the server ends (KILL CONNECTION, wait_timeout, a reset)
// frees the lock at once while the holder believes it leads until its
// next ping fails; and a connection whose link is cut silently keeps the
// lock on the server until the server notices (its wait_timeout, TCP
// keepalives). A contender that loses its connection connects again after
// a jittered interval.
type GetLock struct {
	cfg       GetLockConfig
	connector driver.Connector
	runner
}

// NewGetLock returns an elector of cfg; Run starts it.
func NewGetLock(cfg GetLockConfig) (*GetLock, error) {
	switch {
	case cfg.Conn == nil:
		return nil, errors.New("mypeers: GetLockConfig.Conn is nil")
	case cfg.Name == "" || len(cfg.Name) > 64:
		return nil, fmt.Errorf("mypeers: GetLockConfig.Name %q: want 1 to 64 characters", cfg.Name)
	case cfg.Interval <= 0:
		return nil, fmt.Errorf("mypeers: GetLockConfig.Interval is %v, want > 0", cfg.Interval)
	case cfg.Wait < 0:
		return nil, fmt.Errorf("mypeers: GetLockConfig.Wait is %v, want >= 0", cfg.Wait)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = cfg.Interval
	}
	connector, err := mysql.NewConnector(cfg.Conn.Clone())
	if err != nil {
		return nil, fmt.Errorf("mypeers: GetLockConfig.Conn: %w", err)
	}
	return &GetLock{cfg: cfg, connector: connector, runner: newRunner()}, nil
}

// Run contends for the lock until ctx ends or Resign is called, then
// releases the lock if it holds it, closes its connection and returns
// nil. It may be called once.
func (e *GetLock) Run(ctx context.Context) error {
	ctx, end, err := e.Begin(ctx)
	if err != nil {
		return err
	}
	defer end()
	// A pool of one connection, used as a dedicated connection: each is
	// discarded when the elector is done with it, never reused.
	db := sql.OpenDB(e.connector)
	db.SetMaxOpenConns(1)
	defer db.Close()
	for ctx.Err() == nil {
		if conn, err := e.connect(ctx, db); err == nil {
			e.contend(ctx, conn)
		}
		backoff.Sleep(ctx, backoff.Jitter(e.cfg.Interval))
	}
	return nil
}

// Resign stops Run: the holder ends its leadership, releases the lock and
// closes its connection. It waits for Run to return, until ctx ends.
func (e *GetLock) Resign(ctx context.Context) error { return e.runner.Resign(ctx) }

func (e *GetLock) connect(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	// database/sql dials lazily: make sure the connection is there.
	if err := conn.PingContext(ctx); err != nil {
		discard(conn)
		return nil, err
	}
	return conn, nil
}

// discard closes conn and keeps it out of the pool.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// contend tries the lock on conn until it gets it, then holds it while
// conn's pings succeed; it discards conn before it returns.
func (e *GetLock) contend(ctx context.Context, conn *sql.Conn) {
	defer discard(conn)
	for {
		var got sql.NullInt64
		if err := e.exec(ctx, e.cfg.Timeout+e.cfg.Wait, func(ctx context.Context) error {
			return conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", e.cfg.Name, e.cfg.Wait.Seconds()).Scan(&got)
		}); err != nil || !got.Valid {
			return // NULL: an error in the server (the connection killed, say)
		}
		if got.Int64 == 1 {
			break
		}
		if ctx.Err() != nil {
			return
		}
		if e.cfg.Wait == 0 && !backoff.Sleep(ctx, backoff.Jitter(e.cfg.Interval)) {
			return
		}
	}
	l := newLeadership(time.Now())
	if e.cfg.OnLead != nil {
		e.cfg.OnLead(l)
	}
	for {
		if !backoff.Sleep(ctx, backoff.Jitter(e.cfg.Interval)) {
			// Resign: stop believing first, then release (so that no one
			// leads before this one stopped).
			l.Finish(time.Now(), time.Time{})
			_ = e.exec(context.WithoutCancel(ctx), e.cfg.Timeout, func(ctx context.Context) error {
				_, err := conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", e.cfg.Name)
				return err
			})
			return
		}
		if err := e.exec(ctx, e.cfg.Timeout, conn.PingContext); err != nil {
			l.Finish(time.Now(), time.Time{})
			return
		}
	}
}

// exec runs f with ctx bounded by d.
func (e *GetLock) exec(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(ctx)
}
