package pgpeers_test

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/pgtest"
	"github.com/simba-go/simba/tests/internal/pgpeers"
)

// The peers' known split-brains, shown on the real server: the reason the
// benchmarks measure their overlap. Each test waits for the new leader
// while the old one's belief is held open by a long interval or timeout
// (a minute), so that the order does not depend on the machine's speed.

// TestAdvisoryLockTerminated: the server ends the holder's connection
// (pg_terminate_backend, an idle cull) and frees the lock; another
// contender takes it while the old holder, until its next ping, still
// believes it leads.
func TestAdvisoryLockTerminated(t *testing.T) {
	dsn := pgtest.DSN(t)
	key := rand.Int64()
	leads := make(chan *pgpeers.Leadership, 2)
	mk := func(app string, interval time.Duration) *pgpeers.AdvisoryLock {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["application_name"] = app
		e, err := pgpeers.NewAdvisoryLock(pgpeers.AdvisoryConfig{Conn: cfg, Key: key, Interval: interval, Timeout: 5 * time.Second,
			OnLead: func(l *pgpeers.Leadership) { leads <- l }})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	app := pgtest.UniqueName(t)
	old := mk(app, time.Minute) // pings every 30 s to 1 min
	oldRun := await.Returned(func() error { return old.Run(context.Background()) })
	first := await.For(t, leads, wait, "no first leader")
	waiter := mk(app+"_w", 20*time.Millisecond)
	waiterRun := await.Returned(func() error { return waiter.Run(context.Background()) })

	pgtest.MustTerminate(t, dsn, app)
	second := await.For(t, leads, wait, "no take-over after the holder's connection was terminated")
	select {
	case <-first.Done():
		t.Fatalf("the old holder stopped believing at %v, before its next ping: want it still believing (the split-brain)", first.End())
	default:
	}
	t.Logf("the new leader started while the old one believed it led (no token fences the old one's writes); new leader at %v", second.Start)

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, e := range []*pgpeers.AdvisoryLock{old, waiter} {
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range []<-chan error{oldRun, waiterRun} {
		if err := await.For(t, ch, wait, "Run did not return"); err != nil {
			t.Error(err)
		}
	}
}

// TestLeaderTableCut: the holder's link is cut; its row expires by the
// database's clock and a waiter takes over, while the old leader, its
// re-election hanging until the statement timeout (river's loop has no
// local deadline), still believes it leads.
func TestLeaderTableCut(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct, table := leaderTable(t, dsn)

	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	px, err := faultproxy.New(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	host, port, _ := net.SplitHostPort(px.Addr())
	p, _ := strconv.ParseUint(port, 10, 16)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
	cut, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()

	leads := make(chan *pgpeers.Leadership, 2)
	mk := func(pool *pgxpool.Pool, id string) *pgpeers.LeaderTable {
		e, err := pgpeers.NewLeaderTable(pgpeers.TableConfig{
			Pool: pool, Table: table, Name: "cut", ID: id,
			Interval: 100 * time.Millisecond, Jitter: 20 * time.Millisecond, TTL: 500 * time.Millisecond,
			Timeout: time.Minute, Backoff: 10 * time.Millisecond, MaxErrors: 5,
			OnLead: func(l *pgpeers.Leadership) { leads <- l },
		})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	old := mk(cut, "old")
	oldRun := await.Returned(func() error { return old.Run(ctx) })
	first := await.For(t, leads, wait, "no first leader")
	waiter := mk(direct, "waiter")
	waiterRun := await.Returned(func() error { return waiter.Run(ctx) })

	px.Blackhole()
	second := await.For(t, leads, wait, "no take-over after the holder's row expired")
	select {
	case <-first.Done():
		t.Fatalf("the old leader stopped believing at %v: want it still believing, its re-election hanging", first.End())
	default:
	}
	var leader string
	if err := direct.QueryRow(ctx, "SELECT leader_id FROM "+table+" WHERE name = 'cut'").Scan(&leader); err != nil || leader != "waiter" {
		t.Fatalf("the row's leader is %q (%v), want waiter", leader, err)
	}
	t.Logf("the new leader started at %v while the old one believed it led", second.Start)

	// Stopping the old one ends its hanging statement; healing lets its
	// resignation through (it deletes nothing: the row is the waiter's).
	px.Heal()
	rctx, rcancel := context.WithTimeout(context.Background(), wait)
	defer rcancel()
	if err := old.Resign(rctx); err != nil {
		t.Fatal(err)
	}
	if end, ttlEnd := first.End(), first.TTLEnd(); end.IsZero() || ttlEnd.After(end) || !ttlEnd.Before(second.Start.Add(time.Second)) {
		t.Errorf("old spell: End %v, TTLEnd %v: want TTLEnd at most End, within the TTL of the cut", end, ttlEnd)
	}
	if err := waiter.Resign(rctx); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan error{oldRun, waiterRun} {
		if err := await.For(t, ch, wait, "Run did not return"); err != nil {
			t.Error(err)
		}
	}
}
