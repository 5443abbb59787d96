// Package fencetest holds what the tests of the fence packages share: the
// servers' environment, the race of a deposed and a new leader writing one
// value (Race), and the lost update a claim prevents (LostUpdates).
package fencetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Environment of the tests, set by scripts/with-postgres-redis.sh.
const (
	// EnvPG names the variable holding the PostgreSQL server's DSN.
	EnvPG = "SIMBA_PG_DSN"
	// EnvRedis names the variable holding the Redis server's address.
	EnvRedis = "SIMBA_REDIS_ADDR"
	// envRequire set to 1 makes a missing server a failure.
	envRequire = "SIMBA_REQUIRE_SERVERS"
)

// OpTimeout bounds operations expected to succeed promptly.
const OpTimeout = 20 * time.Second

// Ctx returns a context that ends with the test or after OpTimeout.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), OpTimeout)
	t.Cleanup(cancel)
	return ctx
}

// Unavailable skips t, or fails it under SIMBA_REQUIRE_SERVERS=1.
func Unavailable(t testing.TB, server, env string) {
	t.Helper()
	if os.Getenv(envRequire) == "1" {
		t.Fatalf("no %s server: %s is not set (%s=1: a missing server is a failure)", server, env, envRequire)
	}
	t.Skipf("no %s server: %s is not set; run the tests through scripts/with-postgres-redis.sh (make test does) or set it", server, env)
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// UniqueName returns a name for the test's own table or keys: letters,
// digits and underscores, at most 50 characters.
func UniqueName(t testing.TB) string {
	n := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return fmt.Sprintf("t_%s_%08x", strings.Trim(n, "_"), rand.Uint32())
}
