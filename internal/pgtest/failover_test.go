package pgtest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/internal/pgtest"
)

// connect opens a connection to dsn, closed when the test ends.
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting to %s: %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// exec runs sql on conn within 20 seconds, failing the test on an error.
func exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// rows returns the values of table t's column v on the server of dsn, in
// order.
func rows(t *testing.T, dsn string) []int {
	t.Helper()
	conn := connect(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := conn.Query(ctx, "SELECT v FROM t ORDER BY v")
	if err != nil {
		t.Fatalf("reading t on %s: %v", dsn, err)
	}
	vs, err := pgx.CollectRows(r, pgx.RowTo[int])
	if err != nil {
		t.Fatalf("reading t on %s: %v", dsn, err)
	}
	return vs
}

// serverPort returns the port of the server a connection to dsn reaches,
// and whether it is in recovery (a standby).
func serverPort(t *testing.T, dsn string) (port int, standby bool) {
	t.Helper()
	conn := connect(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := conn.QueryRow(ctx, "SELECT inet_server_port(), pg_is_in_recovery()").Scan(&port, &standby); err != nil {
		t.Fatalf("asking %s which server it is: %v", dsn, err)
	}
	return port, standby
}

func portOf(t *testing.T, s *pgtest.Server) int {
	t.Helper()
	port, _ := serverPort(t, s.DSN())
	return port
}

// An asynchronous standby whose replication is cut misses the primary's
// last commits: promoted after the primary crashed, it has what it
// replayed before the cut (the control: a commit replicated before the cut
// is kept) and not the commit acknowledged after it, on a higher timeline,
// with the same system identifier. The VIP then reaches the new primary,
// and the old one, started again, is still on the old timeline, with the
// lost commit.
func TestAsyncFailoverLosesCommits(t *testing.T) {
	p := pgtest.StartPair(t, pgtest.Async)
	if port, standby := serverPort(t, p.DSN()); port != portOf(t, p.Primary) || standby {
		t.Fatalf("the VIP reaches port %d (standby %v), want the primary", port, standby)
	}
	client := connect(t, p.DSN())
	exec(t, client, "CREATE TABLE t (v int)")
	exec(t, client, "INSERT INTO t VALUES (1)")
	p.Standby.WaitReplayed()
	if got := rows(t, p.Standby.DSN()); !slices.Equal(got, []int{1}) {
		t.Fatalf("the standby before the cut has %v, want [1]", got)
	}
	oldTimeline, oldID := p.Primary.Timeline(), p.Primary.SystemID()
	if tl, id := p.Standby.Timeline(), p.Standby.SystemID(); tl != oldTimeline || id != oldID {
		t.Fatalf("the standby is on timeline %d of system %d, the primary on %d of %d", tl, id, oldTimeline, oldID)
	}

	p.Standby.Link().Blackhole()
	exec(t, client, "INSERT INTO t VALUES (2)") // acknowledged, never replicated
	if got := rows(t, p.Primary.DSN()); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("the primary has %v, want [1 2]", got)
	}
	p.Primary.Kill()
	p.Failover()

	if got := rows(t, p.DSN()); !slices.Equal(got, []int{1}) {
		t.Errorf("the promoted standby has %v, want [1]: the commit after the cut lost", got)
	}
	newTimeline := p.Standby.Timeline()
	if newTimeline <= oldTimeline {
		t.Errorf("the promoted standby is on timeline %d, the old primary was on %d", newTimeline, oldTimeline)
	}
	if id := p.Standby.SystemID(); id != oldID {
		t.Errorf("the promoted standby's system identifier is %d, the old primary's %d", id, oldID)
	}
	if port, standby := serverPort(t, p.DSN()); port != portOf(t, p.Standby.Server) || standby {
		t.Errorf("after the fail-over the VIP reaches port %d (standby %v), want the promoted standby", port, standby)
	}
	exec(t, connect(t, p.DSN()), "INSERT INTO t VALUES (3)")
	if _, err := client.Exec(context.Background(), "SELECT 1"); err == nil {
		t.Error("a connection through the VIP to the old primary outlived the fail-over")
	}

	p.Primary.Start() // the old primary comes back, on its own
	if tl := p.Primary.Timeline(); tl != oldTimeline {
		t.Errorf("the old primary came back on timeline %d, want %d", tl, oldTimeline)
	}
	if got := rows(t, p.Primary.DSN()); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("the old primary came back with %v, want [1 2]", got)
	}
	if got := rows(t, p.DSN()); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("the VIP reaches a server with %v, want the new primary's [1 3]", got)
	}
}

// A synchronous standby has every commit the primary acknowledged, with
// no wait: the primary is killed at once after the commit returns. A
// commit made while replication is cut is not acknowledged (it waits
// until the client gives up), and is not on the promoted standby.
func TestSyncFailoverKeepsAcknowledgedCommits(t *testing.T) {
	p := pgtest.StartPair(t, pgtest.Sync, pgtest.WithPasswordUser("alice", "secret")) // pg_hba.conf lets the standby replicate still
	client := connect(t, p.DSN())
	exec(t, client, "CREATE TABLE t (v int)")
	exec(t, client, "INSERT INTO t VALUES (1)")
	p.Standby.Link().Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := client.Exec(ctx, "INSERT INTO t VALUES (2)")
	cancel()
	if err == nil {
		t.Fatal("a commit was acknowledged while replication to the synchronous standby was cut")
	}
	p.Primary.Kill()
	p.Failover()
	if got := rows(t, p.DSN()); !slices.Equal(got, []int{1}) {
		t.Errorf("the promoted synchronous standby has %v, want [1]", got)
	}
	if port, standby := serverPort(t, p.DSN()); port != portOf(t, p.Standby.Server) || standby {
		t.Errorf("after the fail-over the VIP reaches port %d (standby %v), want the promoted standby", port, standby)
	}
}

// A cut replication link holds the primary's commits from the standby
// until it heals; then the standby catches up.
func TestStandbyCatchesUpAfterCut(t *testing.T) {
	p := pgtest.StartPair(t, pgtest.Async)
	client := connect(t, p.DSN())
	exec(t, client, "CREATE TABLE t (v int)")
	p.Standby.WaitReplayed()
	p.Standby.Link().Blackhole()
	exec(t, client, "INSERT INTO t VALUES (1)")
	if got := rows(t, p.Standby.DSN()); len(got) != 0 {
		t.Fatalf("the standby has %v through a cut link", got)
	}
	p.Standby.Link().Heal()
	p.Standby.WaitReplayed()
	if got := rows(t, p.Standby.DSN()); !slices.Equal(got, []int{1}) {
		t.Errorf("the standby after the cut healed has %v, want [1]", got)
	}
}
