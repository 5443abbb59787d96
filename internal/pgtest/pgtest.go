// Package pgtest gives tests a PostgreSQL server: the DSN of the one that
// scripts/with-postgres-redis.sh started (SIMBA_PG_DSN), skipping the test
// when there is none (a failure under SIMBA_REQUIRE_SERVERS=1), and a fresh
// schema name per test, dropped at its end; for the fault tests that
// restart or pause a server, a [Server] of a test's own ([StartServer]),
// which may also check passwords and serve TLS ([WithPasswordUser],
// [WithTLS]), and be killed ([Server.Kill]); a streaming-replication
// standby of such a server, asynchronous or synchronous, whose
// replication link goes through a fault proxy and which a test promotes
// ([StartStandby], [Standby.Promote]); a VIP, the address of "the
// primary" that a fail-over moves ([NewVIP], [VIP.MoveTo]); the three
// together ([StartPair], [Pair.Failover]); and a PgBouncer in transaction
// mode in front of any of them ([StartPooler]).
package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/internal/servers"
)

// Environment of the tests, set by scripts/with-postgres-redis.sh.
const (
	// EnvDSN names the variable holding the PostgreSQL server's DSN.
	EnvDSN = "SIMBA_PG_DSN"
	// EnvRequire set to 1 makes a missing server a failure.
	EnvRequire = servers.EnvRequire
)

// Unavailable skips t, or fails it under SIMBA_REQUIRE_SERVERS=1, for want
// of server, whose address env would hold.
func Unavailable(t testing.TB, server, env string) {
	t.Helper()
	servers.Unavailable(t, server, env)
}

// DSN returns the test server's DSN, or skips t (fails it under
// SIMBA_REQUIRE_SERVERS=1) when SIMBA_PG_DSN is not set.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		Unavailable(t, "PostgreSQL", EnvDSN)
	}
	return dsn
}

// UniqueName returns a name for the test's own table, schema or keys:
// lower-case letters, digits and underscores, at most 50 characters.
func UniqueName(t testing.TB) string { return servers.UniqueName(t) }

// Schema returns a schema name of the test's own (see UniqueName), which
// does not exist yet; at the end of the test the schema, if anything
// created it, is dropped with everything in it.
func Schema(t testing.TB) string {
	t.Helper()
	dsn := DSN(t)
	name := UniqueName(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("pgtest: dropping schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: dropping schema %s: %v", name, err)
		}
	})
	return name
}

// Exec runs sql on a connection of its own to the test server (for a
// test's set-up or its faults, such as pg_terminate_backend), failing t on
// an error.
func Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, DSN(t))
	if err != nil {
		t.Fatalf("pgtest: connecting: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// Querier is what Terminate needs of a connection: *pgx.Conn, *pgxpool.Pool
// and pgx.Tx have it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Terminate ends, with pg_terminate_backend, every connection of
// application app on the server q is connected to (a fault: the server
// culling a client's connections), and returns how many it ended.
func Terminate(ctx context.Context, q Querier, app string) (int, error) {
	var n int
	if err := q.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
		return 0, fmt.Errorf("pg_terminate_backend of %s's connections: %w", app, err)
	}
	return n, nil
}

// MustTerminate ends every connection of application app on the server
// of dsn (see Terminate), through a connection of its own, and fails t if
// it cannot or if there was none to end.
func MustTerminate(t testing.TB, dsn, app string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connecting to terminate %s's connections: %v", app, err)
	}
	defer conn.Close(context.Background())
	n, err := Terminate(ctx, conn, app)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if n == 0 {
		t.Fatalf("pgtest: no connection of %s to terminate", app)
	}
}
