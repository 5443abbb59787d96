package simba_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/records"
)

// The timelines of the OverlapPolicy table: FixedRate(10s), a first run
// that takes 25s, the others 1s.

// overrunFirst is the work of the table's runs: the first takes 25s,
// the others 1s; none looks at its ctx.
func overrunFirst(_ context.Context, i int) error {
	if i == 0 {
		time.Sleep(25 * time.Second)
	} else {
		time.Sleep(time.Second)
	}
	return nil
}

// historyIn returns the history entries of lease in recs, by Seq.
func historyIn(t *testing.T, recs []backend.Record, lease string) []records.Run {
	t.Helper()
	var out []records.Run
	for _, r := range recs {
		if strings.HasPrefix(r.Key, records.HistoryKeys(lease)) {
			var run records.Run
			require.NoError(t, records.Decode(r.Value, &run))
			out = append(out, run)
		}
	}
	slices.SortFunc(out, func(a, b records.Run) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// statusIn returns the status of lease in recs.
func statusIn(t *testing.T, recs []backend.Record, lease string) records.Status {
	t.Helper()
	for _, r := range recs {
		if r.Key == records.StatusKey(lease) {
			var st records.Status
			require.NoError(t, records.Decode(r.Value, &st))
			return st
		}
	}
	t.Fatalf("no status of %q", lease)
	return records.Status{}
}

// skippedIn returns the history entries of skipped starts.
func skippedIn(runs []records.Run) []records.Run {
	var out []records.Run
	for _, r := range runs {
		if r.Result == records.Skipped {
			out = append(out, r)
		}
	}
	return out
}

// skipAt says which starts an occasion skipped, as offsets from an origin.
type skipAt struct {
	Reason      simba.SkipReason
	Count       int
	First, Last time.Duration
}

// skipsOf returns the Skipped events of h as offsets from origin.
func skipsOf(h *history, origin time.Time) []skipAt {
	var out []skipAt
	for _, e := range eventsOf[simba.Skipped](h) {
		out = append(out, skipAt{e.Reason, e.Count, e.First.Sub(origin), e.Last.Sub(origin)})
	}
	return out
}

// checkSkippedHistory checks that the history has one entry per Skipped
// event, with the event's starts and reason, and the status counts them.
func checkSkippedHistory(t *testing.T, recs []backend.Record, lease string, want []skipAt, origin time.Time) {
	t.Helper()
	var got []skipAt
	total := 0
	for _, r := range skippedIn(historyIn(t, recs, lease)) {
		var reason simba.SkipReason
		for sr := simba.SkipOverlap; sr <= simba.SkipPaused; sr++ {
			if sr.String() == r.Error {
				reason = sr
			}
		}
		got = append(got, skipAt{reason, r.Skipped, r.Start.Sub(origin), r.End.Sub(origin)})
		total += r.Skipped
	}
	assert.Equal(t, want, got, "skipped starts in the history")
	assert.Equal(t, uint64(total), statusIn(t, recs, lease).SkippedRuns, "Status.SkippedRuns")
}

func TestOverlapSkip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := simba.FixedRate(10 * time.Second).WithOverlap(simba.OverlapSkip)
		out := scheduleFor(t, s, 45*time.Second, overrunFirst)
		assert.Equal(t, secs(0, 30, 40), out.starts(), "10s and 20s skipped, next run at 30s")
		origin := out.h.Terms()[0].Start()
		want := []skipAt{{simba.SkipOverlap, 2, 10 * time.Second, 20 * time.Second}}
		assert.Equal(t, want, skipsOf(out.h, origin))
		sk := eventsOf[simba.Skipped](out.h)
		require.Len(t, sk, 1)
		assert.Equal(t, origin.Add(25*time.Second), sk[0].At, "reported when the overrun ended")
		mis := eventsOf[simba.Misfired](out.h)
		require.Len(t, mis, 1, "Misfired as before overlap policies")
		assert.Equal(t, 2, mis[0].Missed)
		assert.False(t, mis[0].CatchUp)
		checkSkippedHistory(t, out.records, "report", want, origin)
	})
}

func TestOverlapBufferOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := simba.FixedRate(10 * time.Second).WithOverlap(simba.OverlapBufferOne)
		out := scheduleFor(t, s, 45*time.Second, overrunFirst)
		assert.Equal(t, secs(0, 25, 30, 40), out.starts(), "10s buffered and run at 25s; 20s skipped")
		origin := out.h.Terms()[0].Start()
		buffered := out.runs[1].info
		assert.Equal(t, simba.SourceMisfire, buffered.Source)
		assert.Equal(t, origin.Add(10*time.Second), buffered.Planned, "the buffered run stands for the first start of the overrun")
		want := []skipAt{{simba.SkipOverlap, 1, 20 * time.Second, 20 * time.Second}}
		assert.Equal(t, want, skipsOf(out.h, origin))
		mis := eventsOf[simba.Misfired](out.h)
		require.Len(t, mis, 1)
		assert.Equal(t, 2, mis[0].Missed)
		assert.True(t, mis[0].CatchUp)
		checkSkippedHistory(t, out.records, "report", want, origin)
	})
}

func TestOverlapCancelRunning(t *testing.T) {
	t.Run("RunReturnsWhenCancelled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := simba.FixedRate(10 * time.Second).WithOverlap(simba.OverlapCancelRunning)
			out := scheduleFor(t, s, 45*time.Second, func(ctx context.Context, i int) error {
				if i > 0 {
					return nil
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(25 * time.Second):
					return nil
				}
			})
			assert.Equal(t, secs(0, 10, 20, 30, 40), out.starts(), "the 10s start cancels the first run and starts once it returned")
			assert.Equal(t, 10*time.Second, out.runs[0].end)
			assert.ErrorIs(t, out.runs[0].cause, simba.ErrOverlapCancelled)
			wc := eventsOf[simba.WorkCompleted](out.h)
			require.NotEmpty(t, wc)
			assert.Equal(t, simba.ResultCancelled, wc[0].Result, "a run cancelled by the next start is no failure")
			assert.Empty(t, eventsOf[simba.Skipped](out.h))
			assert.Empty(t, eventsOf[simba.Misfired](out.h))
		})
	})
	t.Run("RunIgnoresTheCancellation", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := simba.FixedRate(10 * time.Second).WithOverlap(simba.OverlapCancelRunning)
			out := scheduleFor(t, s, 45*time.Second, overrunFirst)
			assert.Equal(t, secs(0, 25, 30, 40), out.starts(), "never two runs at once: the 10s start waits for the cancelled run")
			origin := out.h.Terms()[0].Start()
			assert.Equal(t, origin.Add(10*time.Second), out.runs[1].info.Planned)
			assert.Equal(t, simba.SourceNormal, out.runs[1].info.Source)
			assert.ErrorIs(t, out.runs[0].cause, simba.ErrOverlapCancelled)
			want := []skipAt{{simba.SkipOverlap, 1, 20 * time.Second, 20 * time.Second}}
			assert.Equal(t, want, skipsOf(out.h, origin), "a start while one waits is skipped")
			checkSkippedHistory(t, out.records, "report", want, origin)
		})
	})
}

func TestOverlapAllow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var running, most atomic.Int32
		s := simba.FixedRate(10 * time.Second).WithOverlap(simba.OverlapAllow).WithMaxConcurrent(2)
		out := scheduleFor(t, s, 45*time.Second, func(ctx context.Context, i int) error {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			switch i {
			case 0:
				time.Sleep(25 * time.Second)
			case 1:
				time.Sleep(15 * time.Second) // 10s to 25s
			default:
				time.Sleep(time.Second)
			}
			return nil
		})
		assert.Equal(t, secs(0, 10, 30, 40), out.starts(), "a second run at 10s, 20s skipped (2 running), a run at 30s")
		assert.Equal(t, int32(2), most.Load())
		origin := out.h.Terms()[0].Start()
		want := []skipAt{{simba.SkipOverlap, 1, 20 * time.Second, 20 * time.Second}}
		assert.Equal(t, want, skipsOf(out.h, origin))
		checkSkippedHistory(t, out.records, "report", want, origin)
		runs := historyIn(t, out.records, "report")
		for _, r := range runs {
			if r.Result != records.Skipped {
				assert.Equal(t, "succeeded", r.Result, "run %d: the overlapping runs each end their own entry", r.Seq)
			}
		}
	})
}

// TestTriggerWaitsForTheRunsGoingOn: an operator's trigger runs once the
// runs going on have ended, except under OverlapAllow below the limit,
// where it starts at once.
func TestTriggerWaitsForTheRunsGoingOn(t *testing.T) {
	for _, tc := range []struct {
		s    simba.Schedule
		want time.Duration // the trigger's run, from the term's start
	}{
		{simba.FixedRate(time.Hour), 10 * time.Minute},
		{simba.FixedRate(time.Hour).WithOverlap(simba.OverlapCancelRunning), 10 * time.Minute},
		{simba.FixedDelay(time.Hour), 10 * time.Minute},
		{simba.FixedRate(time.Hour).WithOverlap(simba.OverlapAllow), time.Minute},
	} {
		t.Run(tc.s.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				h := newHistory()
				c, _ := node(t, b, "a", h)
				var mu sync.Mutex
				var starts []time.Duration
				var sources []simba.RunSource
				_, err := c.Election("report").Schedule(tc.s, func(ctx context.Context, term *simba.Term) error {
					h.SawTerm("a", term)
					info, _ := simba.RunInfoFrom(ctx)
					mu.Lock()
					starts = append(starts, time.Since(term.Start()))
					sources = append(sources, info.Source)
					first := len(starts) == 1
					mu.Unlock()
					if first {
						time.Sleep(10 * time.Minute)
					}
					return nil
				})
				require.NoError(t, err)
				time.Sleep(time.Minute)
				require.NoError(t, openAdmin(t, b).Trigger(t.Context(), "report", ""))
				time.Sleep(15 * time.Minute)
				closeAll(t, c)
				mu.Lock()
				defer mu.Unlock()
				assert.Equal(t, []time.Duration{0, tc.want}, starts)
				assert.Equal(t, []simba.RunSource{simba.SourceNormal, simba.SourceTrigger}, sources)
			})
		})
	}
}

// TestTriggerArguments: a trigger's arguments reach the run it starts, in
// its RunInfo and in its history entry.
func TestTriggerArguments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		log := &infoLog{}
		c, _ := node(t, b, "a", h)
		_, err := c.Election("report").Schedule(simba.FixedRate(time.Hour), log.task("a", h, nil))
		require.NoError(t, err)
		time.Sleep(time.Minute)
		args := map[string]string{"date": "2025-03-04", "dry-run": "true"}
		at := time.Now()
		putOp(t, b, records.TriggerPrefix+"report", records.Op{By: "alice", At: at, Args: args})
		time.Sleep(time.Minute)
		runs := log.since(at)
		require.Len(t, runs, 1)
		assert.Equal(t, at, runs[0].at)
		assert.Equal(t, simba.RunInfo{Source: simba.SourceTrigger, Attempt: 1, Args: args}, runs[0].info)
		closeAll(t, c)
		hist := historyIn(t, b.Records(), "report")
		last := hist[len(hist)-1]
		assert.Equal(t, "trigger", last.Source)
		assert.Equal(t, args, last.Args)
		assert.Nil(t, hist[0].Args, "a planned run has none")
		_, pending := opIn(t, b.Records(), records.TriggerPrefix+"report")
		assert.False(t, pending, "the trigger is consumed")
	})
}

// attemptLog records the attempts of runs: when each began, and its
// RunInfo.
type attemptLog struct {
	mu    sync.Mutex
	at    []time.Time
	infos []simba.RunInfo
}

// work returns a run's work that records its attempts and fails with err
// for the first n of them (all when n < 0).
func (l *attemptLog) work(n int, err error) func(context.Context, int) error {
	return func(ctx context.Context, _ int) error {
		info, _ := simba.RunInfoFrom(ctx)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.at = append(l.at, time.Now())
		l.infos = append(l.infos, info)
		if n < 0 || len(l.at) <= n {
			return err
		}
		return nil
	}
}

func (l *attemptLog) offsets(origin time.Time) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for _, at := range l.at {
		out = append(out, at.Sub(origin))
	}
	return out
}

// TestRetryBackoffTimeline: with no jitter, retries begin at exact
// instants: 1s, then 2s, then the cap of 3s after each failure; each
// attempt has its history entry and its WorkCompleted, numbered; the run
// counts once, after its last attempt, for the failure handler; the
// retries are counted by simba.run.retries.
func TestRetryBackoffTimeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, mopt := newMeterReader(t)
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h, mopt, simba.WithMemberID("a"))
		var failures []simba.RunFailure
		var fmu sync.Mutex
		log := &attemptLog{}
		boom := errors.New("boom")
		s := simba.FixedRate(time.Minute).WithRetry(simba.RetryPolicy{Attempts: 4, Backoff: time.Second, Multiplier: 2, MaxBackoff: 3 * time.Second})
		work := log.work(-1, boom)
		_, err := c.Election("report").Schedule(s, func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			return work(ctx, 0)
		}, simba.WithFailureHandler(func(_ context.Context, f simba.RunFailure) {
			fmu.Lock()
			failures = append(failures, f)
			fmu.Unlock()
		}))
		require.NoError(t, err)
		time.Sleep(30 * time.Second)
		origin := h.Terms()[0].Start()
		assert.Equal(t, secs(0, 1, 3, 6), log.offsets(origin), "attempts at 0, +1s, +2s, +3s (capped)")
		var attempts []int
		for _, info := range log.infos {
			attempts = append(attempts, info.Attempt)
			assert.Equal(t, origin, info.Planned, "every attempt stands for the same planned start")
			assert.Equal(t, simba.SourceNormal, info.Source)
		}
		assert.Equal(t, []int{1, 2, 3, 4}, attempts)
		var wc []int
		for _, e := range eventsOf[simba.WorkCompleted](h) {
			assert.Equal(t, simba.ResultFailed, e.Result)
			assert.Equal(t, simba.SourceNormal, e.Source)
			wc = append(wc, e.Attempt)
		}
		assert.Equal(t, []int{1, 2, 3, 4}, wc, "one WorkCompleted per attempt")
		assert.Equal(t, 3.0, m.value("simba.run.retries", "simba.election", "report"))
		synctest.Wait()
		fmu.Lock()
		require.Len(t, failures, 1, "the failure handler once per failed run")
		f := failures[0]
		fmu.Unlock()
		assert.Equal(t, 4, f.Attempts)
		assert.Equal(t, 1, f.Failures)
		assert.Equal(t, 6*time.Second, f.Duration, "from the first attempt to the end of the last")
		assert.Equal(t, "a", f.Member)
		assert.ErrorIs(t, f.Err, boom)

		closeAll(t, c)
		var hist []int
		for _, r := range historyIn(t, b.Records(), "report") {
			assert.Equal(t, "failed", r.Result)
			hist = append(hist, r.Attempt)
		}
		assert.Equal(t, []int{1, 2, 3, 4}, hist, "one history entry per attempt")
		assert.Equal(t, 1, statusIn(t, b.Records(), "report").FailStreak, "the run counts once")
	})
}

// TestRetrySucceeds: a run that succeeds on its third attempt is no
// failure: the handler is not called, the streak is 0.
func TestRetrySucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var handled atomic.Int32
		log := &attemptLog{}
		s := simba.FixedRate(time.Minute).WithRetry(simba.RetryPolicy{Attempts: 5, Backoff: 10 * time.Second})
		out := scheduleFor(t, s, 90*time.Second, log.work(2, errors.New("flaky")),
			simba.WithFailureHandler(func(context.Context, simba.RunFailure) { handled.Add(1) }))
		origin := out.h.Terms()[0].Start()
		assert.Equal(t, secs(0, 10, 30, 60), log.offsets(origin), "attempts at 0, +10s, +20s; success; the next run at 60s")
		assert.Zero(t, handled.Load())
		assert.Zero(t, statusIn(t, out.records, "report").FailStreak)
	})
}

// TestRetryJitterBounds: a jittered wait is between (1-Jitter) and 1
// times the unjittered one.
func TestRetryJitterBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &attemptLog{}
		// Every run fails twice (its first attempt and one retry); the
		// next run begins a minute after the previous.
		s := simba.FixedRate(time.Minute).WithRetry(simba.RetryPolicy{Attempts: 2, Backoff: 10 * time.Second, Jitter: 0.5})
		scheduleFor(t, s, 20*time.Minute-time.Second, log.work(-1, errors.New("down")))
		log.mu.Lock()
		defer log.mu.Unlock()
		require.Len(t, log.at, 40)
		waits := map[time.Duration]bool{}
		for i := 0; i < len(log.at); i += 2 {
			w := log.at[i+1].Sub(log.at[i])
			assert.True(t, w >= 5*time.Second && w <= 10*time.Second, "retry %d after %v, want 5s to 10s", i/2, w)
			waits[w] = true
		}
		assert.Greater(t, len(waits), 1, "the waits are drawn at random")
	})
}

// TestNeverRetried: a yield, the end of the term, a stale fence, a newer
// term's record and what RetryIf refuses are not retried.
func TestNeverRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"Yield", fmt.Errorf("not now: %w", simba.ErrYield)},
		{"TermExpired", fmt.Errorf("step: %w", simba.ErrTermExpired)},
		{"StaleFence", &fence.StaleError{Resource: "r", Token: 1, Highest: 2}},
		{"Conflict", fmt.Errorf("checkpoint: %w", backend.ErrConflict)},
		{"RetryIfRefuses", errors.New("permanent")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				log := &attemptLog{}
				s := simba.FixedRate(time.Hour).WithRetry(simba.RetryPolicy{Attempts: 3, Backoff: time.Second,
					RetryIf: func(err error) bool { return err.Error() != "permanent" }})
				scheduleFor(t, s, time.Minute, log.work(-1, tc.err))
				log.mu.Lock()
				defer log.mu.Unlock()
				require.NotEmpty(t, log.infos)
				for _, info := range log.infos {
					// A yield gives the lease up: the next term runs again.
					assert.Equal(t, 1, info.Attempt, "one attempt per run")
				}
			})
		})
	}
}

// TestRetriesEndWithTheTerm: a retry's wait ends with the term: the task
// stops at once, with no attempt after the term.
func TestRetriesEndWithTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		log := &attemptLog{}
		work := log.work(-1, errors.New("down"))
		s := simba.FixedRate(time.Hour).WithRetry(simba.RetryPolicy{Attempts: 10, Backoff: time.Minute})
		task, err := c.Election("report").Schedule(s, func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			return work(ctx, 0)
		})
		require.NoError(t, err)
		time.Sleep(30 * time.Second) // in the first retry's wait
		stopped := time.Now()
		task.Stop()
		await.For(t, task.Done(), time.Second, "the stop waited for the retry's backoff")
		assert.Equal(t, stopped, time.Now(), "the hand-off does not wait for the backoff")
		time.Sleep(time.Hour)
		assert.Len(t, log.offsets(time.Time{}), 1, "no attempt after the term ended")
		closeAll(t, c)
	})
}

// TestRunTimeout: a run's ctx ends at its timeout with cause
// ErrRunTimeout; a run that returns an error then fails with an error
// matching ErrRunTimeout and context.DeadlineExceeded.
func TestRunTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := simba.FixedRate(10 * time.Second).WithTimeout(3 * time.Second)
		out := scheduleFor(t, s, 15*time.Second, func(ctx context.Context, i int) error {
			<-ctx.Done()
			return fmt.Errorf("query: %w", ctx.Err())
		})
		require.Len(t, out.runs, 2)
		assert.Equal(t, 3*time.Second, out.runs[0].end)
		assert.ErrorIs(t, out.runs[0].cause, simba.ErrRunTimeout)
		wc := eventsOf[simba.WorkCompleted](out.h)
		require.NotEmpty(t, wc)
		assert.Equal(t, simba.ResultFailed, wc[0].Result)
		assert.ErrorIs(t, wc[0].Err, simba.ErrRunTimeout)
		assert.ErrorIs(t, wc[0].Err, context.DeadlineExceeded)
		assert.Empty(t, eventsOf[simba.RunOverdue](out.h), "runs that return are not overdue")
	})
}

// TestRunOverdue: a run still going a second after its timeout is
// reported once, and counts as running for the overlap policy.
func TestRunOverdue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := simba.FixedRate(10 * time.Second).WithTimeout(3 * time.Second)
		out := scheduleFor(t, s, 25*time.Second, func(ctx context.Context, i int) error {
			if i == 0 {
				time.Sleep(17 * time.Second) // ignores its ctx
			}
			return nil
		})
		assert.Equal(t, secs(0, 20), out.starts(), "the 10s start skipped: the overdue run still counts as running")
		origin := out.h.Terms()[0].Start()
		od := eventsOf[simba.RunOverdue](out.h)
		require.Len(t, od, 1, "reported once")
		assert.Equal(t, origin, od[0].Start)
		assert.Equal(t, 3*time.Second, od[0].Timeout)
		assert.Equal(t, origin.Add(4*time.Second), od[0].At, "a second after the timeout")
		assert.Equal(t, []skipAt{{simba.SkipOverlap, 1, 10 * time.Second, 10 * time.Second}}, skipsOf(out.h, origin))
	})
}

// TestRunInfoOfLeaderTasks: a leader task's run has RunInfo too: attempt
// 1, source normal, then fail-over after a holder that crashed.
func TestRunInfoOfLeaderTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		var mu sync.Mutex
		infos := map[string]simba.RunInfo{}
		task := func(name string) func(context.Context, *simba.Term) error {
			return func(ctx context.Context, term *simba.Term) error {
				h.SawTerm(name, term)
				info, ok := simba.RunInfoFrom(ctx)
				assert.True(t, ok)
				mu.Lock()
				infos[name] = info
				mu.Unlock()
				<-ctx.Done()
				return nil
			}
		}
		ca, na := node(t, b, "a", h, simba.WithMemberID("a"))
		_, err := ca.Election("ingest").RunWhileLeader(task("a"))
		require.NoError(t, err)
		synctest.Wait()
		cz, _ := node(t, b, "z", h, simba.WithMemberID("z"))
		_, err = cz.Election("ingest").RunWhileLeader(task("z"))
		require.NoError(t, err)
		time.Sleep(time.Second)
		na.Crash()
		closed := await.Returned(ca.Close)
		time.Sleep(2 * testTTL)
		mu.Lock()
		assert.Equal(t, simba.RunInfo{Source: simba.SourceNormal, Attempt: 1}, infos["a"])
		assert.Equal(t, simba.RunInfo{Source: simba.SourceFailOver, Attempt: 1}, infos["z"])
		mu.Unlock()
		var sources []simba.RunSource
		for _, e := range eventsOf[simba.WorkCompleted](h) {
			sources = append(sources, e.Source)
		}
		assert.Equal(t, []simba.RunSource{simba.SourceNormal}, sources, "a's run, ended when its term did")
		_, ok := simba.RunInfoFrom(t.Context())
		assert.False(t, ok, "no RunInfo outside a run")
		closeAll(t, cz)
		await.For(t, closed, testTTL, "Close of crashed a")
	})
}

// TestRetryWaitIsAnOverlap: a planned start during a retry's wait comes
// while the run is going: the run goes on until its last attempt.
func TestRetryWaitIsAnOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &attemptLog{}
		s := simba.FixedRate(10 * time.Second).WithRetry(simba.RetryPolicy{Attempts: 3, Backoff: 8 * time.Second})
		out := scheduleFor(t, s, 35*time.Second, log.work(3, errors.New("down")))
		origin := out.h.Terms()[0].Start()
		assert.Equal(t, secs(0, 8, 24, 30), log.offsets(origin), "attempts at 0, 8s and 24s; the next run at 30s")
		assert.Equal(t, []skipAt{{simba.SkipOverlap, 2, 10 * time.Second, 20 * time.Second}}, skipsOf(out.h, origin))
	})
}
