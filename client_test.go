package simba_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

func TestNewRefusesBadInput(t *testing.T) {
	b := memory.New()
	defer b.Close()
	cases := map[string]struct {
		b    *memory.Backend
		opts []simba.Option
	}{
		"nil backend":     {nil, nil},
		"nil option":      {b, []simba.Option{nil}},
		"zero TTL":        {b, []simba.Option{simba.WithTTL(0)}},
		"negative TTL":    {b, []simba.Option{simba.WithTTL(-time.Second)}},
		"negative margin": {b, []simba.Option{simba.WithDriftMargin(-1)}},
		"nil logger":      {b, []simba.Option{simba.WithLogger(nil)}},
		"nil handler":     {b, []simba.Option{simba.WithEventHandler(nil)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var c *simba.Client
			var err error
			if tc.b == nil {
				c, err = simba.New(nil, tc.opts...)
			} else {
				c, err = simba.New(tc.b, tc.opts...)
			}
			assert.Nil(t, c)
			assert.ErrorIs(t, err, simba.ErrInvalidArgument)
			assert.True(t, strings.HasPrefix(err.Error(), "simba: "), err.Error())
		})
	}
}

func TestStartRefusesBadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		c, err := simba.New(b)
		require.NoError(t, err)
		defer c.Close()
		ok := func(context.Context, *simba.Term) error { return nil }

		for _, name := range []string{"", ".x", "-x", "_x", "a b", "a/b", "ä", strings.Repeat("x", 129), "a\x00"} {
			_, err := c.Election(name).RunWhileLeader(ok)
			assert.ErrorIs(t, err, backend.ErrInvalidName, "%q", name)
			_, err = c.Election(name).Schedule(simba.FixedDelay(time.Second), ok)
			assert.ErrorIs(t, err, backend.ErrInvalidName, "%q", name)
		}
		for _, name := range []string{"a", "0", "billing.15", "A_b-c.9", strings.Repeat("x", 128)} {
			task, err := c.Election(name).RunWhileLeader(ok)
			require.NoError(t, err, "%q", name)
			require.NoError(t, task.Close())
		}

		_, err = c.Election("e").RunWhileLeader(nil)
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
		_, err = c.Election("e").Schedule(simba.FixedDelay(time.Second), nil)
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
		_, err = c.Election("e").RunWhileLeader(ok, nil)
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
		_, err = c.Election("e").RunWhileLeader(ok, simba.WithExecutor(nil))
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)

		bad := map[string]simba.Schedule{
			"zero value":             {},
			"zero delay":             simba.FixedDelay(0),
			"negative delay":         simba.FixedDelay(-time.Second),
			"zero rate":              simba.FixedRate(0),
			"negative rate":          simba.FixedRate(-1),
			"negative initial delay": simba.FixedRate(time.Second).WithInitialDelay(-1),
			"unknown misfire":        simba.FixedRate(time.Second).WithMisfire(7),
			"empty cron":             simba.Cron(""),
			"malformed cron":         simba.Cron("* * *"),
			"out-of-range cron":      simba.Cron("61 * * * *"),
			"unknown zone":           simba.Cron("CRON_TZ=Mars/Olympus 0 * * * *"),
			"bad descriptor":         simba.Cron("@fortnightly"),
			"bad every":              simba.Cron("@every -5m"),
			"sub-second every":       simba.Cron("@every 1500ms"),
			"never fires":            simba.Cron("0 0 31 2 *"),
		}
		for name, s := range bad {
			_, err := c.Election("e").Schedule(s, ok)
			if assert.ErrorIs(t, err, simba.ErrInvalidSchedule, name) {
				assert.True(t, strings.HasPrefix(err.Error(), "simba: "), err.Error())
			}
		}
	})
}

func TestScheduleString(t *testing.T) {
	assert.Equal(t, "fixed rate 1m0s, initial delay 10s, misfire run-once",
		simba.FixedRate(time.Minute).WithInitialDelay(10*time.Second).WithMisfire(simba.MisfireRunOnce).String())
	assert.Equal(t, `cron "0 * * * *"`, simba.Cron("0 * * * *").String())
	assert.Equal(t, "fixed delay 5s", simba.FixedDelay(5*time.Second).String())
	assert.Equal(t, "invalid schedule", simba.Schedule{}.String())
}

func TestEventHandlerPanicIsContained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		var n int
		c, err := simba.New(b, simba.WithEventHandler(func(simba.Event) { n++; panic("handler bug") }))
		require.NoError(t, err)
		task, err := c.Election("e").RunWhileLeader(func(ctx context.Context, _ *simba.Term) error { <-ctx.Done(); return nil })
		require.NoError(t, err)
		synctest.Wait()
		require.NoError(t, task.Close())
		require.NoError(t, c.Close())
		assert.GreaterOrEqual(t, n, 4, "every event delivered despite panics")
	})
}

func TestStringers(t *testing.T) {
	for r := simba.RevokeStopped; r <= simba.RevokeDrained; r++ {
		assert.NotContains(t, r.String(), "RevokeReason(")
	}
	assert.Equal(t, "RevokeReason(99)", simba.RevokeReason(99).String())
	assert.Equal(t, "failed", simba.ResultFailed.String())
	assert.Equal(t, "Result(0)", simba.Result(0).String())
	assert.Equal(t, "skip", simba.MisfireSkip.String())
}

func TestReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		n := b.Node("a")
		n.Partition() // the backend cannot be reached yet
		c, err := simba.New(n)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		assert.ErrorIs(t, c.Ready(ctx), context.DeadlineExceeded)
		n.Heal()
		require.NoError(t, c.Ready(t.Context()))
		assert.NotEmpty(t, c.SessionID())
		go c.Close()
		synctest.Wait()
		assert.ErrorIs(t, c.Ready(t.Context()), simba.ErrClosed)
	})
}
