package pgpeers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend/kit/backoff"
)

// TableConfig configures a [LeaderTable]. The zero durations take river's
// defaults (5 s interval, 1 s jitter, TTL = interval + 10 s, 5 s per
// statement, 5 errors); the benchmarks scale them down.
type TableConfig struct {
	// Pool is the pool the elector runs its statements on, and from which
	// it takes the connection it LISTENs on.
	Pool *pgxpool.Pool
	// Table is the leader table's name (letters, digits, underscores); it
	// is created, UNLOGGED as river's is, if it does not exist. Its name
	// is also the NOTIFY channel.
	Table string
	// Name is the election, the row's primary key.
	Name string
	// ID is this contender's leader_id, unique among the contenders.
	ID string
	// Interval is the wait between two re-elections of the leader, and
	// the least wait between two tries of a waiter, which waits a random
	// time in [Interval, Interval+Jitter].
	Interval time.Duration
	Jitter   time.Duration
	// TTL is how long a row lives after the election or re-election that
	// wrote it, by the database's clock.
	TTL time.Duration
	// Timeout bounds each election statement (river's deadlineTimeout).
	Timeout time.Duration
	// MaxErrors is the number of re-election errors in a row after which
	// the leader gives up (river's maxNumErrors).
	MaxErrors int
	// Backoff is the first wait after an error, doubled after each error
	// in a row (river's ExponentialBackoff starts at 1 s).
	Backoff time.Duration
	// NoWakeJitter drops river's random 0–50 ms sleep between a
	// resignation's NOTIFY and the waiter's election (a variant, to show
	// what that sleep costs a hand-off).
	NoWakeJitter bool
	// OnLead, if set, is called from the elector's goroutine with each
	// spell of leadership as it starts.
	OnLead func(*Leadership)
}

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,50}$`)

// LeaderTable is the leader-table elector modelled on river's
// (riverqueue/river, internal/leadership/elector.go and its driver's
// leader queries). Kept from river:
//
//   - the row (name, leader_id, elected_at, expires_at) in an UNLOGGED
//     table, every time by the database's clock (now(), the transaction's
//     start);
//   - election: in one transaction, delete the expired row, then INSERT …
//     ON CONFLICT (name) DO NOTHING, elected if it inserted a row;
//     re-election: the same delete, then INSERT … ON CONFLICT DO UPDATE SET
//     expires_at … WHERE leader_id is this one's;
//   - a waiter tries every Interval plus a random jitter, and at once
//     (after a random 0–50 ms, so that waiters do not all bid together)
//     when a NOTIFY on the channel says that another leader resigned;
//   - the leader re-elects every Interval with each statement bounded by
//     Timeout, and believes it leads until a re-election finds the row
//     taken (lost) or MaxErrors re-elections in a row fail (with a
//     doubling backoff between them): no local clock ends its leadership;
//   - resigning (on Resign, or after giving up on errors) deletes the row
//     if it is this one's and NOTIFYs the resignation in the same
//     statement, retried up to 3 times, the n-th try bounded by n × Timeout/5
//     (river: n seconds with a 5 s statement timeout).
//
// Left out: river's client wiring (its notifier multiplexes topics on one
// connection; here the elector LISTENs on a connection of its own) and its
// subscription fan-out (OnLead and [Leadership] instead). [Leadership.TTLEnd]
// tells what a leader that also stopped at its own local TTL since its last
// successful re-election would have believed, as the benchmarks' second
// reading; river does not do this.
type LeaderTable struct {
	cfg    TableConfig
	wake   chan struct{} // a resignation of another contender
	runner runner
}

// NewLeaderTable returns an elector of cfg; Run starts it.
func NewLeaderTable(cfg TableConfig) (*LeaderTable, error) {
	switch {
	case cfg.Pool == nil:
		return nil, errors.New("pgpeers: TableConfig.Pool is nil")
	case !tableName.MatchString(cfg.Table):
		return nil, fmt.Errorf("pgpeers: TableConfig.Table %q is not a plain lower-case name", cfg.Table)
	case cfg.Name == "" || cfg.ID == "":
		return nil, errors.New("pgpeers: TableConfig.Name and ID must not be empty")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Interval, 5*time.Second)
	def(&cfg.Jitter, time.Second)
	def(&cfg.TTL, cfg.Interval+10*time.Second)
	def(&cfg.Timeout, 5*time.Second)
	def(&cfg.Backoff, time.Second)
	if cfg.MaxErrors <= 0 {
		cfg.MaxErrors = 5
	}
	return &LeaderTable{cfg: cfg, wake: make(chan struct{}, 1), runner: newRunner()}, nil
}

// CreateTable creates the leader table named table (see TableConfig.Table)
// in pool's database if it does not exist.
func CreateTable(ctx context.Context, pool *pgxpool.Pool, table string) error {
	if !tableName.MatchString(table) {
		return fmt.Errorf("pgpeers: table %q is not a plain lower-case name", table)
	}
	_, err := pool.Exec(ctx, `CREATE UNLOGGED TABLE IF NOT EXISTS `+table+` (
	name text PRIMARY KEY,
	leader_id text NOT NULL,
	elected_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL)`)
	if err != nil {
		return fmt.Errorf("pgpeers: creating table %s: %w", table, err)
	}
	return nil
}

// Run contends until ctx ends or Resign is called, then resigns if it
// leads and returns nil. It may be called once.
func (e *LeaderTable) Run(ctx context.Context) error {
	ctx, end, err := e.runner.Begin(ctx)
	if err != nil {
		return err
	}
	defer end()
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		e.listen(ctx)
	}()
	defer func() { <-listening }()
	for ctx.Err() == nil {
		if !e.gain(ctx) {
			return nil
		}
		e.keep(ctx)
	}
	return nil
}

// Resign stops Run: a leader ends its leadership and deletes its row with
// a NOTIFY. It waits for Run to return, until ctx ends.
func (e *LeaderTable) Resign(ctx context.Context) error { return e.runner.Resign(ctx) }

type notification struct {
	Action   string `json:"action"`
	LeaderID string `json:"leader_id"`
}

// listen LISTENs on a connection of its own until ctx ends, passing other
// contenders' resignations to e.wake, and reconnects after an error.
func (e *LeaderTable) listen(ctx context.Context) {
	for n := 1; ctx.Err() == nil; n++ {
		if e.listenOnce(ctx) {
			n = 1
		}
		backoff.Sleep(ctx, backoff.Jitter(backoff.Step(n, e.cfg.Backoff, e.cfg.Interval)))
	}
}

// listenOnce listens on one connection until an error; it reports whether
// the LISTEN was in place.
func (e *LeaderTable) listenOnce(ctx context.Context) bool {
	actx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	conn, err := e.cfg.Pool.Acquire(actx)
	if err == nil {
		_, err = conn.Exec(actx, "LISTEN "+e.cfg.Table)
	}
	cancel()
	if err != nil {
		if conn != nil {
			conn.Release()
		}
		return false
	}
	// The connection is closed rather than returned: it is LISTENing.
	defer func() {
		raw := conn.Hijack()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.Timeout)
		defer cancel()
		raw.Close(cctx)
	}()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return true
		}
		var msg notification
		if json.Unmarshal([]byte(n.Payload), &msg) != nil || msg.Action != "resigned" || msg.LeaderID == e.cfg.ID {
			continue
		}
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

// gain tries to be elected until it is, as river's
// attemptGainLeadershipLoop; it returns false when ctx ends.
func (e *LeaderTable) gain(ctx context.Context) bool {
	errs := 0
	for {
		elected, err := e.elect(ctx, false)
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
		if elected {
			return true
		}
		errs = 0
		t := time.NewTimer(e.cfg.Interval + rand.N(e.cfg.Jitter+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		case <-e.wake:
			t.Stop()
			if !e.cfg.NoWakeJitter && !backoff.Sleep(ctx, rand.N(50*time.Millisecond)) {
				return false
			}
		}
	}
}

// keep re-elects every interval while it leads, as river's
// keepLeadershipLoop, then resigns unless the row was lost.
func (e *LeaderTable) keep(ctx context.Context) {
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
		ok, err := e.elect(ctx, true)
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
		e.resign(ctx)
	}
}

// elect runs one election (or re-election) transaction.
func (e *LeaderTable) elect(ctx context.Context, again bool) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	var elected bool
	err := pgx.BeginFunc(ctx, e.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM `+e.cfg.Table+` WHERE name = $1 AND expires_at < now()`, e.cfg.Name); err != nil {
			return err
		}
		q := `INSERT INTO ` + e.cfg.Table + ` (name, leader_id, elected_at, expires_at)
	VALUES ($1, $2, now(), now() + $3::interval)
	ON CONFLICT (name) DO NOTHING`
		if again {
			q = `INSERT INTO ` + e.cfg.Table + ` AS t (name, leader_id, elected_at, expires_at)
	VALUES ($1, $2, now(), now() + $3::interval)
	ON CONFLICT (name) DO UPDATE SET expires_at = now() + $3::interval WHERE t.leader_id = $2`
		}
		tag, err := tx.Exec(ctx, q, e.cfg.Name, e.cfg.ID, e.cfg.TTL)
		elected = err == nil && tag.RowsAffected() == 1
		return err
	})
	return elected, err
}

// resign deletes this contender's row and NOTIFYs the resignation in one
// statement, tried up to 3 times even when ctx has ended, as river's
// attemptResignLoop.
func (e *LeaderTable) resign(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	payload, _ := json.Marshal(notification{Action: "resigned", LeaderID: e.cfg.ID})
	for attempt := 1; attempt <= 3; attempt++ {
		actx, cancel := context.WithTimeout(ctx, time.Duration(attempt)*e.cfg.Timeout/5)
		_, err := e.cfg.Pool.Exec(actx, `WITH gone AS (
	DELETE FROM `+e.cfg.Table+` WHERE name = $1 AND leader_id = $2 RETURNING leader_id)
SELECT pg_notify($3, $4) FROM gone`, e.cfg.Name, e.cfg.ID, e.cfg.Table, string(payload))
		cancel()
		if err == nil {
			return
		}
		backoff.Sleep(ctx, backoff.Jitter(backoff.Step(attempt, e.cfg.Backoff, 16*e.cfg.Backoff)))
	}
}
