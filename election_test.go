package simba_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
)

func TestElectedRunsWithToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		task, err := c.Election("ingest").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait()

		require.Len(t, h.Terms(), 1)
		term := h.Terms()[0]
		assert.Equal(t, "ingest", term.Name())
		assert.NotZero(t, term.Token())
		assert.True(t, term.Valid())
		assert.NoError(t, term.EnsureValid())
		assert.Equal(t, term.Start().Add(testTTL-300*time.Millisecond), term.Deadline(), "deadline = open send time + TTL - 10% margin")

		// Renewals move the deadline.
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		assert.Equal(t, term.Start().Add(time.Second+testTTL-300*time.Millisecond), term.Deadline())

		task.Stop()
		await.For(t, task.Done(), testTTL, "the task's Stop did not complete within the TTL")
		assert.False(t, term.Valid())
		assert.ErrorIs(t, term.EnsureValid(), simba.ErrTermExpired)
		var te *simba.TermError
		require.ErrorAs(t, term.EnsureValid(), &te)
		assert.Equal(t, simba.RevokeStopped, te.Reason)
		closeAll(t, c)
		h.CheckTerms(t, b)
	})
}

// revokeSlack is how long after its deadline a test waits for a term to be
// revoked: the deadline timer fires at the deadline itself, so any slack
// only makes the failure message of a broken timer wait longer.
const revokeSlack = 10 * time.Second

// awaitRevocation waits until term is revoked, at most until revokeSlack
// past its deadline, and returns an error saying so if it is not.
func awaitRevocation(term *simba.Term, who string) error {
	_, err := await.Within(term.Revoked(), time.Until(term.Deadline())+revokeSlack,
		"term %d of %q on %s not revoked within %v of its deadline", term.Token(), term.Name(), who, revokeSlack)
	return err
}

// renewalNeverAnswered starts a client whose term is renewed twice, then
// cuts it off from the backend, and waits for the term to be revoked by its
// own deadline. It returns the client and its node, the term, the term's
// deadline when the link was cut, and the error of the wait.
func renewalNeverAnswered(t *testing.T, b *memory.Backend, h *history) (*simba.Client, *memory.Node, *simba.Term, time.Time, error) {
	c, n := node(t, b, "a", h)
	_, err := c.Election("ingest").RunWhileLeader(holdUntilRevoked("a", h))
	require.NoError(t, err)
	time.Sleep(2500 * time.Millisecond) // renewals confirmed at 1s and 2s
	require.Len(t, h.Terms(), 1)
	term := h.Terms()[0]
	want := term.Deadline()
	n.Partition() // the renewal at 3s is never answered
	return c, n, term, want, awaitRevocation(term, "a")
}

func TestRenewalThatNeverAnswersRevokesAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, n, term, want, err := renewalNeverAnswered(t, b, h)
		assert.Equal(t, term.Start().Add(2*time.Second+testTTL-300*time.Millisecond), want)
		require.NoError(t, err)
		assert.Equal(t, want, time.Now(), "revoked exactly at the deadline, without a network answer")
		var te *simba.TermError
		require.ErrorAs(t, term.EnsureValid(), &te)
		assert.Equal(t, simba.RevokeDeadline, te.Reason)
		holder, _, ok := b.Holder("ingest")
		assert.True(t, ok, "the backend still holds the lease for the old session: local revocation came first")
		assert.NotEmpty(t, holder)

		n.Heal()
		synctest.Wait()
		require.Eventually(t, func() bool { return len(eventsOf[simba.Elected](h)) == 2 }, time.Minute, 100*time.Millisecond)
		closeAll(t, c)
		h.CheckTerms(t, b)
		lost := eventsOf[simba.SessionLost](h)
		require.Len(t, lost, 1)
		assert.Equal(t, simba.RevokeDeadline, lost[0].Reason)
	})
}

// TestRenewalNeverAnsweredCatchesDeadTimer plants a deadline timer that
// never ends the session: the scenario of the test above must then report
// the term not revoked, within a bounded virtual time, and not hang.
func TestRenewalNeverAnsweredCatchesDeadTimer(t *testing.T) {
	simba.PlantBug(t, "deadline-timer-dead")
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		start := time.Now()
		c, n, term, want, err := renewalNeverAnswered(t, b, h)
		require.Error(t, err, "the dead timer went unnoticed")
		t.Logf("caught: %v", err)
		assert.Contains(t, err.Error(), fmt.Sprintf("term %d of \"ingest\" on a not revoked within 10s of its deadline", term.Token()))
		assert.Equal(t, want.Add(revokeSlack), time.Now(), "reported at once when the wait ran out")
		assert.Less(t, time.Since(start), time.Minute)
		assert.False(t, term.Valid(), "the term is not valid past its deadline, though never revoked")
		n.Heal() // the server expired the session meanwhile: the client learns it, and Close returns
		closeAll(t, c)
	})
}

func TestGrantedTTLIsUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := memory.NewWithOptions(memory.WithTTLBounds(5*time.Second, 0))
		require.NoError(t, err)
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h) // requests 3s
		_, err = c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait()
		started := eventsOf[simba.SessionStarted](h)
		require.Len(t, started, 1)
		assert.Equal(t, 5*time.Second, started[0].TTL)
		assert.Equal(t, h.Terms()[0].Start().Add(4500*time.Millisecond), h.Terms()[0].Deadline())
		closeAll(t, c)
	})
}

func TestSessionExpiryStartsNewSessionAndTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, n := node(t, b, "a", h)
		_, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait()
		first := c.SessionID()
		n.Expire()
		synctest.Wait()
		require.Len(t, h.Terms(), 2)
		var te *simba.TermError
		require.ErrorAs(t, h.Terms()[0].EnsureValid(), &te)
		assert.Equal(t, simba.RevokeSessionLost, te.Reason)
		assert.Greater(t, h.Terms()[1].Token(), h.Terms()[0].Token())
		assert.NotEqual(t, first, c.SessionID())
		closeAll(t, c)
		h.CheckTerms(t, b)
	})
}

func TestPanicFailsTheRunNotTheElection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		var runs atomic.Int32
		_, err := c.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			runs.Add(1)
			panic("boom")
		})
		require.NoError(t, err)
		time.Sleep(10 * testTTL)
		synctest.Wait()
		assert.Equal(t, int32(1), runs.Load(), "a run that returned early is not run again in the same term")
		require.Len(t, h.Terms(), 1)
		assert.True(t, h.Terms()[0].Valid(), "the term outlives the panic")
		done := eventsOf[simba.WorkCompleted](h)
		require.Len(t, done, 1)
		assert.Equal(t, simba.ResultFailed, done[0].Result)
		var pe *simba.PanicError
		require.ErrorAs(t, done[0].Err, &pe)
		assert.Equal(t, "boom", pe.Value)
		assert.Empty(t, eventsOf[simba.Revoked](h))
		closeAll(t, c)
	})
}

func TestErrorAfterTheTermEndedIsCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		task, err := c.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			<-ctx.Done()
			return ctx.Err()
		})
		require.NoError(t, err)
		synctest.Wait()
		task.Stop()
		await.For(t, task.Done(), testTTL, "the task's Stop did not complete within the TTL")
		closeAll(t, c)
		done := eventsOf[simba.WorkCompleted](h)
		require.Len(t, done, 1)
		assert.Equal(t, simba.ResultCancelled, done[0].Result)
		assert.ErrorIs(t, done[0].Err, context.Canceled)
	})
}

func TestEarlyReturnKeepsTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		z, _ := node(t, b, "z", h)
		var runs atomic.Int32
		_, err := a.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			runs.Add(1)
			return nil
		})
		require.NoError(t, err)
		synctest.Wait()
		_, err = z.Election("e").RunWhileLeader(holdUntilRevoked("z", h))
		require.NoError(t, err)
		time.Sleep(20 * testTTL)
		synctest.Wait()
		assert.Equal(t, int32(1), runs.Load())
		require.Len(t, h.Terms(), 1, "the other client never got a term")
		assert.True(t, h.Terms()[0].Valid())
		closeAll(t, a, z)
		h.CheckTerms(t, b)
	})
}

// cleanUp is how long the runs of the hand-off scenario take to exit once
// their ctx is cancelled.
const cleanUp = 100 * time.Millisecond

// stopHandOff stops a's task while z waits for the lease: a's run takes
// cleanUp to exit after its ctx is cancelled, and the hand-off must wait
// for it. It returns every way the hand-off broke its order (first the
// task, then the lease), each as an error.
func stopHandOff(t *testing.T) []error {
	b := memory.New()
	defer b.Close()
	h := newHistory()
	a, _ := node(t, b, "a", h)
	z, _ := node(t, b, "z", h)
	ta, err := a.Election("e").RunWhileLeader(holdThenCleanUp("a", h, cleanUp))
	require.NoError(t, err)
	synctest.Wait()
	_, err = z.Election("e").RunWhileLeader(holdUntilRevoked("z", h))
	require.NoError(t, err)
	time.Sleep(5 * time.Second)
	stopAt := time.Now()
	ta.Stop()
	await.For(t, ta.Done(), testTTL, "a's Stop did not complete within the TTL")
	doneAt := time.Now()
	time.Sleep(2 * cleanUp) // a run still going at the completion exits meanwhile

	var errs []error
	at := func(x time.Time) time.Duration { return x.Sub(stopAt) }
	require.Len(t, h.Terms(), 2)
	first, next := h.Terms()[0], h.Terms()[1]
	require.Equal(t, "z", h.Owner(next))
	require.Len(t, h.Runs(), 1)
	exited := h.Runs()[0].End
	if want := stopAt.Add(cleanUp); !exited.Equal(want) {
		errs = append(errs, fmt.Errorf("a's run exited at +%v, want +%v: the scenario is broken", at(exited), at(want)))
	}
	if doneAt.Before(exited) {
		errs = append(errs, fmt.Errorf("a's Stop completed at +%v, before its run exited at +%v", at(doneAt), at(exited)))
	}
	if next.Start().Before(exited) {
		errs = append(errs, fmt.Errorf("z's term %d began at +%v, before a's run exited at +%v", next.Token(), at(next.Start()), at(exited)))
	} else if !next.Start().Equal(exited) {
		errs = append(errs, fmt.Errorf("z's term %d began at +%v, not when a's run exited at +%v", next.Token(), at(next.Start()), at(exited)))
	}
	for _, g := range b.History() {
		if g.Token != first.Token() {
			continue
		}
		switch {
		case !g.Ended || g.Reason != "released":
			errs = append(errs, fmt.Errorf("a's lease (token %d) not released: ended %v, %q", g.Token, g.Ended, g.Reason))
		case g.End.Before(exited):
			errs = append(errs, fmt.Errorf("a's lease (token %d) released at +%v, before its run exited at +%v", g.Token, at(g.End), at(exited)))
		}
	}
	if ho := eventsOf[simba.HandedOff](h); len(ho) != 1 || !ho[0].Released {
		errs = append(errs, fmt.Errorf("HandedOff events %+v, want one with the lease released", ho))
	}
	closeAll(t, a, z)
	h.CheckTerms(t, b)
	return errs
}

func TestStopHandsOffTaskThenLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, err := range stopHandOff(t) {
			t.Error(err)
		}
	})
}

// TestStopHandOffCatchesReleaseBeforeExit plants the hand-off order
// reversed: the scenario above must report the lease released, and the
// next term begun, while the run was still cleaning up.
func TestStopHandOffCatchesReleaseBeforeExit(t *testing.T) {
	simba.PlantBug(t, "release-before-exit")
	synctest.Test(t, func(t *testing.T) {
		errs := stopHandOff(t)
		require.NotEmpty(t, errs, "the reversed hand-off went unnoticed")
		var msgs []string
		for _, err := range errs {
			t.Logf("caught: %v", err)
			msgs = append(msgs, err.Error())
		}
		all := strings.Join(msgs, "\n")
		assert.Contains(t, all, "released at +0s, before its run exited at +100ms")
		assert.Contains(t, all, "began at +0s, before a's run exited at +100ms")
	})
}

func TestTaskIgnoringCancellationDelaysHandOffOnlyUntilTheCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		z, _ := node(t, b, "z", h)
		ta, err := a.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			time.Sleep(time.Minute) // ignores ctx
			return nil
		})
		require.NoError(t, err)
		synctest.Wait()
		_, err = z.Election("e").RunWhileLeader(holdUntilRevoked("z", h))
		require.NoError(t, err)
		time.Sleep(2500 * time.Millisecond)
		capAt := h.Terms()[0].Deadline() // 2s + 3s - 0.3s
		ta.Stop()
		await.For(t, h.HandedOff(h.Terms()[0]), testTTL, "a's Stop did not hand off within the TTL, though the hand-off is capped by the term's deadline")
		assert.Equal(t, capAt, time.Now(), "hand-off waits for the run until the term's deadline at the stop, no longer")
		synctest.Wait()
		require.Len(t, h.Terms(), 2)
		assert.Equal(t, capAt, h.Terms()[1].Start())
		assert.False(t, h.Terms()[0].Deadline().After(h.Terms()[1].Start()))
		closeAll(t, a, z) // waits for the minute-long run
		h.CheckTerms(t, b)
	})
}

func TestAlreadyStartedAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		task, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait()
		_, err = c.Election("e").Schedule(simba.FixedDelay(time.Second), func(context.Context, *simba.Term) error { return nil })
		assert.ErrorIs(t, err, simba.ErrAlreadyStarted)
		_, err = c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		assert.ErrorIs(t, err, simba.ErrAlreadyStarted)
		require.NoError(t, task.Close())
		again, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err, "a completed task's election may start again")
		synctest.Wait()
		require.Len(t, h.Terms(), 2)
		assert.Greater(t, h.Terms()[1].Token(), h.Terms()[0].Token())
		require.NoError(t, again.Close())
		closeAll(t, c)
		_, err = c.Election("x").RunWhileLeader(holdUntilRevoked("a", h))
		assert.ErrorIs(t, err, simba.ErrClosed)
		h.CheckTerms(t, b)
	})
}

func TestYieldSitsOutOneLeaseTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		var runs atomic.Int32
		_, err := c.Election("e").Schedule(simba.FixedDelay(time.Second), func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			if runs.Add(1) == 1 {
				return errors.Join(errors.New("disk full"), simba.ErrYield)
			}
			return nil
		})
		require.NoError(t, err)
		time.Sleep(10 * time.Second)
		require.Len(t, h.Terms(), 2)
		rev := eventsOf[simba.Revoked](h)
		require.NotEmpty(t, rev)
		assert.Equal(t, simba.RevokeYielded, rev[0].Reason)
		assert.Equal(t, testTTL, h.Terms()[1].Start().Sub(rev[0].At), "sits out one granted TTL")
		done := eventsOf[simba.WorkCompleted](h)
		assert.Equal(t, simba.ResultSucceeded, done[0].Result)
		assert.ErrorIs(t, done[0].Err, simba.ErrYield)
		closeAll(t, c)
		h.CheckTerms(t, b)
	})
}

func TestYieldHandsOverToAnotherNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		z, _ := node(t, b, "z", h)
		_, err := a.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			return simba.ErrYield
		})
		require.NoError(t, err)
		synctest.Wait()
		_, err = z.Election("e").RunWhileLeader(holdUntilRevoked("z", h))
		require.NoError(t, err)
		synctest.Wait()
		require.Len(t, h.Terms(), 2)
		assert.Equal(t, "z", h.Owner(h.Terms()[1]))
		closeAll(t, a, z)
		h.CheckTerms(t, b)
	})
}

func TestEnsureValid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		task, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait()
		term := h.Terms()[0]
		assert.NoError(t, term.EnsureValid())
		assert.NoError(t, term.EnsureValid(time.Second))
		assert.NoError(t, term.EnsureValid(time.Second, time.Second))
		err = term.EnsureValid(10 * time.Second)
		assert.ErrorIs(t, err, simba.ErrTermExpired, "a step that would outlive the term is refused")
		assert.ErrorIs(t, term.EnsureValid(-time.Second), simba.ErrInvalidArgument)
		task.Stop()
		await.For(t, task.Done(), testTTL, "the task's Stop did not complete within the TTL")
		assert.ErrorIs(t, term.EnsureValid(), simba.ErrTermExpired)
		closeAll(t, c)
	})
}

func TestExecutorRunsTheTerms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		var used atomic.Int32
		exec := func(f func()) { used.Add(1); go f() }
		_, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", h), simba.WithExecutor(exec))
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, int32(1), used.Load())
		closeAll(t, c)
	})
}

func TestCloseLeavesNothingBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		for _, name := range []string{"a", "b", "c"} {
			_, err := c.Election(name).RunWhileLeader(holdUntilRevoked("a", h))
			require.NoError(t, err)
		}
		synctest.Wait()
		require.Len(t, h.Terms(), 3)
		closeAll(t, c)
		assert.Empty(t, b.Sessions())
		for _, name := range []string{"a", "b", "c"} {
			_, _, held := b.Holder(name)
			assert.False(t, held, name)
		}
		n := len(h.Events())
		closeAll(t, c) // idempotent
		time.Sleep(time.Minute)
		assert.Len(t, h.Events(), n, "no callbacks after Close")
		h.CheckTerms(t, b)
	})
}

func TestCloseWhilePartitionedReturnsWithinTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, n := node(t, b, "a", h)
		_, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait()
		n.Partition()
		start := time.Now()
		err = await.For(t, await.Returned(c.Close), 2*testTTL, "Close of a client cut off from the backend did not return within twice the TTL")
		assert.NoError(t, err)
		assert.LessOrEqual(t, time.Since(start), testTTL)
		n.Heal()
	})
}

func TestEventsInOrderAndSlowHandlersDoNotDelayHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		slow := func(simba.Event) { time.Sleep(500 * time.Millisecond) } // slow, but within Close's bound for handlers
		a, _ := node(t, b, "a", h, simba.WithEventHandler(slow))
		z, _ := node(t, b, "z", h)
		ta, err := a.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait()
		_, err = z.Election("e").RunWhileLeader(holdUntilRevoked("z", h))
		require.NoError(t, err)
		synctest.Wait()
		stopAt := time.Now()
		ta.Stop()
		await.For(t, ta.Done(), testTTL, "a's Stop did not complete within the TTL")
		synctest.Wait()
		require.Len(t, h.Terms(), 2)
		assert.Equal(t, stopAt, h.Terms()[1].Start(), "a slow handler on a does not delay its hand-off")
		closeAll(t, a, z) // a's close delivers its queued events to the slow handler first

		var kinds []string
		for _, e := range h.Events() {
			switch x := e.(type) {
			case simba.Elected:
				if x.Token == h.Terms()[0].Token() {
					kinds = append(kinds, "elected")
				}
			case simba.WorkCompleted:
				if x.Token == h.Terms()[0].Token() {
					kinds = append(kinds, "completed")
				}
			case simba.Revoked:
				if x.Token == h.Terms()[0].Token() {
					kinds = append(kinds, "revoked")
				}
			case simba.HandedOff:
				if x.Token == h.Terms()[0].Token() {
					kinds = append(kinds, "handed-off")
				}
			}
		}
		assert.Equal(t, []string{"elected", "revoked", "completed", "handed-off"}, kinds)
	})
}
