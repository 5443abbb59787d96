package mypeers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/backend/kit/backoff"
)

// LockTableConfig configures a [LockTable]. The zero durations take
// ShedLock's scale (lockAtMostFor 30 s, extended every half of it as its
// KeepAliveLockProvider does, 5 s per statement) and a retry every 5 s
// plus up to 1 s; the benchmarks scale them down.
type LockTableConfig struct {
	// DB is the pool the elector runs its statements on.
	DB *sql.DB
	// Table is the lock table's name (lower-case letters, digits,
	// underscores), optionally qualified by its database ("db.locks"):
	// see [CreateLockTable].
	Table string
	// Name is the lock, the election: the row's primary key (at most 64
	// characters).
	Name string
	// ID is this contender's locked_by, unique among the contenders.
	ID string
	// Interval is the wait between two extensions of the holder's lock.
	Interval time.Duration
	// Retry is the least wait between two tries of a contender that does
	// not hold the lock, which waits a random time in [Retry,
	// Retry+Jitter].
	Retry  time.Duration
	Jitter time.Duration
	// TTL is how long the lock lives after the take or extension that
	// wrote it, by the database's clock (ShedLock's lockAtMostFor).
	TTL time.Duration
	// Timeout bounds each statement.
	Timeout time.Duration
	// MaxErrors is the number of failed extensions in a row after which
	// the holder gives up.
	MaxErrors int
	// Backoff is the first wait after an error, doubled after each error
	// in a row (up to 16 times it).
	Backoff time.Duration
	// OnLead, if set, is called from the elector's goroutine with each
	// spell of leadership as it starts.
	OnLead func(*Leadership)
}

var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,63}\.)?[a-z_][a-z0-9_]{0,63}$`)

// quoteTable quotes a valid table name, each part of a qualified one.
func quoteTable(table string) string {
	return "`" + strings.ReplaceAll(table, ".", "`.`") + "`"
}

// LockTable is the lock-table elector of ShedLock's JDBC provider with
// the database's time (usingDbTime), on MySQL and MariaDB. Kept from
// ShedLock:
//
//   - the table (name, lock_until, locked_at, locked_by), every time by
//     the database's clock (NOW(3), the statement's start);
//   - taking the lock: the first try of a contender INSERTs the row (the
//     lock is its own if that inserts one; a duplicate key means the row
//     exists, and it is not tried again), then UPDATE … SET lock_until =
//     NOW(3) + TTL, locked_at = NOW(3), locked_by = ID WHERE name = ? AND
//     lock_until <= NOW(3): the lock is its own if a row changed;
//   - extending it (KeepAliveLockProvider): UPDATE … SET lock_until =
//     NOW(3) + TTL WHERE name = ? AND locked_by = ID AND lock_until >
//     NOW(3), every Interval;
//   - unlocking: UPDATE … SET lock_until = NOW(3) WHERE name = ? AND
//     locked_by = ID (lockAtLeastFor 0), once.
//
// ShedLock locks a scheduled task's run and has no loop of its own; an
// elector built on it, as here, tries every Retry (plus a random jitter)
// while it does not hold the lock, with nothing to wake it when the
// holder unlocks, and extends the lock while it holds it. It believes it
// leads until an extension finds the lock no longer its own (lost) or
// MaxErrors extensions in a row fail (with a doubling backoff between
// them), as river's leader does on PostgreSQL (tests/internal/pgpeers):
// no local clock ends its leadership. [Leadership.TTLEnd] tells what a
// holder that also stopped at its own local TTL since its last successful
// extension would have believed, as the benchmarks' second reading.
type LockTable struct {
	cfg    LockTableConfig
	table  string // quoted
	exists bool   // the row of Name is known to exist (Run's goroutine only)
	runner runner
}

// NewLockTable returns an elector of cfg; Run starts it.
func NewLockTable(cfg LockTableConfig) (*LockTable, error) {
	switch {
	case cfg.DB == nil:
		return nil, errors.New("mypeers: LockTableConfig.DB is nil")
	case !tableName.MatchString(cfg.Table):
		return nil, fmt.Errorf("mypeers: LockTableConfig.Table %q is not a plain lower-case name", cfg.Table)
	case cfg.Name == "" || len(cfg.Name) > 64 || cfg.ID == "":
		return nil, errors.New("mypeers: LockTableConfig.Name (at most 64 characters) and ID must not be empty")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.TTL, 30*time.Second)
	def(&cfg.Interval, cfg.TTL/2)
	def(&cfg.Retry, 5*time.Second)
	def(&cfg.Jitter, time.Second)
	def(&cfg.Timeout, 5*time.Second)
	def(&cfg.Backoff, time.Second)
	if cfg.MaxErrors <= 0 {
		cfg.MaxErrors = 5
	}
	return &LockTable{cfg: cfg, table: quoteTable(cfg.Table), runner: newRunner()}, nil
}

// CreateLockTable creates the lock table named table (see
// LockTableConfig.Table) on db if it does not exist: ShedLock's table for
// MySQL, InnoDB.
func CreateLockTable(ctx context.Context, db *sql.DB, table string) error {
	if !tableName.MatchString(table) {
		return fmt.Errorf("mypeers: table %q is not a plain lower-case name", table)
	}
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+quoteTable(table)+` (
	name       VARCHAR(64) NOT NULL PRIMARY KEY,
	lock_until TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
	locked_at  TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
	locked_by  VARCHAR(255) NOT NULL
) ENGINE=InnoDB`)
	if err != nil {
		return fmt.Errorf("mypeers: creating table %s: %w", table, err)
	}
	return nil
}

// Run contends until ctx ends or Resign is called, then unlocks if it
// holds the lock and returns nil. It may be called once.
func (e *LockTable) Run(ctx context.Context) error {
	ctx, end, err := e.runner.Begin(ctx)
	if err != nil {
		return err
	}
	defer end()
	for ctx.Err() == nil {
		if !e.gain(ctx) {
			return nil
		}
		e.keep(ctx)
	}
	return nil
}

// Resign stops Run: a holder ends its leadership and unlocks. It waits
// for Run to return, until ctx ends.
func (e *LockTable) Resign(ctx context.Context) error { return e.runner.Resign(ctx) }

// gain tries to take the lock every Retry (plus jitter) until it does; it
// returns false when ctx ends.
func (e *LockTable) gain(ctx context.Context) bool {
	errs := 0
	for {
		took, err := e.take(ctx)
		if ctx.Err() != nil {
			return false
		}
		if err != nil {
			errs++
			if !backoff.Sleep(ctx, backoff.Jitter(backoff.Step(errs, e.cfg.Backoff, 16*e.cfg.Backoff))) {
				return false
			}
			continue
		}
		if took {
			return true
		}
		errs = 0
		if !backoff.Sleep(ctx, e.cfg.Retry+rand.N(e.cfg.Jitter+1)) {
			return false
		}
	}
}

// errDuplicate is MySQL's ER_DUP_ENTRY.
const errDuplicate = 1062

// take tries to take the lock once: INSERT while the row is not known to
// exist, else the conditional UPDATE.
func (e *LockTable) take(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	ttl := e.cfg.TTL.Microseconds()
	if !e.exists {
		_, err := e.cfg.DB.ExecContext(ctx, `INSERT INTO `+e.table+` (name, lock_until, locked_at, locked_by)
	VALUES (?, NOW(3) + INTERVAL ? MICROSECOND, NOW(3), ?)`, e.cfg.Name, ttl, e.cfg.ID)
		var me *mysql.MySQLError
		switch {
		case err == nil:
			e.exists = true
			return true, nil
		case errors.As(err, &me) && me.Number == errDuplicate:
			e.exists = true
		default:
			return false, err
		}
	}
	res, err := e.cfg.DB.ExecContext(ctx, `UPDATE `+e.table+` SET lock_until = NOW(3) + INTERVAL ? MICROSECOND, locked_at = NOW(3), locked_by = ?
	WHERE name = ? AND lock_until <= NOW(3)`, ttl, e.cfg.ID, e.cfg.Name)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// extend extends the lock once; false (no error) when the lock is not
// this contender's any more, or has expired. (Rows affected are the rows
// changed: NOW(3) has moved on since the last write, Interval apart.)
func (e *LockTable) extend(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	res, err := e.cfg.DB.ExecContext(ctx, `UPDATE `+e.table+` SET lock_until = NOW(3) + INTERVAL ? MICROSECOND
	WHERE name = ? AND locked_by = ? AND lock_until > NOW(3)`, e.cfg.TTL.Microseconds(), e.cfg.Name, e.cfg.ID)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// keep extends the lock every Interval while it holds it, then unlocks
// unless the lock was lost.
func (e *LockTable) keep(ctx context.Context) {
	last := time.Now() // the last success received
	l := newLeadership(last)
	if e.cfg.OnLead != nil {
		e.cfg.OnLead(l)
	}
	var ttlEnd time.Time // the first instant a local TTL would have ended it
	overdue := func(now time.Time) {
		if ttlEnd.IsZero() && now.Sub(last) > e.cfg.TTL {
			ttlEnd = last.Add(e.cfg.TTL)
		}
	}
	errs := 0
	lost := false
	for !lost {
		if !backoff.Sleep(ctx, e.cfg.Interval) {
			break
		}
		ok, err := e.extend(ctx)
		now := time.Now()
		overdue(now)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			if errs++; errs >= e.cfg.MaxErrors {
				break
			}
			if !backoff.Sleep(ctx, backoff.Jitter(backoff.Step(errs, e.cfg.Backoff, 16*e.cfg.Backoff))) {
				break
			}
			continue
		}
		if !ok {
			lost = true
			break
		}
		errs = 0
		last = now
	}
	now := time.Now()
	overdue(now)
	l.Finish(now, ttlEnd)
	if !lost {
		e.unlock(ctx)
	}
}

// unlock sets lock_until to now if the lock is this contender's, once,
// even when ctx has ended.
func (e *LockTable) unlock(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.Timeout)
	defer cancel()
	_, _ = e.cfg.DB.ExecContext(ctx, `UPDATE `+e.table+` SET lock_until = NOW(3) WHERE name = ? AND locked_by = ?`, e.cfg.Name, e.cfg.ID)
}
