package simba_test

import (
	"context"
	"errors"
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

// claims records the claims made and the runs that followed them.
type claims struct {
	mu     sync.Mutex
	log    []string // "claim <name> <token>", "run <name> <token>"
	failN  int      // fail this many claims first
	failed int
}

func (c *claims) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, s)
}

func (c *claims) Log() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

func (c *claims) claim(ctx context.Context, term *simba.Term) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed < c.failN {
		c.failed++
		return errors.New("resource unavailable")
	}
	c.log = append(c.log, "claim "+term.String())
	return nil
}

func TestClaimRunsBeforeEveryTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		z, _ := node(t, b, "z", h)
		var cl claims
		run := func(ctx context.Context, term *simba.Term) error {
			cl.add("run " + term.String())
			<-ctx.Done()
			return nil
		}
		ta, err := a.Election("e").RunWhileLeader(run, simba.WithClaim(cl.claim))
		require.NoError(t, err)
		synctest.Wait()
		_, err = z.Election("e").Schedule(simba.FixedDelay(time.Second), func(ctx context.Context, term *simba.Term) error {
			cl.add("run " + term.String())
			return nil
		}, simba.WithClaim(cl.claim))
		require.NoError(t, err)
		ta.Stop()
		<-ta.Done()
		synctest.Wait()
		log := cl.Log()
		require.GreaterOrEqual(t, len(log), 4, "log: %v", log)
		assert.Equal(t, []string{`claim term 1 of "e"`, `run term 1 of "e"`, `claim term 2 of "e"`, `run term 2 of "e"`}, log[:4])
		for _, l := range log[4:] {
			assert.Equal(t, `run term 2 of "e"`, l, "one claim per term, before the schedule's first run")
		}
		closeAll(t, a, z)
	})
}

func TestClaimRetriedUntilItSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		cl := claims{failN: 3}
		started := time.Now()
		var ranAt time.Time
		_, err := a.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			ranAt = time.Now()
			cl.add("run " + term.String())
			<-ctx.Done()
			return nil
		}, simba.WithClaim(cl.claim))
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, []string{`claim term 1 of "e"`, `run term 1 of "e"`}, cl.Log())
		// Backoff after three failures: 10 + 20 + 40 ms, each jittered
		// down to no less than half.
		assert.GreaterOrEqual(t, ranAt.Sub(started), 35*time.Millisecond)
		assert.LessOrEqual(t, ranAt.Sub(started), 70*time.Millisecond)
		closeAll(t, a)
	})
}

func TestClaimThatNeverSucceedsRunsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		cl := claims{failN: 1 << 30}
		task, err := a.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			cl.add("run " + term.String())
			return nil
		}, simba.WithClaim(cl.claim))
		require.NoError(t, err)
		time.Sleep(time.Minute)
		stopAt := time.Now()
		task.Stop()
		<-task.Done()
		assert.Equal(t, stopAt, time.Now(), "a waiting claim does not delay the hand-off")
		assert.Empty(t, cl.Log())
		closeAll(t, a)
	})
}

func TestClaimBlockedUntilTheTermEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, na := node(t, b, "a", h)
		z, _ := node(t, b, "z", h)
		var ran bool
		claimed := make(chan struct{}, 2)
		block := func(ctx context.Context, term *simba.Term) error {
			claimed <- struct{}{}
			<-ctx.Done() // a lock that is never granted
			return ctx.Err()
		}
		_, err := a.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			ran = true
			return nil
		}, simba.WithClaim(block))
		require.NoError(t, err)
		<-claimed
		na.Partition() // the term ends by its deadline, inside the claim
		_, err = z.Election("e").RunWhileLeader(holdUntilRevoked("z", h), simba.WithClaim(func(context.Context, *simba.Term) error { return nil }))
		require.NoError(t, err)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.False(t, ran, "the task did not run in a term whose claim never returned")
		require.Len(t, h.Terms(), 1)
		assert.Equal(t, "z", h.Owner(h.Terms()[0]))
		na.Heal()
		closeAll(t, a, z)
	})
}

func TestClaimYields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		z, _ := node(t, b, "z", h)
		yielded := 0
		_, err := a.Election("e").RunWhileLeader(holdUntilRevoked("a", h), simba.WithClaim(func(context.Context, *simba.Term) error {
			yielded++
			return simba.ErrYield
		}))
		require.NoError(t, err)
		synctest.Wait()
		_, err = z.Election("e").RunWhileLeader(holdUntilRevoked("z", h))
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		require.NotEmpty(t, h.Terms())
		assert.Equal(t, "z", h.Owner(h.Terms()[0]), "a gave the lease up from its claim")
		assert.Equal(t, 1, yielded)
		closeAll(t, a, z)
	})
}

func TestClaimInGroupPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		var cl claims
		_, err := a.Group("g", 3).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
			cl.add("run " + term.String())
			<-ctx.Done()
			return nil
		}, simba.WithClaim(cl.claim))
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		log := cl.Log()
		require.Len(t, log, 6)
		claimed := map[string]bool{}
		for _, l := range log {
			if term, ok := strings.CutPrefix(l, "claim "); ok {
				claimed[term] = true
			} else {
				assert.True(t, claimed[strings.TrimPrefix(l, "run ")], "%q ran before its claim: %v", l, log)
			}
		}
		assert.Len(t, claimed, 3, "one claim per partition's term")
		closeAll(t, a)
	})
}

func TestWithClaimNil(t *testing.T) {
	c, err := simba.New(memory.New())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Election("e").RunWhileLeader(func(context.Context, *simba.Term) error { return nil }, simba.WithClaim(nil))
	assert.ErrorIs(t, err, simba.ErrInvalidArgument)
}
