// Package pgtest gives tests a PostgreSQL server: the DSN of the one that
// scripts/with-postgres-redis.sh started (SIMBA_PG_DSN), skipping the test
// when there is none (a failure under SIMBA_REQUIRE_SERVERS=1), and a fresh
// schema name per test, dropped at its end.
package pgtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Environment of the tests, set by scripts/with-postgres-redis.sh.
const (
	// EnvDSN names the variable holding the PostgreSQL server's DSN.
	EnvDSN = "SIMBA_PG_DSN"
	// EnvRequire set to 1 makes a missing server a failure.
	EnvRequire = "SIMBA_REQUIRE_SERVERS"
)

// Unavailable skips t, or fails it under SIMBA_REQUIRE_SERVERS=1, for want
// of server, whose address env would hold.
func Unavailable(t testing.TB, server, env string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("no %s server: %s is not set (%s=1: a missing server is a failure)", server, env, EnvRequire)
	}
	t.Skipf("no %s server: %s is not set; run the tests through scripts/with-postgres-redis.sh (make test does) or set it", server, env)
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

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// UniqueName returns a name for the test's own table, schema or keys:
// lower-case letters, digits and underscores, at most 50 characters.
func UniqueName(t testing.TB) string {
	n := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return fmt.Sprintf("t_%s_%08x", strings.Trim(n, "_"), rand.Uint32())
}

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
