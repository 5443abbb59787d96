package simba_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
)

// grantOf returns the memory backend's grant of token on lease name.
func grantOf(t *testing.T, b *memory.Backend, name string, token uint64) memory.Grant {
	t.Helper()
	for _, g := range b.History() {
		if g.Name == name && g.Token == token {
			return g
		}
	}
	t.Fatalf("the backend has no grant of token %d on %q", token, name)
	return memory.Grant{}
}

// handOffOrder checks I7 (internal/check.HandOffOrder) over the exits obs
// recorded and the backend's grants.
func handOffOrder(t *testing.T, obs *check.Observer, b *memory.Backend) {
	t.Helper()
	grants := check.MemoryGrants(b.History())
	require.NotEmpty(t, obs.Exits(), "no run recorded its exit: the scenario is broken")
	for _, err := range check.HandOffOrder(obs.Exits(), grants) {
		t.Error(err)
	}
}

// stubborn is a task function that records its term, and what it was told
// about it, and then ignores its cancellation until release is closed.
func stubborn(node string, h *history, obs *check.Observer, release <-chan struct{}) func(context.Context, *simba.Term) error {
	return func(ctx context.Context, term *simba.Term) error {
		h.SawTerm(node, term)
		defer obs.Exited(node, term)
		obs.Valid(node, term)
		<-release
		return nil
	}
}

// standoff is the scene of the tests of a stubborn run: node a holds
// election "e" with a stubborn task (the first term), and node z waits
// for it with holdUntilRevoked. The backend is closed when the test ends.
type standoff struct {
	b       *memory.Backend
	h       *history
	obs     *check.Observer
	release chan struct{} // lets a's run return
	a, z    *simba.Client
	task    *simba.LeaderTask // a's
}

// newStandoff sets up a standoff in a synctest bubble: a's task starts and
// takes the lease, then settle passes, then z's task starts.
func newStandoff(t *testing.T, settle time.Duration) *standoff {
	t.Helper()
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	s := &standoff{b: b, h: newHistory(), obs: &check.Observer{}, release: make(chan struct{})}
	s.a, _ = node(t, b, "a", s.h)
	s.z, _ = node(t, b, "z", s.h)
	var err error
	s.task, err = s.a.Election("e").RunWhileLeader(stubborn("a", s.h, s.obs, s.release))
	require.NoError(t, err)
	synctest.Wait()
	time.Sleep(settle)
	synctest.Wait()
	_, err = s.z.Election("e").RunWhileLeader(holdUntilRevoked("z", s.h))
	require.NoError(t, err)
	return s
}

// Shutdown returns once the graceful hand-off is done: the run has exited,
// the lease is released, the session ended; the other node takes over with
// a higher token, after the run exited.
func TestShutdownReturnsOnceHandedOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cleanUp = 100 * time.Millisecond
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		z, _ := node(t, b, "z", h)
		_, err := a.Election("e").RunWhileLeader(holdThenCleanUp("a", h, cleanUp))
		require.NoError(t, err)
		synctest.Wait()
		_, err = z.Election("e").RunWhileLeader(holdUntilRevoked("z", h))
		require.NoError(t, err)
		time.Sleep(5 * time.Second)
		session := a.SessionID()

		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		stopAt := time.Now()
		err = await.For(t, await.Returned(func() error { return a.Shutdown(ctx) }), time.Minute, "a's Shutdown did not return within its ctx")
		require.NoError(t, err, "the hand-off took %v of a minute", time.Since(stopAt))
		returned := time.Now()

		require.Len(t, h.Runs(), 1)
		exited := h.Runs()[0].End
		assert.Equal(t, stopAt.Add(cleanUp), exited, "a's run exits after its clean-up")
		assert.False(t, returned.Before(exited), "Shutdown returned at +%v, before the run exited at +%v", returned.Sub(stopAt), exited.Sub(stopAt))
		g := grantOf(t, b, "e", h.Terms()[0].Token())
		assert.True(t, g.Ended && g.Reason == "released", "a's lease not released by Shutdown: ended %v, %q", g.Ended, g.Reason)
		assert.False(t, g.End.Before(exited), "a's lease released at +%v, before its run exited at +%v", g.End.Sub(stopAt), exited.Sub(stopAt))
		assert.NotContains(t, b.Sessions(), session, "a's session still open on the backend after Shutdown")
		assert.Equal(t, simba.SessionClosed, a.Health().State)

		synctest.Wait()
		require.Len(t, h.Terms(), 2, "z did not take over")
		next := h.Terms()[1]
		assert.Equal(t, "z", h.Owner(next))
		assert.Greater(t, next.Token(), h.Terms()[0].Token())
		assert.False(t, next.Start().Before(exited), "z's term began at +%v, before a's run exited at +%v", next.Start().Sub(stopAt), exited.Sub(stopAt))

		// Again, and Close: both see the shutdown done.
		expired, cancelNow := context.WithCancel(t.Context())
		cancelNow()
		assert.NoError(t, a.Shutdown(expired), "a second Shutdown after the first completed")
		assert.NoError(t, a.Close())
		closeAll(t, z)
		h.CheckTerms(t, b)
	})
}

// A task that ignores its ctx makes Shutdown return ctx's error at ctx's
// deadline, saying what still runs; the lease is not released before the
// term's deadline at the stop, then the other node takes over with a
// higher token while the run goes on, and the client finishes closing once
// the run returns.
func TestShutdownOfATaskIgnoringCancellationReturnsAtTheCtxDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStandoff(t, 0)
		b, h, obs, release, a, z := s.b, s.h, s.obs, s.release, s.a, s.z
		time.Sleep(2500 * time.Millisecond)
		first := h.Terms()[0]
		capAt := first.Deadline() // the term's deadline at the stop: 2s + 3s - 0.3s
		session := a.SessionID()

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		stopAt := time.Now()
		err := await.For(t, await.Returned(func() error { return a.Shutdown(ctx) }), time.Minute, "a's Shutdown did not return at its ctx's deadline")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		t.Logf("Shutdown: %v", err)
		assert.Equal(t, stopAt.Add(time.Second), time.Now(), "Shutdown returns at its ctx's deadline")
		assert.ErrorContains(t, err, `simba: shutdown stopped waiting with 1 hand-off not complete (election "e") and 1 task function running (term 1 of election "e")`)
		assert.ErrorContains(t, err, "the client goes on closing in the background")
		holder, token, held := b.Holder("e")
		assert.True(t, held && holder == session && token == first.Token(), "a's lease released when Shutdown stopped waiting, before the term's deadline (held %v by %s, token %d)", held, holder, token)

		// The lease goes at the term's deadline, not before; z takes over.
		time.Sleep(time.Until(capAt))
		synctest.Wait()
		g := grantOf(t, b, "e", first.Token())
		assert.True(t, g.Ended && g.Reason == "released", "a's lease not released at the term's deadline: ended %v, %q", g.Ended, g.Reason)
		assert.Equal(t, capAt, g.End, "a's lease released at +%v, want the term's deadline at +%v", g.End.Sub(stopAt), capAt.Sub(stopAt))
		require.Len(t, h.Terms(), 2, "z did not take over at the term's deadline")
		next := h.Terms()[1]
		assert.Equal(t, "z", h.Owner(next))
		assert.Greater(t, next.Token(), first.Token())
		assert.Equal(t, capAt, next.Start())

		// Past the hand-off, a bounded Shutdown says the run still goes on.
		short, cancelShort := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancelShort()
		err = a.Shutdown(short)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, `simba: shutdown stopped waiting with 1 task function still running after the hand-off (term 1 of election "e")`)

		time.Sleep(time.Minute)
		close(release)
		closeAll(t, a, z)
		handOffOrder(t, obs, b)
		h.CheckTerms(t, b)
	})
}

// LeaderTask.Shutdown waits for the run and the release, and, unlike
// Close, for a run that ignores its cancellation past the term's deadline;
// the client stays up.
func TestLeaderTaskShutdown(t *testing.T) {
	t.Run("Graceful", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const cleanUp = 100 * time.Millisecond
			b := memory.New()
			defer b.Close()
			h := newHistory()
			a, _ := node(t, b, "a", h)
			ta, err := a.Election("e").RunWhileLeader(holdThenCleanUp("a", h, cleanUp))
			require.NoError(t, err)
			synctest.Wait()
			stopAt := time.Now()
			require.NoError(t, ta.Shutdown(t.Context()))
			assert.Equal(t, stopAt.Add(cleanUp), time.Now(), "Shutdown returns when the run has exited and the lease is released")
			g := grantOf(t, b, "e", h.Terms()[0].Token())
			assert.True(t, g.Ended && g.Reason == "released", "lease not released: ended %v, %q", g.Ended, g.Reason)
			assert.NotEmpty(t, a.SessionID(), "the task's Shutdown closed the client's session")
			assert.NoError(t, ta.Shutdown(t.Context()), "a second Shutdown")
			closeAll(t, a)
			h.CheckTerms(t, b)
		})
	})
	t.Run("IgnoringCancellation", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newStandoff(t, 0)
			b, h, obs, release, a, z, ta := s.b, s.h, s.obs, s.release, s.a, s.z, s.task
			capAt := h.Terms()[0].Deadline()

			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			err := ta.Shutdown(ctx)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			t.Logf("before the term's deadline: %v", err)
			assert.ErrorContains(t, err, `simba: shutdown of election "e" stopped waiting with its hand-off not complete (the lease not released yet) and 1 task function running (term 1 of election "e")`)
			_, token, _ := b.Holder("e")
			assert.Equal(t, h.Terms()[0].Token(), token, "the lease was released before the term's deadline")

			ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err = ta.Shutdown(ctx)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			t.Logf("past the term's deadline: %v", err)
			assert.ErrorContains(t, err, `simba: shutdown of election "e" stopped waiting with 1 task function running (term 1 of election "e")`)
			select {
			case <-h.HandedOff(h.Terms()[0]):
			default:
				t.Error("not handed off past the term's deadline")
			}
			select {
			case <-ta.Done():
				t.Error("Done closed while the task function still runs")
			default:
			}
			assert.Equal(t, capAt, grantOf(t, b, "e", h.Terms()[0].Token()).End, "the lease goes at the term's deadline")
			require.Len(t, h.Terms(), 2, "z did not take over")

			close(release)
			require.NoError(t, ta.Shutdown(t.Context()), "Shutdown once the run returned")
			select {
			case <-ta.Done():
			default:
				t.Error("Done not closed when Shutdown returned nil")
			}
			closeAll(t, a, z)
			handOffOrder(t, obs, b)
			h.CheckTerms(t, b)
		})
	})
}

// GroupTask.Shutdown waits for every partition's run and release, and
// says which partition still runs when its ctx ends first.
func TestGroupTaskShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		release := make(chan struct{})
		var runs atomic.Int32
		gt, err := a.Group("g", 4).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
			h.SawTerm("a", term)
			runs.Add(1)
			<-ctx.Done()
			if p == 2 {
				<-release // ignores cancellation
			}
			return nil
		})
		require.NoError(t, err)
		time.Sleep(time.Second)
		require.Equal(t, int32(4), runs.Load(), "a runs every partition")

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err = gt.Shutdown(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		t.Logf("Shutdown: %v", err)
		assert.ErrorContains(t, err, `simba: shutdown of group "g" stopped waiting with 1 hand-off not complete (partition "g.2") and 1 task function running (term `)
		assert.ErrorContains(t, err, ` of partition "g.2")`)
		for _, p := range []string{"g.0", "g.1", "g.3"} {
			_, _, held := b.Holder(p)
			assert.False(t, held, "partition %s not released, though its run returned", p)
		}
		_, _, held := b.Holder("g.2")
		assert.True(t, held, "partition g.2 released while its run goes on, before its term's deadline")

		close(release)
		require.NoError(t, gt.Shutdown(t.Context()))
		assert.Empty(t, b.Members("g"), "a still a member after the group's Shutdown")
		closeAll(t, a)
		h.CheckTerms(t, b)
	})
}

// From a task function: Stop begins the stop and returns at once, and
// Shutdown called with the function's ctx (or one derived from it) begins
// it and returns an error at once, as it cannot wait for the function that
// called it. (Close there would wait for itself, as documented.)
func TestShutdownFromATaskFunction(t *testing.T) {
	for _, tc := range []struct {
		name    string
		call    func(ctx context.Context, c *simba.Client, task *simba.LeaderTask) error
		refused bool // an error at once, saying why
	}{
		{"ClientStop", func(_ context.Context, c *simba.Client, _ *simba.LeaderTask) error { c.Stop(); return nil }, false},
		{"TaskStop", func(_ context.Context, _ *simba.Client, task *simba.LeaderTask) error { task.Stop(); return nil }, false},
		{"ClientShutdown", func(ctx context.Context, c *simba.Client, _ *simba.LeaderTask) error { return c.Shutdown(ctx) }, true},
		{"TaskShutdown", func(ctx context.Context, _ *simba.Client, task *simba.LeaderTask) error {
			ctx, cancel := context.WithTimeout(ctx, time.Hour) // derived from the function's
			defer cancel()
			return task.Shutdown(ctx)
		}, true},
	} {
		for _, executor := range []bool{false, true} {
			name := tc.name
			var opts []simba.TaskOption
			if executor { // the function runs on the executor's goroutine
				name += "/Executor"
				opts = append(opts, simba.WithExecutor(func(f func()) { go f() }))
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := memory.New()
					defer b.Close()
					h := newHistory()
					a, _ := node(t, b, "a", h)
					started := make(chan *simba.LeaderTask, 1)
					called := make(chan error, 1)
					var after atomic.Bool // the function went on after the call
					task, err := a.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
						h.SawTerm("a", term)
						called <- tc.call(ctx, a, <-started)
						select { // the stop cancels ctx, on a goroutine of its own
						case <-ctx.Done():
							after.Store(true)
						case <-time.After(time.Second):
						}
						return nil
					}, opts...)
					require.NoError(t, err)
					started <- task
					err = await.For(t, called, time.Minute, "%s from the task function did not return", tc.name)
					if tc.refused {
						require.Error(t, err)
						assert.Contains(t, err.Error(), "called with the ctx of its own task function")
					} else {
						assert.NoError(t, err)
					}
					await.For(t, task.Done(), testTTL, "the task did not hand off after its function returned")
					synctest.Wait()
					assert.True(t, after.Load(), "the function's ctx was not cancelled by the call")
					g := grantOf(t, b, "e", h.Terms()[0].Token())
					assert.True(t, g.Ended && g.Reason == "released", "lease not released: ended %v, %q", g.Ended, g.Reason)
					require.NoError(t, await.For(t, await.Returned(func() error { return a.Shutdown(t.Context()) }), time.Minute, "Shutdown after the task's did not return"))
					h.CheckTerms(t, b)
				})
			})
		}
	}
}

// Shutdown is safe to call several times at once, with Close, and from an
// event handler: every call returns once the client is closed.
func TestShutdownConcurrentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		var client atomic.Pointer[simba.Client]
		fromHandler := make(chan error, 1)
		var once sync.Once
		a, _ := node(t, b, "a", h, simba.WithEventHandler(func(e simba.Event) {
			if _, ok := e.(simba.Revoked); ok {
				once.Do(func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					fromHandler <- client.Load().Shutdown(ctx)
				})
			}
		}))
		client.Store(a)
		_, err := a.Election("e").RunWhileLeader(holdThenCleanUp("a", h, 100*time.Millisecond))
		require.NoError(t, err)
		_, err = a.Group("g", 3).RunWhileLeader(func(ctx context.Context, term *simba.Term, _ int) error {
			<-ctx.Done()
			return nil
		})
		require.NoError(t, err)
		time.Sleep(time.Second)

		errs := make(chan error, 6)
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				if i%2 == 0 {
					errs <- a.Close()
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				errs <- a.Shutdown(ctx)
			})
		}
		await.For(t, await.Done(wg.Wait), time.Minute, "concurrent Shutdown and Close calls did not return")
		close(errs)
		for err := range errs {
			assert.NoError(t, err)
		}
		assert.NoError(t, await.For(t, fromHandler, time.Minute, "Shutdown from the event handler did not return"))
		assert.Empty(t, b.Sessions(), "a session left after Shutdown")
		for _, l := range []string{"e", "g.0", "g.1", "g.2"} {
			_, _, held := b.Holder(l)
			assert.False(t, held, "lease %s still held after Shutdown", l)
		}
		h.CheckTerms(t, b)
	})
}

// A ctx that has already ended still begins the shutdown: Shutdown returns
// its error at once, and the hand-off completes in the background.
func TestShutdownWithEndedCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, _ := node(t, b, "a", h)
		ta, err := a.Election("e").RunWhileLeader(holdThenCleanUp("a", h, 100*time.Millisecond))
		require.NoError(t, err)
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		at := time.Now()
		err = a.Shutdown(ctx)
		assert.True(t, errors.Is(err, context.Canceled), "Shutdown with an ended ctx: %v", err)
		assert.Equal(t, at, time.Now(), "Shutdown with an ended ctx waited")
		_, err = a.Election("x").RunWhileLeader(holdUntilRevoked("a", h))
		assert.ErrorIs(t, err, simba.ErrClosed, "no task starts once the shutdown has begun")
		await.For(t, ta.Done(), testTTL, "the hand-off did not complete in the background")
		closeAll(t, a)
		h.CheckTerms(t, b)
	})
}

// GroupTask.Stop called from a partition's function stops the group and
// returns at once; Shutdown called with the function's ctx stops it and
// returns an error at once, as it cannot wait for itself.
func TestGroupShutdownFromAPartitionFunction(t *testing.T) {
	for _, name := range []string{"Stop", "Shutdown"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				h := newHistory()
				a, _ := node(t, b, "a", h)
				started := make(chan *simba.GroupTask, 1)
				called := make(chan error, 1)
				var once sync.Once
				gt, err := a.Group("g", 2).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
					h.SawTerm("a", term)
					if p == 1 {
						once.Do(func() {
							gt := <-started
							if name == "Shutdown" {
								called <- gt.Shutdown(ctx)
							} else {
								gt.Stop()
								called <- nil
							}
						})
					}
					<-ctx.Done()
					return nil
				})
				require.NoError(t, err)
				started <- gt
				err = await.For(t, called, time.Minute, "%s from a partition's function did not return", name)
				if name == "Shutdown" {
					require.Error(t, err)
					assert.Contains(t, err.Error(), `shutdown of group "g" called with the ctx of its own task function (partition "g.1")`)
				} else {
					assert.NoError(t, err)
				}
				await.For(t, gt.Done(), testTTL, "the group did not stop after the call")
				require.NoError(t, await.For(t, await.Returned(func() error { return gt.Shutdown(t.Context()) }), time.Minute, "Shutdown after the partition's did not return"))
				for _, l := range []string{"g.0", "g.1"} {
					_, _, held := b.Holder(l)
					assert.False(t, held, "partition %s still held after the group's Shutdown", l)
				}
				closeAll(t, a)
				h.CheckTerms(t, b)
			})
		})
	}
}
