package redisfence_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/simba-go/simba/internal/fencetest"
)

// redisClient connects to the Redis server of SIMBA_REDIS_ADDR (skipping the
// test without one) and returns a prefix for the test's keys, which are
// deleted when it ends.
func redisClient(t testing.TB) (*redis.Client, string) {
	t.Helper()
	addr := os.Getenv(fencetest.EnvRedis)
	if addr == "" {
		fencetest.Unavailable(t, "Redis", fencetest.EnvRedis)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 32})
	prefix := fencetest.UniqueName(t) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), fencetest.OpTimeout)
		defer cancel()
		var keys []string
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("scan %s*: %v", prefix, err)
		}
		if len(keys) > 0 {
			if err := c.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("delete the test's keys: %v", err)
			}
		}
		c.Close()
	})
	if err := c.Ping(fencetest.Ctx(t)).Err(); err != nil {
		t.Fatalf("redis at %s: %v", addr, err)
	}
	return c, prefix
}
