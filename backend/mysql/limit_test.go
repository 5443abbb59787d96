package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	gomysql "github.com/go-sql-driver/mysql"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/internal/mytest"
)

// smallPool returns a backend in a database of the test's own on a pool
// of maxConns connections, and that pool.
func smallPool(t *testing.T, maxConns int, opts ...mysql.Option) (*mysql.Backend, *sql.DB, string) {
	t.Helper()
	dsn := mytest.DatabaseDSN(t)
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	mysql.NeedMultiStatements(cfg)
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(maxConns)
	t.Cleanup(func() { db.Close() })
	b, err := mysql.NewFromDB(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, db, dsn
}

// blockRegistrations locks the counters' table (LOCK TABLES … WRITE) on a
// connection of its own until the returned function runs (also at the
// test's end): every Acquire's registration then waits on the server,
// holding its pool connection.
func blockRegistrations(t *testing.T, dsn string) (unblock func()) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctxT(t))
	if err == nil {
		_, err = conn.ExecContext(ctxT(t), "LOCK TABLES simba_lease_names WRITE")
	}
	if err != nil {
		db.Close()
		t.Fatalf("locking simba_lease_names: %v", err)
	}
	var once sync.Once
	unblock = func() {
		once.Do(func() {
			_, _ = conn.ExecContext(context.Background(), "UNLOCK TABLES")
			conn.Close()
			db.Close()
		})
	}
	t.Cleanup(unblock)
	return unblock
}

// tableLockWaiters counts the connections to the database of dsn that
// wait for a table lock on the server.
func tableLockWaiters(t *testing.T, dsn string) int {
	t.Helper()
	db, err := sql.Open("mysql", mytest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctxT(t), "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = ? AND STATE LIKE 'Waiting for table%'", dbName(t, dsn)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKeepAliveNotBehindAcquires: with every connection the bound allows
// stuck in an Acquire (its registration waits on a table lock) and more
// Acquires queued behind them, a keep-alive still finds a connection and
// renews. The TTL is far above a statement's latency: the keep-alive's
// ctx is a third of it, as simba's renewals have at least.
func TestKeepAliveNotBehindAcquires(t *testing.T) {
	const ttl, acquires = 30 * time.Second, 20
	b, _, dsn := smallPool(t, 4)
	if got := b.MaxRequests(); got != 2 {
		t.Fatalf("MaxRequests on a pool of 4 = %d, want 2 (one connection left for renewals, one for the bells)", got)
	}
	s := open(t, b, ttl)
	unblock := blockRegistrations(t, dsn)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, acquires)
	for i := range acquires {
		wg.Go(func() {
			l, err := s.Acquire(ctx, fmt.Sprintf("e%d", i))
			if err != nil {
				errs <- err
				return
			}
			_ = l.Release(ctxT(t))
		})
	}
	defer wg.Wait() // after cancel and unblock, which run first
	defer unblock()
	defer cancel()
	var stuck, queued int
	if !eventually(opTimeout, func() bool {
		stuck, queued = tableLockWaiters(t, dsn), mysql.SlotWaiters(b)
		return stuck+queued == acquires
	}) {
		t.Fatalf("after %v, %d Acquires wait for the lock on the server and %d for a statement slot, want %d in all", opTimeout, stuck, queued, acquires)
	}
	if stuck > b.MaxRequests() {
		t.Fatalf("%d statements on the server, more than the bound %d", stuck, b.MaxRequests())
	}
	for i := range 3 {
		kctx, kcancel := context.WithTimeout(ctxT(t), ttl/3)
		got, err := s.KeepAlive(kctx)
		kcancel()
		if err != nil {
			t.Fatalf("keep-alive %d with %d Acquires on the server and %d waiting for a slot: %v (it waited for a pool connection: none left for renewals)", i, stuck, queued, err)
		}
		if got != ttl {
			t.Fatalf("keep-alive %d granted %v, want %v", i, got, ttl)
		}
	}
	unblock()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Acquire once unblocked: %v", err)
	}
}

// TestSleepingWaiterHoldsNoSlot: with a bound of one statement, an Acquire
// that waits its turn at a held lease does not keep the other statements
// out: it holds a slot only while it reads the queue.
func TestSleepingWaiterHoldsNoSlot(t *testing.T) {
	b, _, _ := smallPool(t, 2)
	a, c := open(t, b, 30*time.Second), open(t, b, 30*time.Second)
	l, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		l2, err := c.Acquire(ctxT(t), "x")
		if err == nil {
			err = l2.Release(ctxT(t))
		}
		res <- err
	}()
	waitQueued(t, a, "x", 2)
	r := a.(backend.Records)
	cond := backend.Condition{Lease: "x", Token: l.Token()}
	for i := range 5 {
		if _, err := r.PutRecord(ctxT(t), "k", []byte{byte(i)}, cond); err != nil {
			t.Fatalf("PutRecord %d while another session waits for the lease: %v", i, err)
		}
		if _, err := r.GetRecord(ctxT(t), "k"); err != nil {
			t.Fatalf("GetRecord %d: %v", i, err)
		}
	}
	ly, err := a.Acquire(ctxT(t), "y")
	if err != nil {
		t.Fatalf("Acquire of another name while a waiter sleeps: %v", err)
	}
	if err := ly.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		t.Fatalf("the waiter returned while the lease was held: %v", err)
	default:
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("the waiter, once the lease was released: %v", err)
		}
	case <-time.After(opTimeout):
		t.Fatalf("the waiter did not hold within %v of the release", opTimeout)
	}
}
