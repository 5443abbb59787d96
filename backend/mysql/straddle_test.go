package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/mytest"
)

// TestRenewalStraddlingExpiryKeepsTheLease: a renewal whose UPDATE passed
// its liveness test before the holder's expiry and commits after it holds
// the session row's lock meanwhile. A waiter that reads the queue then
// sees the old and past expiry; its DELETE of the expired session waits
// for the renewal and leaves the renewed row alone. The waiter must not
// take the lease on the strength of its read: the holder's renewal
// succeeded, so its term goes on.
//
// The straddle is built without timing: a first transaction makes the
// committed row expired while a second, queued behind it on the row's
// lock, renews it and stays open; the waiter is woken by a change of the
// queue made through its Backend, and the renewal commits once the
// waiter's DELETE waits for its lock.
func TestRenewalStraddlingExpiryKeepsTheLease(t *testing.T) {
	dsn := mytest.DatabaseDSN(t)
	bA, bC := newBackendAt(t, dsn), newBackendAt(t, dsn)
	a, c, d := open(t, bA, 30*time.Second), open(t, bC, 30*time.Second), open(t, bC, 30*time.Second)
	la, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn := func() *sql.Conn {
		cn, err := db.Conn(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cn.Close() })
		return cn
	}
	expirer, renewer := conn(), conn()

	waiting, cancelWait := context.WithCancel(ctxT(t))
	defer cancelWait()
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(waiting, "x")
		if err == nil {
			err = errors.New("the waiter got the lease (token " + strconv.FormatUint(l.Token(), 10) + ")")
		}
		got <- err
	}()
	waitQueued(t, c, "x", 2)

	tx1, err := expirer.BeginTx(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	// An expiry the waiter's step guard vouches for: an hour ago, with a
	// TTL of 1 µs.
	if _, err := tx1.ExecContext(ctxT(t), "UPDATE simba_sessions SET expires_us = expires_us - 3600000000, ttl_us = 1 WHERE id = ?", a.ID()); err != nil {
		t.Fatal(err)
	}
	tx2, err := renewer.BeginTx(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	renewed := make(chan error, 1)
	go func() {
		// The renewal, past its liveness test: it waits for tx1's lock.
		_, err := tx2.ExecContext(ctxT(t), "UPDATE simba_sessions SET expires_us = TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) + 30000000, ttl_us = 30000000 WHERE id = ?", a.ID())
		renewed <- err
	}()
	// INNODB_TRX is a cache that InnoDB refreshes only when it has not
	// been read for 100 ms: read it every 200 ms, or it never changes.
	lockWaits := func(like string) int {
		time.Sleep(200 * time.Millisecond)
		n := 0
		_ = db.QueryRowContext(ctxT(t), `SELECT COUNT(*) FROM information_schema.INNODB_TRX x JOIN information_schema.PROCESSLIST p ON p.ID = x.trx_mysql_thread_id
			WHERE p.DB = DATABASE() AND x.trx_state = 'LOCK WAIT' AND x.trx_query LIKE ?`, like).Scan(&n)
		return n
	}
	if !eventually(5*time.Second, func() bool { return lockWaits("UPDATE simba_sessions SET expires_us = TIMESTAMPDIFF%") > 0 }) {
		dumpTrx(t, db)
		t.Fatal("the renewal waiting for the expirer's lock: not within 5s")
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-renewed; err != nil {
		t.Fatalf("renewal: %v", err)
	}
	// Committed: expired. Locked by the open renewal: alive. Wake the
	// waiter (a change of x's queue through its Backend), and let the
	// renewal commit once its DELETE waits.
	short, cancel := context.WithTimeout(ctxT(t), 50*time.Millisecond)
	_, _ = d.Acquire(short, "x")
	cancel()
	if !eventually(5*time.Second, func() bool { return lockWaits("DELETE x FROM%") > 0 }) {
		dumpTrx(t, db)
		t.Fatal("the waiter's DELETE waiting for the renewal's lock: not within 5s")
	}
	if err := tx2.Commit(); err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return lockWaits("DELETE x FROM%") == 0 }) {
		dumpTrx(t, db)
		t.Fatal("the waiter's DELETE to finish: not within 5s")
	}
	select {
	case err := <-got:
		t.Fatalf("while the holder's renewal succeeded: %v", err)
	case <-time.After(time.Second):
	}
	cancelWait()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter's Acquire, its ctx cancelled: %v, want context.Canceled", err)
	}
	select {
	case <-la.Lost():
		t.Fatal("the holder's lease was lost, though its session was renewed")
	default:
	}
	if _, err := a.KeepAlive(ctxT(t)); err != nil {
		t.Fatalf("the holder's next KeepAlive: %v", err)
	}
}

// mustEventually polls cond (see eventually) for up to opTimeout, and
// fails the test, naming what, if it never holds.
func mustEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !eventually(opTimeout, cond) {
		t.Fatalf("%s: not within %v", what, opTimeout)
	}
}

func dumpTrx(t *testing.T, db *sql.DB) {
	rows, err := db.QueryContext(context.Background(), "SELECT p.ID, COALESCE(p.DB, ''), x.trx_state, COALESCE(x.trx_query, ''), x.trx_started FROM information_schema.INNODB_TRX x JOIN information_schema.PROCESSLIST p ON p.ID = x.trx_mysql_thread_id")
	if err != nil {
		t.Log(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, dbn, st, q, at string
		rows.Scan(&id, &dbn, &st, &q, &at)
		t.Logf("trx of %s in %s, %s since %s: %s", id, dbn, st, at, q)
	}
	var dbn string
	db.QueryRowContext(context.Background(), "SELECT DATABASE()").Scan(&dbn)
	t.Logf("this test's database: %s", dbn)
}
