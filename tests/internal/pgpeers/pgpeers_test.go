package pgpeers_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/pgtest"
	"github.com/simba-go/simba/tests/internal/pgpeers"
)

const wait = 20 * time.Second

// elector is what the tests need of both electors.
type elector interface {
	Run(context.Context) error
	Resign(context.Context) error
}

// spell is one Leadership with the contender that had it.
type spell struct {
	who int
	l   *pgpeers.Leadership
}

// calm runs n contenders made by mk, lets the leader resign handOffs
// times, and checks that each resignation hands the lead to another
// contender and that no spell starts before the previous one ended.
func calm(t *testing.T, n, handOffs int, mk func(i int, onLead func(*pgpeers.Leadership)) elector) {
	leads := make(chan spell, 64)
	es := make([]elector, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		await.For(t, await.Done(wg.Wait), wait, "the electors did not stop")
	}()
	for i := range es {
		es[i] = mk(i, func(l *pgpeers.Leadership) { leads <- spell{i, l} })
		wg.Go(func() {
			if err := es[i].Run(ctx); err != nil {
				t.Errorf("contender %d: Run: %v", i, err)
			}
		})
	}
	var spells []spell
	prev := await.For(t, leads, wait, "no first leader")
	spells = append(spells, prev)
	for round := range handOffs {
		if err := es[prev.who].Resign(ctx); err != nil {
			t.Fatal(err)
		}
		next := await.For(t, leads, wait, "round %d: no leader after contender %d resigned", round, prev.who)
		if next.who == prev.who {
			t.Fatalf("round %d: contender %d leads again after resigning", round, prev.who)
		}
		spells = append(spells, next)
		prev = next
	}
	select {
	case s := <-leads:
		t.Fatalf("contender %d also leads, while %d does", s.who, prev.who)
	case <-time.After(300 * time.Millisecond): // a look for a second leader, not a timed assertion
	}
	for i := 1; i < len(spells); i++ {
		a, b := spells[i-1].l, spells[i].l
		select {
		case <-a.Done():
		default:
			t.Fatalf("spell %d (contender %d) still believed while spell %d (contender %d) started", i-1, spells[i-1].who, i, spells[i].who)
		}
		if b.Start.Before(a.End()) {
			t.Errorf("spell %d started %v before spell %d ended", i, a.End().Sub(b.Start), i-1)
		}
	}
}

func TestAdvisoryLockCalm(t *testing.T) {
	cfg, err := pgx.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	key := rand.Int64()
	calm(t, 3, 2, func(i int, onLead func(*pgpeers.Leadership)) elector {
		e, err := pgpeers.NewAdvisoryLock(pgpeers.AdvisoryConfig{Conn: cfg, Key: key, Interval: 50 * time.Millisecond, Timeout: 5 * time.Second, OnLead: onLead})
		if err != nil {
			t.Fatal(err)
		}
		return e
	})
}

func TestLeaderTableCalm(t *testing.T) {
	pool, table := leaderTable(t, pgtest.DSN(t))
	calm(t, 3, 2, func(i int, onLead func(*pgpeers.Leadership)) elector {
		e, err := pgpeers.NewLeaderTable(pgpeers.TableConfig{
			Pool: pool, Table: table, Name: "calm", ID: fmt.Sprint("c", i),
			Interval: 100 * time.Millisecond, Jitter: 20 * time.Millisecond, TTL: 2 * time.Second,
			Timeout: 5 * time.Second, Backoff: 10 * time.Millisecond, OnLead: onLead,
		})
		if err != nil {
			t.Fatal(err)
		}
		return e
	})
}

// TestLeaderTableExpiry: a leader that stops re-electing without
// resigning (its row left behind) is replaced once the row expires by the
// database's clock, not before.
func TestLeaderTableExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	pool, table := leaderTable(t, pgtest.DSN(t))
	// A row of a leader that is gone, expiring in 500ms.
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+" VALUES ('exp', 'gone', now(), now() + interval '500 milliseconds')"); err != nil {
		t.Fatal(err)
	}
	var expires time.Time
	if err := pool.QueryRow(ctx, "SELECT expires_at FROM "+table).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	leads := make(chan *pgpeers.Leadership, 1)
	e, err := pgpeers.NewLeaderTable(pgpeers.TableConfig{
		Pool: pool, Table: table, Name: "exp", ID: "new",
		Interval: 50 * time.Millisecond, Jitter: 10 * time.Millisecond, TTL: time.Second,
		Timeout: 5 * time.Second, Backoff: 10 * time.Millisecond, OnLead: func(l *pgpeers.Leadership) { leads <- l },
	})
	if err != nil {
		t.Fatal(err)
	}
	run := await.Returned(func() error { return e.Run(ctx) })
	l := await.For(t, leads, wait, "no take-over after the old row expired")
	var elected time.Time
	if err := pool.QueryRow(ctx, "SELECT elected_at FROM "+table+" WHERE leader_id = 'new'").Scan(&elected); err != nil {
		t.Fatal(err)
	}
	if !elected.After(expires) {
		t.Errorf("elected at %v, before the old row expired at %v", elected, expires)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	await.For(t, l.Done(), wait, "the leadership did not end on Resign")
	if err := await.For(t, run, wait, "Run did not return"); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("after Resign: %d rows (%v), want none", rows, err)
	}
}

// leaderTable opens a pool on dsn and creates a leader table of a unique
// name in it; both go when the test ends.
func leaderTable(t *testing.T, dsn string) (*pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	table := pgtest.UniqueName(t)
	if err := pgpeers.CreateTable(ctx, pool, table); err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Exec(context.Background(), "DROP TABLE "+table)
		pool.Close()
	})
	return pool, table
}
