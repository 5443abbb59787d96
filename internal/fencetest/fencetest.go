// Package fencetest holds what the tests of the fence packages share: the
// servers' environment, the race of a deposed and a new leader writing one
// value (Race), and the lost update a claim prevents (LostUpdates).
package fencetest

import (
	"context"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/servers"
)

// Environment of the tests, set by scripts/with-postgres-redis.sh.
const (
	// EnvPG names the variable holding the PostgreSQL server's DSN.
	EnvPG = "SIMBA_PG_DSN"
	// EnvRedis names the variable holding the Redis server's address.
	EnvRedis = "SIMBA_REDIS_ADDR"
)

// OpTimeout bounds operations expected to succeed promptly.
const OpTimeout = 20 * time.Second

// Ctx returns a context that ends with the test or after OpTimeout.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), OpTimeout)
	t.Cleanup(cancel)
	return ctx
}

// Unavailable skips t, or fails it under SIMBA_REQUIRE_SERVERS=1 (see
// servers.Unavailable).
func Unavailable(t testing.TB, server, env string) {
	t.Helper()
	servers.Unavailable(t, server, env)
}

// UniqueName returns a name for the test's own table or keys: letters,
// digits and underscores, at most 50 characters (see servers.UniqueName).
func UniqueName(t testing.TB) string { return servers.UniqueName(t) }
