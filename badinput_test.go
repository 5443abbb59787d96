package simba_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
)

// Bad input found by review: each is refused with a clear error, or
// bounded, instead of panicking, spinning or growing without bound.

func TestHandOffLimitRefusesBadRates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		fn := func(ctx context.Context, _ *simba.Term, _ int) error { <-ctx.Done(); return nil }
		for _, tc := range []struct {
			rate  float64
			burst int
		}{
			{math.NaN(), 1},
			{math.Inf(1), 1},
			{math.Inf(-1), 1},
			{0, 1},
			{-1, 1},
			{1e-12, 1},                        // a token every 31,700 years
			{simba.MinHandOffRate / 2, 1},     // just under the minimum
			{math.SmallestNonzeroFloat64, 10}, // a denormal
			{1, 0},
			{1, -1},
		} {
			task, err := c.Group("g", 4, simba.WithHandOffLimit(tc.rate, tc.burst)).RunWhileLeader(fn)
			if !assert.ErrorIs(t, err, simba.ErrInvalidArgument, "rate %v, burst %d", tc.rate, tc.burst) {
				task.Close()
				continue
			}
			assert.True(t, strings.HasPrefix(err.Error(), "simba: "), err.Error())
		}
		for _, rate := range []float64{simba.MinHandOffRate, 1, 1e300} {
			task, err := c.Group("g", 4, simba.WithHandOffLimit(rate, 1<<40)).RunWhileLeader(fn)
			require.NoError(t, err, "rate %v", rate)
			require.NoError(t, task.Close())
		}
		closeAll(t, c)
	})
}

func TestGroupRefusesTooManyPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		fn := func(ctx context.Context, _ *simba.Term, _ int) error { <-ctx.Done(); return nil }
		assert.GreaterOrEqual(t, simba.MaxPartitions, 10000, "the scale runs use 10,000 partitions")
		// Accepted, these crash the process: the assignment of the
		// partitions runs out of memory on a goroutine of the client's.
		for _, n := range []int{1 << 40, math.MaxInt, simba.MaxPartitions + 1} {
			task, err := c.Group("g", n).RunWhileLeader(fn)
			if !assert.ErrorIs(t, err, simba.ErrInvalidArgument, "%d partitions", n) {
				task.Close()
				continue
			}
			assert.True(t, strings.HasPrefix(err.Error(), "simba: "), err.Error())
			assert.Contains(t, err.Error(), "from 1 to 65536")
			_, err = c.Group("g", n).Schedule(simba.FixedDelay(time.Second), fn)
			assert.ErrorIs(t, err, simba.ErrInvalidArgument, "%d partitions", n)
		}
		closeAll(t, c)
	})
}
