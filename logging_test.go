package simba_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
)

// TestDefaultLogger: a client given no WithLogger logs to slog.Default,
// as it is when New is called: a run that returned an error and a run
// that panicked at Error, the term at Info. Given
// slog.New(slog.DiscardHandler), nothing reaches slog.Default.
func TestDefaultLogger(t *testing.T) {
	var logs logRecorder
	prev := slog.Default()
	slog.SetDefault(logs.logger(slog.LevelInfo))
	t.Cleanup(func() { slog.SetDefault(prev) })

	run := func(opts ...simba.Option) {
		synctest.Test(t, func(t *testing.T) {
			b := memory.New()
			defer b.Close()
			c, err := simba.New(b, append([]simba.Option{simba.WithTTL(testTTL)}, opts...)...)
			require.NoError(t, err)
			defer c.Close()
			runs := 0
			_, err = c.Election("default-logger").Schedule(simba.FixedDelay(100*time.Millisecond), func(ctx context.Context, term *simba.Term) error {
				runs++
				if runs%2 == 1 {
					panic("default-logger-panic")
				}
				return errors.New("default-logger-error")
			})
			require.NoError(t, err)
			time.Sleep(time.Second)
		})
	}

	run()
	assert.GreaterOrEqual(t, logs.count("level=ERROR msg=\"run failed\" election=default-logger"), 4, "runs that failed, at Error:\n%s", logs.text())
	assert.GreaterOrEqual(t, logs.count("default-logger-panic"), 2, "runs that panicked:\n%s", logs.text())
	assert.GreaterOrEqual(t, logs.count("default-logger-error"), 2, "runs that returned an error:\n%s", logs.text())
	assert.Equal(t, 1, logs.count("level=INFO msg=elected election=default-logger"), "the term, at Info:\n%s", logs.text())

	before := logs.count("default-logger")
	run(simba.WithLogger(slog.New(slog.DiscardHandler)))
	assert.Equal(t, before, logs.count("default-logger"), "records logged with a discarding logger:\n%s", logs.text())
}

// TestUnreachableBackendLogged: a client whose backend cannot be reached
// is quiet for its first TTL (a restart, a blip), then warns, each time
// the outage has grown by its length so far (never more often than once a
// TTL, however often it tries), and says at Info when it reaches the
// backend again.
func TestUnreachableBackendLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		n := srv.Node("a")
		n.Partition()
		var logs logRecorder
		start := time.Now()
		c, err := simba.New(n, simba.WithTTL(testTTL), simba.WithLogger(logs.logger(slog.LevelDebug)))
		require.NoError(t, err)
		defer c.Close()

		time.Sleep(testTTL - time.Millisecond)
		synctest.Wait()
		assert.Zero(t, logs.count("level=WARN"), "warnings in the first TTL:\n%s", logs.text())

		time.Sleep(20 * testTTL)
		synctest.Wait()
		warns := logs.times("level=WARN msg=\"backend unreachable")
		require.GreaterOrEqual(t, len(warns), 2, "warnings in %v of outage:\n%s", 20*testTTL, logs.text())
		assert.GreaterOrEqual(t, warns[0].Sub(start), testTTL, "the first warning")
		for i := 1; i < len(warns); i++ {
			assert.GreaterOrEqual(t, warns[i].Sub(warns[i-1]), min(warns[i-1].Sub(start), 5*time.Minute), "warning %d after warning %d", i, i-1)
		}
		assert.Less(t, len(warns), logs.count("opening a session failed"), "warnings, against the failed attempts (each one at Debug or Warn):\n%s", logs.text())
		assert.Zero(t, logs.count("reachable again"))

		n.Heal()
		time.Sleep(2 * testTTL)
		synctest.Wait()
		assert.Equal(t, 1, logs.count("level=INFO msg=\"backend reachable again"), "after the heal:\n%s", logs.text())
	})
}
