package mypeers_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/mytest"
	"github.com/simba-go/simba/tests/internal/mypeers"
)

// The peers under the three faults of the benchmarks (tests/bench/mysql),
// shown on the real server: the link cut (internal/faultproxy,
// Blackhole), the server ending the holder's connection (KILL
// CONNECTION), and the holder's crash as the server sees it (its
// connections reset and new ones refused: faultproxy's Refuse, as the
// PostgreSQL benchmark does). A holder's connections are told from the
// others' by their database (mytest.Kill); the lock table's holder reaches
// the shared table by its qualified name. Where a test shows a
// split-brain, the old holder's belief is held open by a long interval,
// timeout or backoff (a minute), so that the order does not depend on the
// machine's speed.

// getLock returns a GetLock elector on dsn (through the proxy px if not
// nil), with session variables params, reporting to leads.
func getLock(t *testing.T, dsn string, px *faultproxy.Proxy, name string, interval, timeout time.Duration, params map[string]string, leads chan<- *mypeers.Leadership) *mypeers.GetLock {
	t.Helper()
	cfg := connConfig(t, dsn)
	if px != nil {
		cfg.Addr = px.Addr()
	}
	for k, v := range params {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params[k] = v
	}
	e, err := mypeers.NewGetLock(mypeers.GetLockConfig{Conn: cfg, Name: name, Wait: time.Second, Interval: interval, Timeout: timeout,
		OnLead: func(l *mypeers.Leadership) { leads <- l }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// newProxy returns a fault proxy to the test server, closed when the test
// ends.
func newProxy(t *testing.T, dsn string) *faultproxy.Proxy {
	t.Helper()
	px, err := faultproxy.New(connConfig(t, dsn).Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return px
}

// stop resigns each elector and waits for its Run to return.
func stop(t *testing.T, es []elector, runs []<-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, e := range es {
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range runs {
		if err := await.For(t, ch, wait, "Run did not return"); err != nil {
			t.Error(err)
		}
	}
}

// stillBelieves fails t unless the spell l is still believed.
func stillBelieves(t *testing.T, l *mypeers.Leadership, why string) {
	t.Helper()
	select {
	case <-l.Done():
		t.Fatalf("the old holder stopped believing at %v: want it still believing (%s)", l.End(), why)
	default:
	}
}

// TestGetLockKilled: the server ends the holder's connection (KILL
// CONNECTION, as a DBA or a proxy's cull does) and frees the lock; the
// blocked contender gets it at once while the old holder, until its next
// ping, still believes it leads.
func TestGetLockKilled(t *testing.T) {
	dsn := mytest.DSN(t)
	name := lockName(t)
	leads := make(chan *mypeers.Leadership, 2)
	oldDB := mytest.Database(t)
	old := getLock(t, mytest.DSNFor(t, oldDB), nil, name, time.Minute, 5*time.Second, nil, leads) // pings every 30 s to 1 min
	oldRun := await.Returned(func() error { return old.Run(context.Background()) })
	first := await.For(t, leads, wait, "no first leader")
	waiter := getLock(t, mytest.DSNFor(t, mytest.Database(t)), nil, name, 20*time.Millisecond, 5*time.Second, nil, leads)
	waiterRun := await.Returned(func() error { return waiter.Run(context.Background()) })

	mytest.MustKill(t, dsn, oldDB)
	second := await.For(t, leads, wait, "no take-over after the holder's connection was killed")
	stillBelieves(t, first, "the split-brain: no token fences its writes")
	t.Logf("the new leader started at %v while the old one believed it led", second.Start)
	stop(t, []elector{old, waiter}, []<-chan error{oldRun, waiterRun})
}

// TestGetLockCut: the holder's link is cut. The holder stops believing
// when its ping times out, but the server, which learns nothing of the
// cut, keeps the lock on the dead connection (by default for wait_timeout,
// 8 hours, or until TCP keepalives give up): no one leads. The lock moves
// only when the server ends that connection (here a KILL, standing in for
// its dead-peer detection).
func TestGetLockCut(t *testing.T) {
	dsn := mytest.DSN(t)
	name := lockName(t)
	leads := make(chan *mypeers.Leadership, 2)
	px := newProxy(t, dsn)
	oldDB := mytest.Database(t)
	old := getLock(t, mytest.DSNFor(t, oldDB), px, name, 50*time.Millisecond, 200*time.Millisecond, nil, leads)
	oldRun := await.Returned(func() error { return old.Run(context.Background()) })
	first := await.For(t, leads, wait, "no first leader")
	waiter := getLock(t, mytest.DSNFor(t, mytest.Database(t)), nil, name, 20*time.Millisecond, 5*time.Second, nil, leads)
	waiterRun := await.Returned(func() error { return waiter.Run(context.Background()) })

	px.Blackhole()
	await.For(t, first.Done(), wait, "the cut holder still believes it leads after its pings time out")
	// The holder's connection is gone on its side; on the server's, it
	// still holds the lock (the proxy holds the holder's last bytes, and
	// with them its close).
	admin := openDB(t, dsn)
	var holderDB sql.NullString
	if err := admin.QueryRow("SELECT DB FROM information_schema.PROCESSLIST WHERE ID = IS_USED_LOCK(?)", name).Scan(&holderDB); err != nil {
		t.Fatalf("reading the lock's holder: %v", err)
	}
	if holderDB.String != oldDB {
		t.Fatalf("the lock is held by a connection to database %q, want the cut holder's (%s)", holderDB.String, oldDB)
	}
	select {
	case l := <-leads:
		t.Fatalf("a new leader started at %v while the server holds the lock for the cut holder", l.Start)
	default:
	}
	t.Logf("the holder stopped believing at %v; the server still holds the lock for its dead connection, no one leads", first.End())

	mytest.MustKill(t, dsn, oldDB) // the server's dead-peer detection, at last
	second := await.For(t, leads, wait, "no take-over after the server ended the cut holder's connection")
	t.Logf("fail-over %v after the holder stopped believing: the server's detection, not the holder's, decides", second.Start.Sub(first.End()))
	px.Heal()
	stop(t, []elector{old, waiter}, []<-chan error{oldRun, waiterRun})
}

// TestGetLockCrash: the holder crashes as the server sees it (the proxy
// resets its connection and refuses new ones): the server frees the lock
// at once and the blocked contender takes it, the fastest fail-over there
// is. A holder that outlived the reset of its connection (a network that
// reset it, a restarted proxy) believes it leads until its next ping.
func TestGetLockCrash(t *testing.T) {
	dsn := mytest.DSN(t)
	name := lockName(t)
	leads := make(chan *mypeers.Leadership, 2)
	px := newProxy(t, dsn)
	old := getLock(t, dsn, px, name, time.Minute, 5*time.Second, nil, leads) // pings every 30 s to 1 min
	oldRun := await.Returned(func() error { return old.Run(context.Background()) })
	first := await.For(t, leads, wait, "no first leader")
	waiter := getLock(t, dsn, nil, name, 20*time.Millisecond, 5*time.Second, nil, leads)
	waiterRun := await.Returned(func() error { return waiter.Run(context.Background()) })

	px.Refuse()
	second := await.For(t, leads, wait, "no take-over after the holder's connection was reset")
	stillBelieves(t, first, "a holder that outlived the reset of its connection")
	t.Logf("the new leader started at %v while the old one believed it led", second.Start)
	px.Accept()
	stop(t, []elector{old, waiter}, []<-chan error{oldRun, waiterRun})
}

// lockTableOn returns a LockTable elector on db for the table (qualified
// by the shared database), reporting to leads.
func lockTableOn(t *testing.T, db *sql.DB, table, id string, ttl, timeout, backoff time.Duration, leads chan<- *mypeers.Leadership) *mypeers.LockTable {
	t.Helper()
	e, err := mypeers.NewLockTable(mypeers.LockTableConfig{
		DB: db, Table: table, Name: "fault", ID: id,
		Interval: 100 * time.Millisecond, Retry: 20 * time.Millisecond, Jitter: 10 * time.Millisecond, TTL: ttl,
		Timeout: timeout, Backoff: backoff, MaxErrors: 5,
		OnLead: func(l *mypeers.Leadership) { leads <- l },
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// sharedLockTable creates a lock table in a database of the test's own and
// returns a pool on that database and the table's qualified name.
func sharedLockTable(t *testing.T) (*sql.DB, string) {
	t.Helper()
	shared := mytest.Database(t)
	db, table := lockTable(t, mytest.DSNFor(t, shared))
	return db, shared + "." + table
}

// TestLockTableCut: the holder's link is cut; its row expires by the
// database's clock and a contender takes over, while the old holder, its
// extension hanging until the statement timeout (ShedLock's has no local
// deadline), still believes it leads.
func TestLockTableCut(t *testing.T) {
	dsn := mytest.DSN(t)
	direct, table := sharedLockTable(t)
	px := newProxy(t, dsn)
	cfg := connConfig(t, dsn)
	cfg.Addr = px.Addr()
	cut := openDB(t, cfg.FormatDSN())

	leads := make(chan *mypeers.Leadership, 2)
	old := lockTableOn(t, cut, table, "old", 500*time.Millisecond, time.Minute, 10*time.Millisecond, leads)
	oldRun := await.Returned(func() error { return old.Run(context.Background()) })
	first := await.For(t, leads, wait, "no first leader")
	waiter := lockTableOn(t, direct, table, "waiter", 500*time.Millisecond, 5*time.Second, 10*time.Millisecond, leads)
	waiterRun := await.Returned(func() error { return waiter.Run(context.Background()) })

	px.Blackhole()
	second := await.For(t, leads, wait, "no take-over after the holder's row expired")
	stillBelieves(t, first, "its extension hanging")
	var holder string
	if err := direct.QueryRow("SELECT locked_by FROM " + table + " WHERE name = 'fault'").Scan(&holder); err != nil || holder != "waiter" {
		t.Fatalf("the row's holder is %q (%v), want waiter", holder, err)
	}
	t.Logf("the new leader started at %v while the old one believed it led", second.Start)

	// Healing lets the hanging extension through: it finds the lock taken.
	px.Heal()
	await.For(t, first.Done(), wait, "the old holder still believes after its extension found the lock taken")
	if end, ttlEnd := first.End(), first.TTLEnd(); ttlEnd.After(end) {
		t.Errorf("old spell: End %v, TTLEnd %v: want TTLEnd at most End", end, ttlEnd)
	}
	stop(t, []elector{old, waiter}, []<-chan error{oldRun, waiterRun})
}

// TestLockTableKilled: the server ends the holder's connections (KILL
// CONNECTION); the pool connects again, the next extension succeeds and
// the holder keeps the lock: the lock is a row, not a connection, and
// nothing moves.
func TestLockTableKilled(t *testing.T) {
	dsn := mytest.DSN(t)
	direct, table := sharedLockTable(t)
	oldDB := mytest.Database(t)
	own := openDB(t, mytest.DSNFor(t, oldDB)) // the holder's connections, told apart by their database

	const ttl = 2 * time.Second
	leads := make(chan *mypeers.Leadership, 2)
	old := lockTableOn(t, own, table, "old", ttl, 5*time.Second, 10*time.Millisecond, leads)
	oldRun := await.Returned(func() error { return old.Run(context.Background()) })
	first := await.For(t, leads, wait, "no first leader")
	waiter := lockTableOn(t, direct, table, "waiter", ttl, 5*time.Second, 10*time.Millisecond, leads)
	waiterRun := await.Returned(func() error { return waiter.Run(context.Background()) })

	mytest.MustKill(t, dsn, oldDB)
	var killed time.Time
	if err := direct.QueryRow("SELECT NOW(3)").Scan(&killed); err != nil {
		t.Fatal(err)
	}
	// An extension that started after the kill pushes lock_until past
	// killed + TTL; only the old holder's extension of its unexpired lock
	// writes a lock_until with locked_by = old, so the lock never lapsed.
	var by string
	var until time.Time
	await.Until(t, wait, "an extension by the old holder after the kill", func() bool {
		err := direct.QueryRow("SELECT locked_by, lock_until FROM "+table+" WHERE name = 'fault'").Scan(&by, &until)
		return err == nil && by == "old" && until.After(killed.Add(ttl))
	}, func() string { return by + " until " + until.String() })
	stillBelieves(t, first, "it keeps the lock")
	select {
	case l := <-leads:
		t.Fatalf("a new leader started at %v while the old holder kept its lock", l.Start)
	default:
	}
	stop(t, []elector{old, waiter}, []<-chan error{oldRun, waiterRun})
}

// TestLockTableCrash: the holder crashes as the server sees it (its
// connections reset, new ones refused): its extensions fail, the row
// expires by the database's clock and a contender takes over. A holder
// that outlived it, backing off between failed extensions as it does
// before its MaxErrors-th, still believes it leads; a local TTL since its
// last successful extension would have ended that belief.
func TestLockTableCrash(t *testing.T) {
	dsn := mytest.DSN(t)
	direct, table := sharedLockTable(t)
	px := newProxy(t, dsn)
	cfg := connConfig(t, dsn)
	cfg.Addr = px.Addr()
	crashed := openDB(t, cfg.FormatDSN())

	leads := make(chan *mypeers.Leadership, 2)
	old := lockTableOn(t, crashed, table, "old", 500*time.Millisecond, 5*time.Second, time.Minute, leads) // 30 s to 1 min after a failed extension
	oldRun := await.Returned(func() error { return old.Run(context.Background()) })
	first := await.For(t, leads, wait, "no first leader")
	waiter := lockTableOn(t, direct, table, "waiter", 500*time.Millisecond, 5*time.Second, 10*time.Millisecond, leads)
	waiterRun := await.Returned(func() error { return waiter.Run(context.Background()) })

	px.Refuse()
	second := await.For(t, leads, wait, "no take-over after the holder crashed")
	stillBelieves(t, first, "backing off after a failed extension")
	t.Logf("the new leader started at %v while the old one believed it led", second.Start)
	px.Accept()
	stop(t, []elector{old, waiter}, []<-chan error{oldRun, waiterRun})
	end, ttlEnd := first.End(), first.TTLEnd()
	if ttlEnd.After(end) {
		t.Errorf("old spell: End %v, TTLEnd %v: want TTLEnd at most End", end, ttlEnd)
	}
	t.Logf("a local TTL would have ended the old belief %v before the new leader started", second.Start.Sub(ttlEnd))
}
