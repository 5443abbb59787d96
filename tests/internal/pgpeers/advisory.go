package pgpeers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend/kit/backoff"
)

// AdvisoryConfig configures an [AdvisoryLock].
type AdvisoryConfig struct {
	// Conn is the configuration of the elector's dedicated connection (a
	// copy is used for each connection it opens).
	Conn *pgx.ConnConfig
	// Key is the advisory lock's key, the election.
	Key int64
	// Interval is the wait between two tries of a contender that does not
	// hold the lock, and between two pings of the holder (each wait
	// jittered by internal/backoff, in [Interval/2, Interval]).
	Interval time.Duration
	// Timeout bounds each statement, connect and ping; 0 means Interval.
	Timeout time.Duration
	// OnLead, if set, is called from the elector's goroutine with each
	// spell of leadership as it starts.
	OnLead func(*Leadership)
}

// AdvisoryLock is the advisory-lock elector of pglock/ShedLock-style
// libraries. A contender opens a dedicated connection and runs
// pg_try_advisory_lock(key) on it every interval until it gets the lock;
// it then leads for as long as that connection lives, pinging it every
// interval, and stops believing it leads when a ping fails (or on
// Resign, which unlocks). The server frees the lock when the connection
// ends, so a connection the server ends (pg_terminate_backend, an idle
// cull) frees the lock at once while the holder believes it leads until
// its next ping fails. A contender that loses its connection reconnects
// after a jittered interval.
type AdvisoryLock struct {
	cfg AdvisoryConfig
	runner
}

// NewAdvisoryLock returns an elector of cfg; Run starts it.
func NewAdvisoryLock(cfg AdvisoryConfig) (*AdvisoryLock, error) {
	if cfg.Conn == nil {
		return nil, errors.New("pgpeers: AdvisoryConfig.Conn is nil")
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("pgpeers: AdvisoryConfig.Interval is %v, want > 0", cfg.Interval)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = cfg.Interval
	}
	return &AdvisoryLock{cfg: cfg, runner: newRunner()}, nil
}

// Run contends for the lock until ctx ends or Resign is called, then
// unlocks if it holds the lock, closes its connection and returns nil. It
// may be called once.
func (e *AdvisoryLock) Run(ctx context.Context) error {
	ctx, end, err := e.Begin(ctx)
	if err != nil {
		return err
	}
	defer end()
	for ctx.Err() == nil {
		if conn, err := e.connect(ctx); err == nil {
			e.contend(ctx, conn)
		}
		backoff.Sleep(ctx, backoff.Jitter(e.cfg.Interval))
	}
	return nil
}

// Resign stops Run: the holder ends its leadership, unlocks and closes
// its connection. It waits for Run to return, until ctx ends.
func (e *AdvisoryLock) Resign(ctx context.Context) error { return e.runner.Resign(ctx) }

func (e *AdvisoryLock) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	return pgx.ConnectConfig(ctx, e.cfg.Conn.Copy())
}

// contend tries the lock on conn every interval, then holds it while
// conn's pings succeed; it closes conn before it returns.
func (e *AdvisoryLock) contend(ctx context.Context, conn *pgx.Conn) {
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.Timeout)
		defer cancel()
		conn.Close(cctx)
	}()
	for {
		var got bool
		if err := e.exec(ctx, conn, func(ctx context.Context) error {
			return conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", e.cfg.Key).Scan(&got)
		}); err != nil {
			return
		}
		if got {
			break
		}
		if !backoff.Sleep(ctx, backoff.Jitter(e.cfg.Interval)) {
			return
		}
	}
	l := newLeadership(time.Now())
	if e.cfg.OnLead != nil {
		e.cfg.OnLead(l)
	}
	for {
		if !backoff.Sleep(ctx, backoff.Jitter(e.cfg.Interval)) {
			// Resign: stop believing first, then unlock (so that no one
			// leads before this one stopped).
			l.Finish(time.Now(), time.Time{})
			_ = e.exec(context.WithoutCancel(ctx), conn, func(ctx context.Context) error {
				_, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", e.cfg.Key)
				return err
			})
			return
		}
		if err := e.exec(ctx, conn, conn.Ping); err != nil {
			l.Finish(time.Now(), time.Time{})
			return
		}
	}
}

// exec runs f with ctx bounded by the statement timeout.
func (e *AdvisoryLock) exec(ctx context.Context, conn *pgx.Conn, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	return f(ctx)
}
