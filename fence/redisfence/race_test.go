package redisfence_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/simba-go/simba/fence/redisfence"
	"github.com/simba-go/simba/internal/fencetest"
)

// redisRegister is one key of Redis, written by SET or HSET.
type redisRegister struct {
	c        *redis.Client
	f        redisfence.Fence
	resource string
	key      string
	hash     bool
}

func (r *redisRegister) Write(ctx context.Context, token uint64, value string, guarded bool) (int64, error) {
	switch {
	case guarded && r.hash:
		return 0, r.f.HSet(ctx, r.resource, token, r.key, "v", value)
	case guarded:
		return 0, r.f.Set(ctx, r.resource, token, r.key, value, 0)
	case r.hash:
		return 0, r.c.HSet(ctx, r.key, "v", value).Err()
	}
	return 0, r.c.Set(ctx, r.key, value, 0).Err()
}

func (r *redisRegister) Read(ctx context.Context) (string, error) {
	if r.hash {
		return r.c.HGet(ctx, r.key, "v").Result()
	}
	return r.c.Get(ctx, r.key).Result()
}

// TestRedisRace is fencetest.Race on Redis, with fenced SET and
// fenced HSET. Redis does not tell the commit order of two scripts: the
// checks use the writes' times and the final value.
func TestRedisRace(t *testing.T) {
	for _, hash := range []bool{false, true} {
		t.Run(map[bool]string{false: "set", true: "hset"}[hash], func(t *testing.T) {
			c, prefix := redisClient(t)
			f := redisfence.Fence{Client: c, Prefix: prefix + "fence:"}
			n := 0
			fencetest.Race(t, func(t *testing.T) fencetest.Register {
				n++
				return &redisRegister{c: c, f: f, resource: fmt.Sprintf("race-%d", n), key: fmt.Sprintf("%sdata-%d", prefix, n), hash: hash}
			}, 100)
		})
	}
}
