package postgresbench_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/pgtest"
	"github.com/simba-go/simba/tests/internal/handoffbench"
)

// durableTTL is the simba TTL of the durable hand-off, the one of the
// issue's external measurement.
const durableTTL = time.Second

// benchDurable plays the graceful hand-off on a server of the benchmark's
// own that commits durably (fsync and synchronous_commit on, as in
// production): simba, status records on and off, against the floor of a
// hand-off on PostgreSQL, an advisory lock whose waiter blocks in
// pg_advisory_lock (woken by the holder's pg_advisory_unlock, no commit,
// no poll).
func benchDurable(t *testing.T, report *strings.Builder) {
	srv := pgtest.StartServer(t, pgtest.WithDurableCommits())
	dsn := srv.DSN()
	admin := benchPool(t, dsn, "simba-bench-durable-admin", nil)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var fsync, syncCommit string
	if err := admin.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('synchronous_commit')").Scan(&fsync, &syncCommit); err != nil {
		t.Fatal(err)
	}
	cfg := handoffbench.Sized(handoffbench.Config{Settles: handOffSettles, Warmup: handOffWarmup, Rounds: handOffRounds})
	fmt.Fprintf(report, "### Durable hand-off (%d rounds after %d warm-up rounds, sides alternating)\n\n", cfg.Rounds, cfg.Warmup)
	fmt.Fprintf(report, "On a server of the benchmark's own (internal/pgtest, `WithDurableCommits`: fsync = %s, synchronous_commit = %s, full_page_writes on), as in production. "+
		"simba: `simba.WithTTL(%v)`, `LeaderTask.Stop()` on the holder → the next holder's task running, each client on a backend of its own. "+
		"Advisory lock, blocking: the waiter sits in `SELECT pg_advisory_lock(key)` on its own connection, the holder runs `SELECT pg_advisory_unlock(key)` on its own; "+
		"the hand-off is the unlock's start → the waiter's lock call returning: one round trip and the server waking the blocked backend, no commit, the floor of a hand-off on PostgreSQL.\n\n",
		fsync, syncCommit, durableTTL)
	floor, err := commitFloor(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(report, "%s\n\n", floor)
	alone, err := releaseAlone(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(report, "%s\n\n", alone)
	schema := "simba_bench_durable"
	on, stopOn := simbaHandOffSideTTL(t, dsn, schema, "simba (status on)", handoffbench.Reference, true, durableTTL)
	off, stopOff := simbaHandOffSideTTL(t, dsn, schema, "simba (status off)", handoffbench.Simba, false, durableTTL)
	adv, stopAdv := blockingAdvisorySide(t, dsn)
	res, err := handoffbench.Run(cfg, []handoffbench.Side{on, off, adv})
	if err != nil {
		t.Fatal(err)
	}
	for _, stop := range []func() error{stopOn, stopOff, stopAdv} {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}
	res.Markdown(report)
	fmt.Fprintln(report)
}

// commitFloor measures, on a connection of its own to dsn, a round trip
// (SELECT 1) and a durable commit (an INSERT of one row into a table,
// autocommit), 200 of each back to back, then 50 of each after 20 ms
// idle (as a hand-off's statements come, after the settle: the server's
// backend and the client's threads asleep), and returns a sentence with
// their p50/p90.
func commitFloor(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS simba_bench_commit (n bigint)"); err != nil {
		return "", err
	}
	timed := func(n int, idle time.Duration) (rt, commit []time.Duration, err error) {
		for range n {
			time.Sleep(idle)
			t0 := time.Now()
			if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
				return nil, nil, err
			}
			rt = append(rt, time.Since(t0))
			time.Sleep(idle)
			t0 = time.Now()
			if _, err := conn.Exec(ctx, "INSERT INTO simba_bench_commit VALUES (1)"); err != nil {
				return nil, nil, err
			}
			commit = append(commit, time.Since(t0))
		}
		return rt, commit, nil
	}
	rt, commit, err := timed(200, 0)
	if err != nil {
		return "", err
	}
	idleRT, idleCommit, err := timed(50, 20*time.Millisecond)
	if err != nil {
		return "", err
	}
	q := func(ds []time.Duration) string {
		return handoffbench.Ms(handoffbench.Quantile(ds, 0.5)) + " / " + handoffbench.Ms(handoffbench.Quantile(ds, 0.9))
	}
	return fmt.Sprintf("On this server, p50 / p90 of 200 each back to back: a round trip (`SELECT 1`) %s; a durable commit (an autocommit `INSERT` of one row) %s. Of 50 each after 20 ms idle (as a hand-off's statements come): a round trip %s; a durable commit %s.", q(rt), q(commit), q(idleRT), q(idleCommit)), nil
}

// releaseAlone measures the release call alone, on a backend of its own
// on dsn (schema simba_bench_alone): one session acquires a free lease
// and releases it, 300 times, without records and with two (as a status
// release writes), and returns a sentence with the release's p50/p90.
func releaseAlone(ctx context.Context, dsn string) (string, error) {
	b, err := postgres.New(dsn, postgres.WithSchema("simba_bench_alone"))
	if err != nil {
		return "", err
	}
	defer b.Close()
	s, err := b.Open(ctx, backend.SessionOptions{TTL: 5 * time.Second})
	if err != nil {
		return "", err
	}
	defer s.Close(context.Background())
	records := []backend.Record{{Key: "alone/status", Value: []byte("released")}, {Key: "alone/history", Value: []byte("term ended")}}
	var parts []string
	for _, with := range []bool{false, true} {
		var rel []time.Duration
		for i := range 300 {
			if i%50 == 0 {
				if _, err := s.KeepAlive(ctx); err != nil {
					return "", err
				}
			}
			l, err := s.Acquire(ctx, "alone")
			if err != nil {
				return "", err
			}
			t0 := time.Now()
			if with {
				err = l.(backend.RecordReleaser).ReleaseWithRecords(ctx, records)
			} else {
				err = l.Release(ctx)
			}
			if err != nil {
				return "", err
			}
			rel = append(rel, time.Since(t0))
		}
		what := "without records"
		if with {
			what = "with two records"
		}
		parts = append(parts, fmt.Sprintf("%s %s / %s", what, handoffbench.Ms(handoffbench.Quantile(rel, 0.5)), handoffbench.Ms(handoffbench.Quantile(rel, 0.9))))
	}
	return "The release call alone (one session acquiring a free lease and releasing it, 300 times, no waiter), p50 / p90: " + strings.Join(parts, "; ") + ".", nil
}

// blockingAdvisorySide hands an advisory lock over between two
// connections of their own: the waiter blocks in pg_advisory_lock, the
// holder unlocks.
func blockingAdvisorySide(t *testing.T, dsn string) (handoffbench.Side, func() error) {
	var conns [2]*pgx.Conn
	for i := range conns {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		c, err := pgx.ConnectConfig(ctx, connConfig(t, dsn, fmt.Sprintf("simba-bench-durable-advisory-%d", i), ""))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		conns[i] = c
	}
	const key = 43
	lock := func(c *pgx.Conn) error {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(key))
		return err
	}
	unlock := func(c *pgx.Conn) error {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		var ok bool
		if err := c.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", int64(key)).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("pg_advisory_unlock: the lock was not held")
		}
		return nil
	}
	if err := lock(conns[0]); err != nil {
		t.Fatal(err)
	}
	holder := 0
	once := func(settle time.Duration) (handoffbench.Round, error) {
		waiter := 1 - holder
		locked := make(chan time.Time, 1)
		ran := await.Returned(func() error {
			err := lock(conns[waiter])
			locked <- time.Now()
			return err
		})
		time.Sleep(settle)
		t0 := time.Now()
		if err := unlock(conns[holder]); err != nil {
			return handoffbench.Round{}, err
		}
		err, werr := await.Within(ran, opTimeout, "the waiter's pg_advisory_lock did not return")
		if werr != nil {
			return handoffbench.Round{}, werr
		}
		if err != nil {
			return handoffbench.Round{}, err
		}
		at := <-locked
		holder = waiter
		return handoffbench.Round{Total: at.Sub(t0)}, nil
	}
	return handoffbench.Side{Name: "advisory lock, blocking", Role: handoffbench.Peer, Once: once}, func() error { return unlock(conns[holder]) }
}
