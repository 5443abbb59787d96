package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/backend/kit/backoff"
	simbamysql "github.com/simba-go/simba/backend/mysql"
)

// MySQL lays a lease out as PostgreSQL does (grants_postgres_test.go): a
// queue of candidacies, the rows (name, token, session) of
// <prefix>candidacies, inserted by Acquire with the next token of the
// name's counter (<prefix>lease_names.last, bumped in the same
// transaction, under the counter row's lock, so that tokens are committed
// in their order), deleted by Release, a withdrawal, or with their
// session's row (ON DELETE CASCADE). The holder of a name is its oldest
// live candidacy: the lowest token whose session's expires_us is still
// ahead of the server's clock (UTC_TIMESTAMP(6), in microseconds since the
// Unix epoch, fixed at each statement's start). A session's expiry writes
// nothing; an expired session never comes back (a renewal extends only a
// live one), and its rows are dead everywhere until someone deletes them
// (backend/mysql's package documentation).
//
// So the watcher reads the same rows and draws the same conclusions as
// PostgreSQL's, with its bookkeeping (pgGrantWatch.take): the watcher of
// the test process polls the prefix's tables on a connection of its own
// to the server (not through any client's proxy) every myPollEvery, in one
// statement, and so one snapshot (InnoDB's consistent read of one
// statement): every candidacy with its session's expires_us and ttl_us,
// and every counter. A poll sent at s and answered at g saw the rows as
// committed at an instant in [s, g]; expires_us is the server's clock,
// which on this machine is the test's. MySQL has no notifications: the
// watcher polls every myPollEvery and at no other time, as PostgreSQL's
// does between notifications, so a candidacy inserted and deleted within
// one period is a blind spot (a token of the counter that no poll showed;
// see pgGrantWatch.take for every blind spot).
//
// Steps of the clocks are taken in as PostgreSQL's watcher does: a step of
// the wall clock ahead of the monotonic clock between two polls, and from
// then on a session renewed before the step counts as alive until its row
// is gone (backend/mysql's dbclock guard deletes no session an unverified
// step expired).
//
// The one server of TestMySQL has no failover: the epoch (backend/mysql's
// epoch.go) stays 1 and the tokens below 1 << 40, and the failover parts
// of pgGrantWatch (timelines, carried grants) stay idle.
const myPollEvery = 20 * time.Millisecond

func (p *mysqlWorld) watchGrants(prefix string) (*grantWatch, error) {
	return watchMyGrants(p.dsn, prefix)
}

// myGrantWatch polls a prefix's tables into a pgGrantWatch's bookkeeping.
type myGrantWatch struct {
	db     *sql.DB
	prefix string
	q      func(table string) string // the quoted name of a table of prefix

	// Owned by the polling goroutine.
	w       *pgGrantWatch // the queues and the grant log
	prevNow time.Time     // the last poll's send, with its monotonic reading
	stepAt  time.Time     // the wall time of the last step of the clocks seen
}

// watchMyGrants creates prefix's tables (as a DBA would, with SchemaSQL)
// and starts a watcher of its grants, after a first poll.
func watchMyGrants(dsn, prefix string) (*grantWatch, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("the grant watch: %w", err)
	}
	cfg.Timeout = 2 * time.Second // to connect
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("the grant watch: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxIdleConns(0) // a connection given back after a failure is not used again
	w := &myGrantWatch{db: db, prefix: prefix, q: func(table string) string { return "`" + prefix + table + "`" },
		w: &pgGrantWatch{schema: prefix, log: newGrantLog(), names: map[string]*pgQueue{}}}
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(err error) (*grantWatch, error) {
		cancel()
		db.Close()
		return nil, fmt.Errorf("the grant watch: %w", err)
	}
	octx, ocancel := context.WithTimeout(ctx, myOpTimeout)
	defer ocancel()
	schema, err := simbamysql.SchemaSQL(prefix)
	if err != nil {
		return fail(err)
	}
	conn, err := db.Conn(octx)
	if err != nil {
		return fail(err)
	}
	for _, stmt := range strings.Split(strings.TrimSpace(schema), ";\n") {
		if stmt = strings.TrimSuffix(strings.TrimSpace(stmt), ";"); stmt == "" {
			continue
		}
		if _, err := conn.ExecContext(octx, stmt); err != nil {
			conn.Close()
			return fail(fmt.Errorf("creating the tables of %s: %w", prefix, err))
		}
	}
	if err := w.poll(octx, conn); err != nil {
		conn.Close()
		return fail(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.loop(ctx, conn) })
	return &grantWatch{log: w.w.log, stop: func() {
		cancel()
		wg.Wait()
		db.Close()
	}}, nil
}

// loop polls until ctx ends, on conn and then on the connections it opens
// again after a failure (the server restarted, paused, or slow).
func (w *myGrantWatch) loop(ctx context.Context, conn *sql.Conn) {
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	tick := time.NewTicker(myPollEvery)
	defer tick.Stop()
	for attempt := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var err error
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			conn, err = w.db.Conn(cctx)
			cancel()
		}
		if err == nil {
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err = w.poll(qctx, conn)
			cancel()
			if err != nil {
				conn.Close()
			}
		}
		if err != nil {
			conn = nil
			attempt++
			if !backoff.Sleep(ctx, backoff.Wait(attempt, 200*time.Millisecond)) {
				return
			}
			continue
		}
		attempt = 0
	}
}

// poll reads every candidacy and counter of the prefix's tables in one
// statement, and takes in what changed.
func (w *myGrantWatch) poll(ctx context.Context, conn *sql.Conn) error {
	now := time.Now()
	sent := now.Round(0)
	if !w.prevNow.IsZero() {
		if step := sent.Sub(w.prevNow.Round(0)) - now.Sub(w.prevNow); step > pgStepMin {
			w.stepAt = sent
			w.w.log.notef("server: the wall clock stepped %v ahead of the monotonic clock: expiries of sessions renewed before are not counted", step.Round(time.Millisecond))
		}
	}
	w.prevNow = now
	rows, err := conn.QueryContext(ctx, `SELECT 1, name, last, NULL, NULL FROM `+w.q("lease_names")+`
		UNION ALL SELECT 0, c.name, c.token, x.expires_us, x.ttl_us FROM `+w.q("candidacies")+` c JOIN `+w.q("sessions")+` x ON x.id = c.session`)
	if err != nil {
		return fmt.Errorf("polling the candidacies of %s: %w", w.prefix, err)
	}
	defer rows.Close()
	var got []pgRow
	for rows.Next() {
		var (
			counter      int
			row          pgRow
			token        int64
			expires, ttl sql.NullInt64
		)
		if err := rows.Scan(&counter, &row.name, &token, &expires, &ttl); err != nil {
			return fmt.Errorf("polling the candidacies of %s: %w", w.prefix, err)
		}
		row.counter, row.token = counter == 1, uint64(token)
		if !row.counter {
			row.expires = time.UnixMicro(expires.Int64)
			row.ttl = time.Duration(ttl.Int64) * time.Microsecond
			row.renewed = row.expires.Add(-row.ttl)
			if !w.stepAt.IsZero() && row.renewed.Before(w.stepAt) {
				// Renewed before a step: alive until its row is gone.
				row.expires = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
			}
		}
		got = append(got, row)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("polling the candidacies of %s: %w", w.prefix, err)
	}
	w.w.take(sent, time.Now().Round(0), got)
	return nil
}
