package redisfence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/fence/redisfence"
	"github.com/simba-go/simba/internal/fencetest"
)

// TestClaimPreventsLostUpdate is fencetest.ClaimPreventsLostUpdate on Redis.
func TestClaimPreventsLostUpdate(t *testing.T) {
	fencetest.ClaimPreventsLostUpdate(t, newRedisCounter)
}

func TestClaimStale(t *testing.T) {
	t.Run("redis", func(t *testing.T) { fencetest.ClaimStale(t, newRedisCounter(t).Claim) })
	t.Run("invalid", func(t *testing.T) {
		if err := (redisfence.Fence{}).Claim(fencetest.Ctx(t), "r", 1); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("want ErrInvalidArgument, got %v", err)
		}
	})
}

// redisCounter is a counter in a Redis key.
type redisCounter struct {
	f   redisfence.Fence
	key string
}

func newRedisCounter(t *testing.T) fencetest.CounterStore {
	c, prefix := redisClient(t)
	return &redisCounter{f: redisfence.Fence{Client: c, Prefix: prefix + "fence:"}, key: prefix + "counter"}
}

func (c *redisCounter) Load(ctx context.Context) (int, error) {
	v, err := c.f.Client.(*redis.Client).Get(ctx, c.key).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}

func (c *redisCounter) Begin(ctx context.Context, token uint64, v int) (func() (bool, error), error) {
	return func() (bool, error) { return fencetest.Accepted(c.f.Set(ctx, "counter", token, c.key, v, 0)) }, nil
}

func (c *redisCounter) Claim(ctx context.Context, token uint64) error {
	return c.f.Claim(ctx, "counter", token)
}

// ClaimWaits is false: a claim outruns a write in flight.
func (c *redisCounter) ClaimWaits() bool { return false }
