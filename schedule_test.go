package simba_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	_ "time/tzdata" // CRON_TZ tests do not depend on the machine's zone files

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
)

// scheduled runs s on a single client for d of virtual time and returns the
// start offsets of the runs from the start of the term, and the history.
// work, if set, is called in each run with its index.
func scheduled(t *testing.T, s simba.Schedule, d time.Duration, work func(i int)) ([]time.Duration, *history) {
	t.Helper()
	out := scheduleFor(t, s, d, func(_ context.Context, i int) error {
		if work != nil {
			work(i)
		}
		return nil
	})
	return out.starts(), out.h
}

// seenRun is what a scheduled run of a test saw.
type seenRun struct {
	info       simba.RunInfo
	start, end time.Duration // from the start of its term
	cause      error         // the cause of its ctx's end when it returned, or nil
	err        error         // what it returned
}

// scheduledOut is what scheduleFor saw.
type scheduledOut struct {
	runs    []seenRun // in start order
	h       *history
	records []backend.Record // the backend's records once the client closed
}

// starts returns the start offsets of the runs.
func (o scheduledOut) starts() []time.Duration {
	out := make([]time.Duration, len(o.runs))
	for i, r := range o.runs {
		out[i] = r.start
	}
	return out
}

// scheduleFor runs s on a single client, with the task options opts, for
// d of virtual time, as election "report", and returns what its runs saw.
// fn is each run's work, called with the run's index.
func scheduleFor(t *testing.T, s simba.Schedule, d time.Duration, fn func(ctx context.Context, i int) error, opts ...simba.TaskOption) scheduledOut {
	t.Helper()
	b := memory.New()
	defer b.Close()
	h := newHistory()
	c, _ := node(t, b, "a", h, simba.WithMemberID("a"))
	var mu sync.Mutex
	var runs []seenRun
	_, err := c.Election("report").Schedule(s, func(ctx context.Context, term *simba.Term) error {
		h.SawTerm("a", term)
		info, _ := simba.RunInfoFrom(ctx)
		mu.Lock()
		i := len(runs)
		runs = append(runs, seenRun{info: info, start: time.Since(term.Start())})
		mu.Unlock()
		err := fn(ctx, i)
		mu.Lock()
		runs[i].end, runs[i].err = time.Since(term.Start()), err
		if ctx.Err() != nil {
			runs[i].cause = context.Cause(ctx)
		}
		mu.Unlock()
		return err
	}, opts...)
	require.NoError(t, err)
	time.Sleep(d)
	closeAll(t, c)
	h.CheckTerms(t, b)
	mu.Lock()
	defer mu.Unlock()
	return scheduledOut{runs: runs, h: h, records: b.Records()}
}

func secs(v ...float64) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x * float64(time.Second))
	}
	return out
}

func TestFixedDelayCountsFromTheEndOfARun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		starts, _ := scheduled(t, simba.FixedDelay(5*time.Second), 30*time.Second, func(int) { time.Sleep(2 * time.Second) })
		assert.Equal(t, secs(0, 7, 14, 21, 28), starts)
	})
}

func TestFixedRateSkipsMissedStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		starts, h := scheduled(t, simba.FixedRate(10*time.Second), 65*time.Second, func(i int) {
			if i == 0 {
				time.Sleep(25 * time.Second) // overruns the starts at 10s and 20s
			}
		})
		assert.Equal(t, secs(0, 30, 40, 50, 60), starts)
		mis := eventsOf[simba.Misfired](h)
		require.Len(t, mis, 1)
		assert.Equal(t, 2, mis[0].Missed)
		assert.False(t, mis[0].CatchUp)
	})
}

func TestFixedRateMisfireRunOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := simba.FixedRate(10 * time.Second).WithMisfire(simba.MisfireRunOnce)
		starts, h := scheduled(t, s, 45*time.Second, func(i int) {
			if i == 0 {
				time.Sleep(25 * time.Second)
			}
		})
		assert.Equal(t, secs(0, 25, 30, 40), starts, "one catch-up run at the end of the overrun, then the plan")
		mis := eventsOf[simba.Misfired](h)
		require.Len(t, mis, 1)
		assert.True(t, mis[0].CatchUp)
	})
}

func TestFixedRateRunOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		starts, h := scheduled(t, simba.FixedRate(10*time.Second), 35*time.Second, func(int) { time.Sleep(9 * time.Second) })
		assert.Equal(t, secs(0, 10, 20, 30), starts)
		assert.Empty(t, eventsOf[simba.Misfired](h))
	})
}

func TestCronSchedule(t *testing.T) {
	// The bubble's clock starts at 2000-01-01 00:00:00 UTC.
	synctest.Test(t, func(t *testing.T) {
		starts, _ := scheduled(t, simba.Cron("*/10 * * * * *"), 35*time.Second, nil)
		assert.Equal(t, secs(0, 10, 20, 30), starts)
	})
	synctest.Test(t, func(t *testing.T) {
		// 08:30 in Shanghai is 00:30 UTC.
		starts, _ := scheduled(t, simba.Cron("CRON_TZ=Asia/Shanghai 30 8 * * *"), 31*time.Minute, nil)
		assert.Equal(t, []time.Duration{30 * time.Minute}, starts)
	})
}

func TestInitialDelayRestartsEveryTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		z, _ := node(t, b, "z", h)
		var mu sync.Mutex
		first := map[uint64]time.Duration{}
		fn := func(name string) func(context.Context, *simba.Term) error {
			return func(ctx context.Context, term *simba.Term) error {
				h.SawTerm(name, term)
				mu.Lock()
				defer mu.Unlock()
				if _, ok := first[term.Token()]; !ok {
					first[term.Token()] = time.Since(term.Start())
				}
				return nil
			}
		}
		s := simba.FixedDelay(10 * time.Second).WithInitialDelay(5 * time.Second)
		ta, err := a.Election("report").Schedule(s, fn("a"))
		require.NoError(t, err)
		synctest.Wait()
		_, err = z.Election("report").Schedule(s, fn("z"))
		require.NoError(t, err)
		time.Sleep(12 * time.Second)
		ta.Stop()
		await.For(t, ta.Done(), testTTL, "a's Stop did not complete within the TTL")
		time.Sleep(20 * time.Second)
		closeAll(t, a, z)
		h.CheckTerms(t, b)
		require.Len(t, h.Terms(), 2)
		for _, term := range h.Terms() {
			assert.Equal(t, 5*time.Second, first[term.Token()], "first run of term %d", term.Token())
		}
	})
}

func TestScheduledRunFailureContinuesTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs int
		_, h := scheduled(t, simba.FixedDelay(time.Second), 3500*time.Millisecond, func(i int) {
			runs++
			if i == 1 {
				panic("second run fails")
			}
		})
		assert.Equal(t, 4, runs)
		var results []simba.Result
		for _, w := range eventsOf[simba.WorkCompleted](h) {
			results = append(results, w.Result)
		}
		assert.Equal(t, []simba.Result{simba.ResultSucceeded, simba.ResultFailed, simba.ResultSucceeded, simba.ResultSucceeded}, results)
	})
}

func TestScheduleChecksTheTermBeforeEveryRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, n := node(t, b, "a", h)
		var runs atomic.Int32
		_, err := c.Election("r").Schedule(simba.FixedDelay(500*time.Millisecond), func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			// Ignores ctx: only EnsureValid before the next run stops the loop.
			runs.Add(1)
			time.Sleep(time.Second)
			return nil
		})
		require.NoError(t, err)
		time.Sleep(2 * time.Second)
		n.Partition()
		term := h.Terms()[0]
		require.NoError(t, awaitRevocation(term, "a"))
		before := runs.Load()
		time.Sleep(5 * time.Second) // partitioned: no new term
		assert.Equal(t, before, runs.Load(), "no run starts after the term ended")
		n.Heal()
		closeAll(t, c)
		h.CheckTerms(t, b)
	})
}
