package simba_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
)

// watchdogLimit is the progress watchdog's limit in these tests.
const watchdogLimit = 5 * time.Second

// instants records instants from task functions, for the test to read.
type instants struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (r *instants) add(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[string][]time.Time{}
	}
	r.at[what] = append(r.at[what], time.Now())
}

func (r *instants) get(what string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.at[what]...)
}

// revokedFor returns the Revoked events of the history with reason r.
func revokedFor(h *history, r simba.RevokeReason) []simba.Revoked {
	var out []simba.Revoked
	for _, e := range eventsOf[simba.Revoked](h) {
		if e.Reason == r {
			out = append(out, e)
		}
	}
	return out
}

// TestWatchdogRevokesLimitAfterLastProgress: a function that reports
// progress three times, two seconds apart, and then none, loses its term
// exactly the watchdog's limit after its last progress: its ctx is
// cancelled then, the Revoked event and the term's error say why, a Warn
// log says so, and the lease is released at once (the function returned
// on its cancellation).
func TestWatchdogRevokesLimitAfterLastProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		var logs logRecorder
		c, _ := node(t, b, "a", h, simba.WithLogger(logs.logger(slog.LevelWarn)))
		var at instants
		_, err := c.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			if len(h.Terms()) > 1 {
				return nil // the next term: not this test's
			}
			at.add("start")
			for range 3 {
				time.Sleep(2 * time.Second)
				term.Progress()
				at.add("progress")
			}
			<-ctx.Done()
			at.add("cancelled")
			return ctx.Err()
		}, simba.WithProgressWatchdog(watchdogLimit))
		require.NoError(t, err)
		time.Sleep(time.Minute)

		progress := at.get("progress")
		require.Len(t, progress, 3)
		last := progress[2]
		assert.Equal(t, 6*time.Second, last.Sub(at.get("start")[0]))
		rev := revokedFor(h, simba.RevokeStuck)
		require.Len(t, rev, 1, "revoked for want of progress once: %v", eventsOf[simba.Revoked](h))
		assert.Equal(t, last.Add(watchdogLimit), rev[0].At, "revoked the limit after the last progress")
		assert.Equal(t, []time.Time{rev[0].At}, at.get("cancelled"), "the run's ctx is cancelled then")
		require.Error(t, rev[0].Err)
		assert.Contains(t, rev[0].Err.Error(), "no progress for 5s")

		term := h.Terms()[0]
		assert.Equal(t, rev[0].Token, term.Token())
		err = term.EnsureValid()
		require.ErrorIs(t, err, simba.ErrTermExpired)
		var te *simba.TermError
		require.ErrorAs(t, err, &te)
		assert.Equal(t, simba.RevokeStuck, te.Reason)
		assert.Contains(t, te.Error(), "no progress for 5s")

		assert.Equal(t, []time.Time{rev[0].At}, logs.times("no progress within the watchdog's limit"), "one Warn log, at the revoke:\n%s", logs.msgs)
		var handed []simba.HandedOff
		for _, e := range eventsOf[simba.HandedOff](h) {
			if e.Token == term.Token() {
				handed = append(handed, e)
			}
		}
		require.Len(t, handed, 1)
		assert.True(t, handed[0].Released, "the lease is released, as for any revoke the client makes itself")
		assert.Equal(t, rev[0].At, handed[0].At, "at once: the run returned on its cancellation")
		for _, w := range eventsOf[simba.WorkCompleted](h) {
			if w.Token == term.Token() {
				assert.Equal(t, simba.ResultCancelled, w.Result)
			}
		}
		closeAll(t, c)
		h.CheckTerms(t, b)
	})
}

// TestWatchdogSitsOutOneTTL: a task that never reports progress loses
// every term the limit after its function starts, and sits out one granted
// TTL before its next term begins: a cycle of limit + TTL.
func TestWatchdogSitsOutOneTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		var at instants
		_, err := c.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			at.add("start")
			<-ctx.Done()
			return nil
		}, simba.WithProgressWatchdog(watchdogLimit))
		require.NoError(t, err)
		time.Sleep(20 * time.Second)

		starts := at.get("start")
		rev := revokedFor(h, simba.RevokeStuck)
		require.Len(t, starts, 3, "terms begin at 0, 8s and 16s")
		require.Len(t, rev, 2, "terms end at 5s and 13s")
		terms := h.Terms()
		for i := range rev {
			assert.Equal(t, watchdogLimit, rev[i].At.Sub(starts[i]), "term %d: revoked the limit after the function started", i)
			assert.Equal(t, terms[i].Token(), rev[i].Token)
			assert.Equal(t, testTTL, terms[i+1].Start().Sub(rev[i].At), "term %d: sits out one granted TTL", i)
			assert.Equal(t, terms[i+1].Start(), starts[i+1], "the function starts with its term")
		}
		closeAll(t, c)
		h.CheckTerms(t, b)
	})
}

// TestWatchdogProgressKeepsTheTerm: a function that reports progress more
// often than the limit keeps its term; once it returns (an early return
// keeps the term), the watchdog is off.
func TestWatchdogProgressKeepsTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		_, err := c.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			for range 30 {
				time.Sleep(watchdogLimit - time.Millisecond)
				term.Progress()
			}
			return nil
		}, simba.WithProgressWatchdog(watchdogLimit))
		require.NoError(t, err)
		time.Sleep(10 * time.Minute)

		require.Len(t, h.Terms(), 1)
		assert.True(t, h.Terms()[0].Valid(), "the term is kept")
		assert.Empty(t, eventsOf[simba.Revoked](h))
		done := eventsOf[simba.WorkCompleted](h)
		require.Len(t, done, 1)
		assert.Equal(t, simba.ResultSucceeded, done[0].Result)
		assert.Equal(t, 30*(watchdogLimit-time.Millisecond), done[0].Duration)
		closeAll(t, c)
		h.CheckTerms(t, b)
	})
}

// TestWatchdogWithoutOptionDoesNothing: without WithProgressWatchdog,
// Progress does nothing and a function that never calls it keeps its term.
func TestWatchdogWithoutOptionDoesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		_, err := c.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			term.Progress()
			return holdUntilRevoked("a", h)(ctx, term)
		})
		require.NoError(t, err)
		time.Sleep(10 * time.Minute)
		require.Len(t, h.Terms(), 1)
		assert.True(t, h.Terms()[0].Valid())
		assert.Empty(t, eventsOf[simba.Revoked](h))
		closeAll(t, c)
		h.CheckTerms(t, b)
	})
}

// TestWatchdogOnlyWhileARunGoes: a schedule's watchdog counts from each
// run's start and is off between runs. The initial delay (30s) and the
// delays between runs (a minute) pass without progress and keep the term;
// runs of 4s without progress end in time; the fourth run hangs and loses
// the term the limit after it started.
func TestWatchdogOnlyWhileARunGoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		var at instants
		s := simba.FixedDelay(time.Minute).WithInitialDelay(30 * time.Second)
		_, err := c.Election("e").Schedule(s, func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			if len(h.Terms()) > 1 {
				return nil // the next term: not this test's
			}
			at.add("start")
			if len(at.get("start")) < 4 {
				time.Sleep(watchdogLimit - time.Second)
				return nil
			}
			<-ctx.Done()
			return nil
		}, simba.WithProgressWatchdog(watchdogLimit))
		require.NoError(t, err)
		time.Sleep(5 * time.Minute)

		require.NotEmpty(t, h.Terms())
		t0 := h.Terms()[0].Start()
		var offsets []time.Duration
		for _, s := range at.get("start") {
			offsets = append(offsets, s.Sub(t0))
		}
		assert.Equal(t, []time.Duration{30 * time.Second, 94 * time.Second, 158 * time.Second, 222 * time.Second}, offsets, "runs 4s long, a minute apart")
		rev := revokedFor(h, simba.RevokeStuck)
		require.Len(t, rev, 1, "%v", eventsOf[simba.Revoked](h))
		assert.Equal(t, 227*time.Second, rev[0].At.Sub(t0), "the limit after the fourth run started")
		assert.Equal(t, h.Terms()[0].Token(), rev[0].Token)
		closeAll(t, c)
		h.CheckTerms(t, b)
	})
}

// TestWatchdogHandsOffToAnotherMember: two clients run the same task with
// a watchdog; a's function makes no progress, and z, waiting for the lease,
// takes over the instant a's term is given up; z reports progress and keeps
// the lease, while a sits out and then waits for it.
func TestWatchdogHandsOffToAnotherMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		z, _ := node(t, b, "z", h)
		task := func(name string, progresses bool) func(context.Context, *simba.Term) error {
			return func(ctx context.Context, term *simba.Term) error {
				h.SawTerm(name, term)
				for progresses {
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(time.Second):
						term.Progress()
					}
				}
				<-ctx.Done()
				return nil
			}
		}
		_, err := a.Election("e").RunWhileLeader(task("a", false), simba.WithProgressWatchdog(watchdogLimit))
		require.NoError(t, err)
		synctest.Wait()
		_, err = z.Election("e").RunWhileLeader(task("z", true), simba.WithProgressWatchdog(watchdogLimit))
		require.NoError(t, err)
		time.Sleep(time.Minute)

		terms := h.Terms()
		require.Len(t, terms, 2)
		assert.Equal(t, "a", h.Owner(terms[0]))
		assert.Equal(t, "z", h.Owner(terms[1]))
		assert.Greater(t, terms[1].Token(), terms[0].Token())
		rev := eventsOf[simba.Revoked](h)
		require.Len(t, rev, 1, "z keeps its term: %v", rev)
		assert.Equal(t, simba.RevokeStuck, rev[0].Reason)
		assert.Equal(t, terms[0].Start().Add(watchdogLimit), rev[0].At)
		elected := eventsOf[simba.Elected](h)
		require.Len(t, elected, 2)
		assert.Equal(t, rev[0].At, elected[1].At, "z takes over at once")
		assert.True(t, terms[1].Valid())
		session, token, held := b.Holder("e")
		require.True(t, held)
		assert.Equal(t, terms[1].Token(), token)
		assert.Equal(t, elected[1].Session, session)
		closeAll(t, a, z)
		h.CheckTerms(t, b)
	})
}

// TestWatchdogStuckRunIgnoresCancellation: a function truly hung (it
// ignores its ctx for a minute) loses its term at the limit, and the lease
// is handed off at the deadline the term had then, not when the function
// returns: another member takes over at that instant.
func TestWatchdogStuckRunIgnoresCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		z, _ := node(t, b, "z", h)
		var at instants
		_, err := a.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			time.Sleep(time.Minute) // hung, deaf to ctx
			at.add("returned")
			return nil
		}, simba.WithProgressWatchdog(watchdogLimit))
		require.NoError(t, err)
		synctest.Wait()
		_, err = z.Election("e").RunWhileLeader(holdUntilRevoked("z", h))
		require.NoError(t, err)
		time.Sleep(watchdogLimit)
		synctest.Wait()

		terms := h.Terms()
		require.Len(t, terms, 1)
		rev := eventsOf[simba.Revoked](h)
		require.Len(t, rev, 1)
		assert.Equal(t, simba.RevokeStuck, rev[0].Reason)
		handOffBy := terms[0].HandOffDeadline()
		assert.GreaterOrEqual(t, handOffBy.Sub(rev[0].At), testTTL-time.Second-300*time.Millisecond, "the lease stays a's until its deadline")
		assert.LessOrEqual(t, handOffBy.Sub(rev[0].At), testTTL-300*time.Millisecond)
		time.Sleep(time.Minute)

		terms = h.Terms()
		require.Len(t, terms, 2)
		assert.Equal(t, "z", h.Owner(terms[1]))
		assert.Equal(t, handOffBy, terms[1].Start(), "z takes over at a's deadline")
		assert.Equal(t, []time.Time{terms[0].Start().Add(time.Minute)}, at.get("returned"), "a's function ran on")
		closeAll(t, a, z)
		h.CheckTerms(t, b)
	})
}

// TestWatchdogPerPartition: in a group, each partition's term has a
// watchdog of its own: the stuck partition loses its term, the other
// keeps it.
func TestWatchdogPerPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		_, err := c.Group("g", 2).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
			h.SawTerm("a", term)
			for p == 1 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Second):
					term.Progress()
				}
			}
			<-ctx.Done()
			return nil
		}, simba.WithProgressWatchdog(watchdogLimit))
		require.NoError(t, err)
		time.Sleep(watchdogLimit + time.Second)

		rev := eventsOf[simba.Revoked](h)
		require.Len(t, rev, 1, "%v", rev)
		assert.Equal(t, simba.RevokeStuck, rev[0].Reason)
		assert.Equal(t, "g.0", rev[0].Election)
		closeAll(t, c)
		h.CheckTerms(t, b)
	})
}

// TestWatchdogStopWhileWatching: stopping the task while its function runs
// under a watchdog ends the term as stopped, not stuck, and leaves no timer
// behind (the bubble would not end otherwise).
func TestWatchdogStopWhileWatching(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		task, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", h), simba.WithProgressWatchdog(watchdogLimit))
		require.NoError(t, err)
		time.Sleep(watchdogLimit - time.Second)
		require.NoError(t, task.Close())
		time.Sleep(time.Minute)
		rev := eventsOf[simba.Revoked](h)
		require.Len(t, rev, 1)
		assert.Equal(t, simba.RevokeStopped, rev[0].Reason)
		closeAll(t, c)
		h.CheckTerms(t, b)
	})
}

// TestWatchdogRejectsBadLimit: a limit that is not positive is refused.
func TestWatchdogRejectsBadLimit(t *testing.T) {
	b := memory.New()
	defer b.Close()
	c, err := simba.New(b, simba.WithTTL(testTTL))
	require.NoError(t, err)
	defer c.Close()
	for _, limit := range []time.Duration{0, -time.Second} {
		_, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", newHistory()), simba.WithProgressWatchdog(limit))
		if assert.ErrorIs(t, err, simba.ErrInvalidArgument, "limit %v", limit) {
			assert.True(t, strings.HasPrefix(err.Error(), "simba: "), err.Error())
			assert.Contains(t, err.Error(), "progress watchdog limit must be positive")
		}
	}
}
