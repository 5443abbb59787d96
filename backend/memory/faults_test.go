package memory_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

func TestPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		na := srv.Node("a")
		a := open(t, na, ttl)
		b := open(t, srv.Node("b"), time.Hour)
		la := acquire(t, a, "x")
		require.NoError(t, a.Join(t.Context(), "g", backend.Member{ID: "a"}))
		watch, err := a.WatchMembers(t.Context(), "g")
		require.NoError(t, err)
		before := srv.Stats()

		na.Partition()
		start := time.Now()
		for name, f := range sessionCalls(a, la) {
			err := f(timeout(t, 10*time.Millisecond))
			assert.ErrorIs(t, err, context.DeadlineExceeded, name)
		}
		_, err = na.Open(timeout(t, 10*time.Millisecond), backend.SessionOptions{TTL: ttl})
		assert.ErrorIs(t, err, context.DeadlineExceeded, "Open")
		assert.Equal(t, before, srv.Stats(), "no request reached the server")

		// Hints to the partitioned node are withheld.
		require.NoError(t, b.Join(t.Context(), "g", backend.Member{ID: "b"}))
		assert.False(t, hinted(watch), "hint while partitioned")

		// The server expires a by its TTL; b takes x over.
		lb := acquire(t, b, "x")
		assert.Equal(t, ttl, time.Since(start), "a expires TTL after its last renewal")
		assert.Equal(t, []string{"b-1"}, srv.Sessions())
		assert.Greater(t, lb.Token(), la.Token())
		assert.False(t, closed(a.Done()), "Done withheld while partitioned")
		assert.False(t, closed(la.Lost()), "Lost withheld while partitioned")

		na.Heal()
		assert.True(t, closed(a.Done()), "Done delivered on Heal")
		assert.True(t, closed(la.Lost()), "Lost delivered on Heal")
		assert.True(t, closed(watch), "member watch of the expired session closed on Heal")
		_, err = a.KeepAlive(t.Context())
		assert.ErrorIs(t, err, backend.ErrSessionDone)
	})
}

func TestPartitionedCallsProceedOnHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		na := srv.Node("a")
		a := open(t, na, ttl)
		b := open(t, srv.Node("b"), time.Hour)
		watch, err := a.WatchMembers(t.Context(), "g")
		require.NoError(t, err)

		na.Partition()
		keepAlive := call(func() error { _, err := a.KeepAlive(t.Context()); return err })
		join := call(func() error { return b.Join(t.Context(), "g", backend.Member{ID: "b"}) })
		require.NoError(t, <-join)
		time.Sleep(ttl / 2)
		assert.False(t, hinted(watch))
		select {
		case err := <-keepAlive:
			t.Fatalf("KeepAlive returned %v while partitioned", err)
		default:
		}
		healed := time.Now()
		na.Heal()
		require.NoError(t, <-keepAlive)
		assert.True(t, hinted(watch), "withheld hint delivered on Heal")

		// The renewal was applied at Heal: a lives until healed+TTL.
		time.Sleep(time.Until(healed.Add(ttl)) - time.Nanosecond)
		assert.Equal(t, []string{"a-1", "b-1"}, srv.Sessions())
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		assert.Equal(t, []string{"b-1"}, srv.Sessions())
	})
}

func TestPartitionWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		na := srv.Node("a")
		a := open(t, na, time.Hour)
		b := open(t, srv.Node("b"), time.Hour)
		lb := acquire(t, b, "x")
		got := make(chan backend.Lease, 1)
		go func() {
			l, err := a.Acquire(t.Context(), "x")
			assert.NoError(t, err)
			got <- l
		}()
		synctest.Wait()
		na.Partition()
		require.NoError(t, lb.Release(t.Context()))
		synctest.Wait()
		// The server hands the lease to a's candidacy in the Release's
		// step; a learns it only when the partition heals.
		session, token, held := srv.Holder("x")
		assert.True(t, held)
		assert.Equal(t, a.ID(), session, "the waiting candidacy holds on the server")
		select {
		case <-got:
			t.Fatal("a partitioned waiter's Acquire returned before Heal")
		default:
		}
		na.Heal()
		la := <-got
		assert.Equal(t, la.Token(), token)
		assert.Equal(t, memory.Stats{Open: 2, Acquire: 2, Release: 1}, srv.Stats(), "a hand-off costs the holder's Release and nothing else")
	})
}

func TestCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		na := srv.Node("a")
		start := time.Now()
		a := open(t, na, ttl)
		b := open(t, srv.Node("b"), time.Hour)
		la := acquire(t, a, "x")
		require.NoError(t, a.Join(t.Context(), "g", backend.Member{ID: "a"}))
		lb := acquire(t, b, "y")
		waiting := call(func() error { _, err := a.Acquire(t.Context(), "y"); return err })
		synctest.Wait()

		na.Crash()
		err := <-waiting
		assert.ErrorIs(t, err, memory.ErrCrashed, "call in progress")
		for name, f := range sessionCalls(a, la) {
			err := f(t.Context())
			assert.ErrorIs(t, err, memory.ErrCrashed, name)
			assert.NotErrorIs(t, err, backend.ErrSessionDone, name)
		}
		_, err = na.Open(t.Context(), backend.SessionOptions{TTL: ttl})
		assert.ErrorIs(t, err, memory.ErrCrashed, "Open")
		assert.ErrorIs(t, a.Close(t.Context()), memory.ErrCrashed, "Close")

		// Nothing was released: x is still a's until its TTL runs out.
		session, _, held := srv.Holder("x")
		assert.True(t, held)
		assert.Equal(t, "a-1", session)
		assert.Len(t, srv.Members("g"), 1)
		require.NoError(t, lb.Release(t.Context()))
		// The crashed waiter's candidacy could not be withdrawn: it holds
		// y, unused, until its session expires.
		session, _, held = srv.Holder("y")
		assert.True(t, held)
		assert.Equal(t, "a-1", session, "the crashed waiter's candidacy holds y")

		acquire(t, b, "x")
		assert.Equal(t, ttl, time.Since(start))
		assert.Empty(t, srv.Members("g"))
		assert.False(t, closed(a.Done()), "Done is never delivered to a crashed node")
		assert.False(t, closed(la.Lost()), "Lost is never delivered to a crashed node")
		h := srv.History()
		require.Len(t, h, 4)
		assert.Equal(t, "expired", h[0].Reason)
		assert.Equal(t, memory.Grant{Name: "y", Token: 3, Session: "a-1", Node: "a", Start: start, End: start.Add(ttl), Ended: true, Reason: "expired"}, h[2])
		_, _, held = srv.Holder("y")
		assert.False(t, held, "the orphan candidacy went with its session")
		na.Heal() // no effect
		_, err = a.KeepAlive(t.Context())
		assert.ErrorIs(t, err, memory.ErrCrashed)
	})
}

func TestRequestDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		na := srv.Node("a")
		start := time.Now()
		a := open(t, na, ttl)
		b := open(t, srv.Node("b"), time.Hour)
		acquire(t, a, "x")
		na.SetDelay(100*time.Millisecond, 0)

		// A request whose ctx ends on the way never reaches the server.
		before := srv.Stats()
		_, err := a.KeepAlive(timeout(t, 50*time.Millisecond))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, before, srv.Stats())

		time.Sleep(ttl/2 - 50*time.Millisecond)
		sent := time.Now()
		_, err = a.KeepAlive(t.Context())
		require.NoError(t, err)
		assert.Equal(t, 100*time.Millisecond, time.Since(sent))
		assert.Equal(t, before.KeepAlive+1, srv.Stats().KeepAlive)

		acquire(t, b, "x")
		assert.Equal(t, sent.Add(100*time.Millisecond+ttl), time.Now(), "expiry counts from the server's apply time")
		assert.Equal(t, ttl/2+100*time.Millisecond+ttl, time.Since(start))
	})
}

func TestResponseDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		na := srv.Node("a")
		a := open(t, na, time.Hour)
		acquire(t, a, "held")
		na.SetDelay(0, 100*time.Millisecond)

		// Acquire's reply is late: the grant is undone.
		l, err := a.Acquire(timeout(t, 50*time.Millisecond), "x")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Nil(t, l)
		_, _, held := srv.Holder("x")
		assert.False(t, held, "Acquire left nothing behind")

		// A re-acquisition whose reply is late ends both holdings.
		l, err = a.Acquire(timeout(t, 50*time.Millisecond), "held")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Nil(t, l)
		_, _, held = srv.Holder("held")
		assert.False(t, held)

		h := srv.History()
		require.Len(t, h, 3)
		assert.Equal(t, []string{"held", "x", "held"}, []string{h[0].Name, h[1].Name, h[2].Name})
		assert.Equal(t, []string{"reacquired", "cancelled", "cancelled"}, []string{h[0].Reason, h[1].Reason, h[2].Reason})

		// Other calls take effect although the caller gave up.
		require.ErrorIs(t, a.Join(timeout(t, 50*time.Millisecond), "g", backend.Member{ID: "a"}), context.DeadlineExceeded)
		assert.Len(t, srv.Members("g"), 1)

		// With time enough, the reply arrives.
		sent := time.Now()
		l, err = a.Acquire(t.Context(), "x")
		require.NoError(t, err)
		assert.Equal(t, 100*time.Millisecond, time.Since(sent))
		session, token, held := srv.Holder("x")
		assert.True(t, held)
		assert.Equal(t, a.ID(), session)
		assert.Equal(t, l.Token(), token)
	})
}

func TestExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		na := srv.Node("a")
		a1, a2 := open(t, na, time.Hour), open(t, na, time.Hour)
		b := open(t, srv.Node("b"), time.Hour)
		l1 := acquire(t, a1, "x")
		require.NoError(t, a2.Join(t.Context(), "g", backend.Member{ID: "a2"}))
		acquire(t, b, "y")

		na.Expire()
		assert.Equal(t, []string{"b-1"}, srv.Sessions())
		assert.True(t, closed(a1.Done()))
		assert.True(t, closed(a2.Done()))
		assert.True(t, closed(l1.Lost()))
		assert.False(t, closed(b.Done()))
		assert.Empty(t, srv.Members("g"))
		assert.Equal(t, "evicted", srv.History()[0].Reason)
		assert.ErrorIs(t, l1.Release(t.Context()), backend.ErrNotHeld)

		// Later sessions of the node are not affected.
		a3 := open(t, na, time.Hour)
		assert.Equal(t, "a-3", a3.ID())
		assert.Equal(t, []string{"a-3", "b-1"}, srv.Sessions())
	})
}

func TestExpireSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		a, b := open(t, srv, time.Hour), open(t, srv, time.Hour)
		la := acquire(t, a, "x")
		srv.ExpireSession("no-such-session")
		srv.ExpireSession(a.ID())
		srv.ExpireSession(a.ID()) // already gone
		assert.Equal(t, []string{b.ID()}, srv.Sessions())
		assert.True(t, closed(a.Done()))
		assert.True(t, closed(la.Lost()))
		_, err := a.Acquire(t.Context(), "x")
		assert.ErrorIs(t, err, backend.ErrSessionDone)
		acquire(t, b, "x")
	})
}

func TestCloseWhilePartitioned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		na := srv.Node("a")
		a := open(t, na, ttl)
		na.Partition()
		err := a.Close(timeout(t, 10*time.Millisecond))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.True(t, closed(a.Done()), "the session is over for the caller")
		_, err = a.KeepAlive(t.Context())
		assert.ErrorIs(t, err, backend.ErrSessionDone)
		assert.NoError(t, a.Close(t.Context()))
		assert.Equal(t, []string{"a-1"}, srv.Sessions(), "still on the server")
		time.Sleep(ttl)
		assert.Empty(t, srv.Sessions())
	})
}

func TestNodeClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		na := srv.Node("a")
		start := time.Now()
		a := open(t, na, ttl)
		b := open(t, srv.Node("b"), time.Hour)
		la := acquire(t, a, "x")
		require.NoError(t, na.Close())
		require.NoError(t, na.Close())
		assert.True(t, closed(a.Done()))
		assert.True(t, closed(la.Lost()))
		_, err := na.Open(t.Context(), backend.SessionOptions{TTL: ttl})
		assert.ErrorIs(t, err, backend.ErrClosed)
		_, err = a.Members(t.Context(), "g")
		assert.ErrorIs(t, err, backend.ErrSessionDone)

		// The session was abandoned, not closed: it expires by its TTL.
		assert.Equal(t, []string{"a-1", "b-1"}, srv.Sessions())
		acquire(t, b, "x")
		assert.Equal(t, ttl, time.Since(start))
	})
}

// TestExpiredInFlight expires a session while its requests are on the way:
// the server answers each with ErrSessionDone (ErrNotHeld for Release).
func TestExpiredInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		na := srv.Node("a")
		a := open(t, na, time.Hour)
		l := acquire(t, a, "x")
		na.SetDelay(10*time.Millisecond, 0)
		calls := sessionCalls(a, l)
		results := make(map[string]<-chan error, len(calls))
		for name, f := range calls {
			results[name] = call(func() error { return f(t.Context()) })
		}
		synctest.Wait() // every request is on its way
		srv.ExpireSession(a.ID())
		for name, res := range results {
			err := <-res
			if name == "Release" {
				assert.ErrorIs(t, err, backend.ErrNotHeld, name)
			} else {
				assert.ErrorIs(t, err, backend.ErrSessionDone, name)
			}
		}
	})
}

// TestWithdrawalAfterTheLink: a waiting Acquire whose ctx ends while its
// node is partitioned returns, but its withdrawal waits for the link: the
// candidacy keeps its place, and holds the lease unused after the holder
// releases, until Heal; one whose node crashes goes with its session.
func TestWithdrawalAfterTheLink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		na := srv.Node("a")
		a := open(t, na, time.Hour)
		b := open(t, srv.Node("b"), time.Hour)
		c := open(t, srv.Node("c"), time.Hour)
		lb := acquire(t, b, "x")
		ctx, cancel := context.WithCancel(t.Context())
		waiting := call(func() error { _, err := a.Acquire(ctx, "x"); return err })
		synctest.Wait()
		na.Partition()
		cancel()
		assert.ErrorIs(t, <-waiting, context.Canceled)
		queue, err := c.(backend.CandidateLister).Candidates(t.Context(), "x")
		require.NoError(t, err)
		assert.Equal(t, []string{"b-1", "a-1"}, queue, "the withdrawal waits for the link: a's candidacy is still queued")
		assert.Zero(t, srv.Stats().Withdraw)

		require.NoError(t, lb.Release(t.Context()))
		session, _, _ := srv.Holder("x")
		assert.Equal(t, "a-1", session, "the orphan candidacy holds, unused")
		na.Heal()
		lc := acquire(t, c, "x")
		assert.Equal(t, "cancelled", srv.History()[1].Reason, "withdrawn at Heal")
		assert.Greater(t, lc.Token(), srv.History()[1].Token)
		assert.Equal(t, uint64(1), srv.Stats().Withdraw)
		require.NoError(t, lc.Release(t.Context()))

		// A crashed node's withdrawal is never sent: the candidacy goes
		// with its session.
		la := acquire(t, a, "y")
		ctx, cancel = context.WithCancel(t.Context())
		waiting = call(func() error { _, err := c.Acquire(ctx, "y"); return err })
		synctest.Wait()
		srv.Node("c").Partition()
		cancel()
		assert.ErrorIs(t, <-waiting, context.Canceled)
		srv.Node("c").Crash()
		srv.Node("c").Heal()
		require.NoError(t, la.Release(t.Context()))
		session, _, _ = srv.Holder("y")
		assert.Equal(t, "c-1", session, "the crashed node's candidacy holds, unused")
		srv.ExpireSession("c-1")
		_, _, held := srv.Holder("y")
		assert.False(t, held, "the candidacy went with its session")

		// With the link up, the withdrawal reaches the server at once.
		acquire(t, a, "x")
		ctx, cancel = context.WithCancel(t.Context())
		waiting = call(func() error { _, err := b.Acquire(ctx, "x"); return err })
		synctest.Wait()
		cancel()
		assert.ErrorIs(t, <-waiting, context.Canceled)
		queue, err = a.(backend.CandidateLister).Candidates(t.Context(), "x")
		require.NoError(t, err)
		assert.Equal(t, []string{"a-1"}, queue)
		assert.Equal(t, uint64(2), srv.Stats().Withdraw)
	})
}
