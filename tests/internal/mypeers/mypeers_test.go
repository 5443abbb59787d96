package mypeers_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/mytest"
	"github.com/simba-go/simba/tests/internal/mypeers"
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
	l   *mypeers.Leadership
}

// calm runs n contenders made by mk, lets the leader resign handOffs
// times, and checks that each resignation hands the lead to another
// contender and that no spell starts before the previous one ended.
func calm(t *testing.T, n, handOffs int, mk func(i int, onLead func(*mypeers.Leadership)) elector) {
	leads := make(chan spell, 64)
	es := make([]elector, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		await.For(t, await.Done(wg.Wait), wait, "the electors did not stop")
	}()
	for i := range es {
		es[i] = mk(i, func(l *mypeers.Leadership) { leads <- spell{i, l} })
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

// connConfig parses dsn (go-sql-driver/mysql's format).
func connConfig(t *testing.T, dsn string) *mysql.Config {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// lockName is a named lock of the test's own (the server's named locks
// are shared by every database).
func lockName(t *testing.T) string { return mytest.UniqueName(t) }

func TestGetLockCalm(t *testing.T) {
	cfg := connConfig(t, mytest.DSN(t))
	for _, c := range []struct {
		name string
		wait time.Duration
	}{{"blocking", time.Second}, {"trying", 0}} {
		t.Run(c.name, func(t *testing.T) {
			name := lockName(t)
			calm(t, 3, 2, func(i int, onLead func(*mypeers.Leadership)) elector {
				e, err := mypeers.NewGetLock(mypeers.GetLockConfig{Conn: cfg, Name: name, Wait: c.wait,
					Interval: 50 * time.Millisecond, Timeout: 5 * time.Second, OnLead: onLead})
				if err != nil {
					t.Fatal(err)
				}
				return e
			})
		})
	}
}

func TestLockTableCalm(t *testing.T) {
	db, table := lockTable(t, mytest.DatabaseDSN(t))
	calm(t, 3, 2, func(i int, onLead func(*mypeers.Leadership)) elector {
		e, err := mypeers.NewLockTable(mypeers.LockTableConfig{
			DB: db, Table: table, Name: "calm", ID: fmt.Sprint("c", i),
			Interval: 100 * time.Millisecond, Retry: 50 * time.Millisecond, Jitter: 20 * time.Millisecond, TTL: 2 * time.Second,
			Timeout: 5 * time.Second, Backoff: 10 * time.Millisecond, OnLead: onLead,
		})
		if err != nil {
			t.Fatal(err)
		}
		return e
	})
}

// TestLockTableExpiry: a holder that stops extending without unlocking
// (its row left behind) is replaced once the row expires by the
// database's clock, not before; Resign unlocks.
func TestLockTableExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	db, table := lockTable(t, mytest.DatabaseDSN(t))
	// A row of a holder that is gone, expiring in 500ms.
	if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" VALUES ('exp', NOW(3) + INTERVAL 500000 MICROSECOND, NOW(3), 'gone')"); err != nil {
		t.Fatal(err)
	}
	var expires time.Time
	if err := db.QueryRowContext(ctx, "SELECT lock_until FROM "+table).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	leads := make(chan *mypeers.Leadership, 1)
	e, err := mypeers.NewLockTable(mypeers.LockTableConfig{
		DB: db, Table: table, Name: "exp", ID: "new",
		Interval: 100 * time.Millisecond, Retry: 50 * time.Millisecond, Jitter: 10 * time.Millisecond, TTL: time.Second,
		Timeout: 5 * time.Second, Backoff: 10 * time.Millisecond, OnLead: func(l *mypeers.Leadership) { leads <- l },
	})
	if err != nil {
		t.Fatal(err)
	}
	run := await.Returned(func() error { return e.Run(ctx) })
	l := await.For(t, leads, wait, "no take-over after the old row expired")
	var locked time.Time
	if err := db.QueryRowContext(ctx, "SELECT locked_at FROM "+table+" WHERE locked_by = 'new'").Scan(&locked); err != nil {
		t.Fatal(err)
	}
	if locked.Before(expires) {
		t.Errorf("locked at %v, before the old row expired at %v", locked, expires)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	await.For(t, l.Done(), wait, "the leadership did not end on Resign")
	if err := await.For(t, run, wait, "Run did not return"); err != nil {
		t.Fatal(err)
	}
	var free bool
	if err := db.QueryRowContext(ctx, "SELECT lock_until <= NOW(3) FROM "+table+" WHERE name = 'exp'").Scan(&free); err != nil || !free {
		t.Errorf("after Resign: lock free %v (%v), want free", free, err)
	}
}

// openDB opens a pool on dsn, closed when the test ends.
func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// lockTable opens a pool on dsn and creates a lock table in its database;
// both go when the test ends (the database with it, see mytest).
func lockTable(t *testing.T, dsn string) (*sql.DB, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	db := openDB(t, dsn)
	table := "shedlock"
	if err := mypeers.CreateLockTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	return db, table
}
