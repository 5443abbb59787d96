package mytest_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/internal/mytest"
)

// connect opens a connection to dsn, closed when the test ends.
func connect(t *testing.T, dsn string) *sql.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := open(t, dsn).Conn(ctx)
	if err != nil {
		t.Fatalf("connecting to %s: %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// exec runs sql on conn within 20 seconds, failing the test on an error.
func exec(t *testing.T, conn *sql.Conn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// rows returns the values of table t's column v on the server of dsn, in
// order.
func rows(t *testing.T, dsn string) []int {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := db.QueryContext(ctx, "SELECT v FROM t ORDER BY v")
	if err != nil {
		t.Fatalf("reading t on %s: %v", dsn, err)
	}
	defer r.Close()
	vs := []int{}
	for r.Next() {
		var v int
		if err := r.Scan(&v); err != nil {
			t.Fatalf("reading t on %s: %v", dsn, err)
		}
		vs = append(vs, v)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("reading t on %s: %v", dsn, err)
	}
	return vs
}

// serverPort returns the port of the server a connection to dsn reaches,
// and whether it is read-only (a replica).
func serverPort(t *testing.T, dsn string) (port int, readOnly bool) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := db.QueryRowContext(ctx, "SELECT @@port, @@global.read_only").Scan(&port, &readOnly); err != nil {
		t.Fatalf("asking %s which server it is: %v", dsn, err)
	}
	return port, readOnly
}

func portOf(t *testing.T, s *mytest.Server) int {
	t.Helper()
	_, p, err := net.SplitHostPort(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// startPair is mytest.StartPair, logging how long it took.
func startPair(t *testing.T, mode mytest.Mode) *mytest.Pair {
	t.Helper()
	start := time.Now()
	p := mytest.StartPair(t, mode)
	t.Logf("StartPair(%v) took %v", mode, time.Since(start).Round(time.Millisecond))
	return p
}

// seqOf returns the sequence number of a GTID position of domain 0
// ("0-server_id-seq") and its server_id.
func seqOf(t *testing.T, pos string) (serverID, seq uint64) {
	t.Helper()
	f := strings.Split(pos, "-")
	if len(f) != 3 || f[0] != "0" {
		t.Fatalf("GTID position %q: want one of domain 0", pos)
	}
	serverID, err1 := strconv.ParseUint(f[1], 10, 32)
	seq, err2 := strconv.ParseUint(f[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("GTID position %q: %v", pos, err)
	}
	return serverID, seq
}

// An asynchronous replica whose replication is cut misses the primary's
// last commits: promoted after the primary crashed, it has what it applied
// before the cut (the control: a commit replicated before the cut is kept)
// and not the commit acknowledged after it. Its new commits carry its own
// server_id, at the sequence number the old primary had reached: the two
// diverged. The VIP then reaches the new primary, a connection through it
// to the old one is cut, and the old primary, started again, is where it
// was, with the lost commit.
func TestAsyncFailoverLosesCommits(t *testing.T) {
	p := startPair(t, mytest.Async)
	if port, readOnly := serverPort(t, p.DSN()); port != portOf(t, p.Primary) || readOnly {
		t.Fatalf("the VIP reaches port %d (read-only %v), want the primary", port, readOnly)
	}
	client := connect(t, p.DSN())
	exec(t, client, "CREATE TABLE t (v INT PRIMARY KEY)")
	exec(t, client, "INSERT INTO t VALUES (1)")
	p.Replica.WaitReplayed()
	if got := rows(t, p.Replica.DSN()); !slices.Equal(got, []int{1}) {
		t.Fatalf("the replica before the cut has %v, want [1]", got)
	}
	primaryID, replicaID := p.Primary.ServerID(), p.Replica.ServerID()
	if primaryID == replicaID {
		t.Fatalf("the primary and the replica have the same server_id %d", primaryID)
	}
	if pos, rpos := p.Primary.GTIDPos(), p.Replica.GTIDPos(); pos != rpos {
		t.Fatalf("the replica's GTID position is %s, the primary's %s", rpos, pos)
	}

	p.Replica.Link().Blackhole()
	exec(t, client, "INSERT INTO t VALUES (2)") // acknowledged, never replicated
	if got := rows(t, p.Primary.DSN()); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("the primary has %v, want [1 2]", got)
	}
	lostPos := p.Primary.GTIDPos()
	p.Primary.Kill()
	start := time.Now()
	p.Failover()
	t.Logf("Failover took %v", time.Since(start).Round(time.Millisecond))

	if got := rows(t, p.DSN()); !slices.Equal(got, []int{1}) {
		t.Errorf("the promoted replica has %v, want [1]: the commit after the cut lost", got)
	}
	if port, readOnly := serverPort(t, p.DSN()); port != portOf(t, p.Replica.Server) || readOnly {
		t.Errorf("after the fail-over the VIP reaches port %d (read-only %v), want the promoted replica", port, readOnly)
	}
	exec(t, connect(t, p.DSN()), "INSERT INTO t VALUES (3)")
	if _, err := client.ExecContext(context.Background(), "SELECT 1"); err == nil {
		t.Error("a connection through the VIP to the old primary outlived the fail-over")
	}
	newPos := p.Replica.GTIDPos()
	id, seq := seqOf(t, newPos)
	lostID, lostSeq := seqOf(t, lostPos)
	if id != uint64(replicaID) || lostID != uint64(primaryID) || seq != lostSeq {
		t.Errorf("the new primary is at GTID %s, the old one was at %s: want the new one's server_id %d at the same sequence number", newPos, lostPos, replicaID)
	}
	t.Logf("diverged: the old primary at GTID %s, the new one at %s", lostPos, newPos)

	p.Primary.Start() // the old primary comes back, on its own
	if pos := p.Primary.GTIDPos(); pos != lostPos {
		t.Errorf("the old primary came back at GTID %s, want %s", pos, lostPos)
	}
	if got := rows(t, p.Primary.DSN()); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("the old primary came back with %v, want [1 2]", got)
	}
	if got := rows(t, p.DSN()); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("the VIP reaches a server with %v, want the new primary's [1 3]", got)
	}
}

// A semi-synchronous replica has every commit the primary acknowledged,
// with no wait: the primary is killed at once after the commits return. A
// commit made while replication is cut is not acknowledged (it waits until
// the client gives up) nor seen on the primary (AFTER_SYNC), and is not on
// the promoted replica; the old primary, started again, has it (it was in
// its binary log: crash recovery commits it).
func TestSyncFailoverKeepsAcknowledgedCommits(t *testing.T) {
	p := startPair(t, mytest.Sync)
	client := connect(t, p.DSN())
	exec(t, client, "CREATE TABLE t (v INT PRIMARY KEY)")
	var want []int
	for v := 1; v <= 5; v++ {
		exec(t, client, "INSERT INTO t VALUES (?)", v)
		want = append(want, v)
	}
	p.Replica.Link().Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := client.ExecContext(ctx, "INSERT INTO t VALUES (6)")
	cancel()
	if err == nil {
		t.Fatal("a commit was acknowledged while replication to the semi-synchronous replica was cut")
	}
	t.Logf("the commit during the cut: %v", err)
	if got := rows(t, p.Primary.DSN()); !slices.Equal(got, want) {
		t.Errorf("the primary shows %v during the cut, want %v: the commit waiting for the replica seen", got, want)
	}
	// Still semi-synchronous: MariaDB falls back to asynchronous
	// replication only after rpl_semi_sync_master_timeout (10 s by
	// default).
	var status, waitPoint string
	var timeoutMS int64
	if err := open(t, p.Primary.DSN()).QueryRow("SELECT (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_STATUS'), @@global.rpl_semi_sync_master_wait_point, @@global.rpl_semi_sync_master_timeout").Scan(&status, &waitPoint, &timeoutMS); err != nil {
		t.Fatal(err)
	}
	if status != "ON" || waitPoint != "AFTER_SYNC" || timeoutMS < 24*3600*1000 {
		t.Errorf("the primary's Rpl_semi_sync_master_status %s, wait point %s, timeout %d ms; want ON, AFTER_SYNC, a day or more", status, waitPoint, timeoutMS)
	}
	p.Primary.Kill()
	start := time.Now()
	p.Failover()
	t.Logf("Failover took %v", time.Since(start).Round(time.Millisecond))
	if got := rows(t, p.DSN()); !slices.Equal(got, want) {
		t.Errorf("the promoted semi-synchronous replica has %v, want %v", got, want)
	}
	if port, readOnly := serverPort(t, p.DSN()); port != portOf(t, p.Replica.Server) || readOnly {
		t.Errorf("after the fail-over the VIP reaches port %d (read-only %v), want the promoted replica", port, readOnly)
	}
	exec(t, connect(t, p.DSN()), "INSERT INTO t VALUES (7)") // the promoted replica waits for no one
	p.Primary.Start()
	if got := rows(t, p.Primary.DSN()); !slices.Equal(got, append(want, 6)) {
		t.Errorf("the old primary came back with %v, want %v", got, append(want, 6))
	}
}

// errReadOnly is MariaDB's ER_OPTION_PREVENTS_STATEMENT, which read_only
// gives a write.
const errReadOnly = 1290

// A cut replication link holds the primary's commits from the replica
// until it heals; then the replica catches up. The replica refuses the
// user simba's writes (read_only).
func TestReplicaCatchesUpAfterCut(t *testing.T) {
	p := startPair(t, mytest.Async)
	client := connect(t, p.DSN())
	exec(t, client, "CREATE TABLE t (v INT PRIMARY KEY)")
	p.Replica.WaitReplayed()
	_, err := connect(t, p.Replica.DSN()).ExecContext(context.Background(), "INSERT INTO t VALUES (0)")
	if me := (*mysql.MySQLError)(nil); !errors.As(err, &me) || me.Number != errReadOnly {
		t.Errorf("a write on the replica: %v; want error %d (read_only)", err, errReadOnly)
	}
	p.Replica.Link().Blackhole()
	exec(t, client, "INSERT INTO t VALUES (1)")
	time.Sleep(200 * time.Millisecond) // what would have arrived by now
	if got := rows(t, p.Replica.DSN()); len(got) != 0 {
		t.Fatalf("the replica has %v through a cut link", got)
	}
	p.Replica.Link().Heal()
	p.Replica.WaitReplayed()
	if got := rows(t, p.Replica.DSN()); !slices.Equal(got, []int{1}) {
		t.Errorf("the replica after the cut healed has %v, want [1]", got)
	}
}
