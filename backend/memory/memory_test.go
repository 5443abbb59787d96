package memory_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newBackend(t *testing.T) backend.Backend {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, newBackend, backendtest.WithSynctest())
}

// TestConformanceRealTime shows that the backend does not depend on
// synctest's virtual time.
func TestConformanceRealTime(t *testing.T) {
	if testing.Short() {
		t.Skip("runs in real time")
	}
	backendtest.Run(t, newBackend, backendtest.WithTTL(300*time.Millisecond))
}

// TestConformanceTTLBounds runs the suite with granted TTLs that differ from
// the requested ones, both ways.
func TestConformanceTTLBounds(t *testing.T) {
	for name, bounds := range map[string][2]time.Duration{
		"Raised":  {3 * time.Second, 0},
		"Lowered": {0, 400 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			backendtest.Run(t, func(t *testing.T) backend.Backend {
				b, err := memory.NewWithOptions(memory.WithTTLBounds(bounds[0], bounds[1]))
				require.NoError(t, err)
				t.Cleanup(func() { b.Close() })
				return b
			}, backendtest.WithSynctest())
		})
	}
}

// TestConformanceDelayed runs the suite through a node with link delays.
func TestConformanceDelayed(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b := memory.New()
		t.Cleanup(func() { b.Close() })
		n := b.Node("slow")
		n.SetDelay(3*time.Millisecond, 5*time.Millisecond)
		return n
	}, backendtest.WithSynctest())
}

const ttl = time.Second

// open opens a session through n with the given TTL.
func open(t *testing.T, n backend.Backend, ttl time.Duration) backend.Session {
	t.Helper()
	s, err := n.Open(t.Context(), backend.SessionOptions{TTL: ttl})
	require.NoError(t, err)
	return s
}

// acquire acquires name on s.
func acquire(t *testing.T, s backend.Session, name string) backend.Lease {
	t.Helper()
	l, err := s.Acquire(t.Context(), name)
	require.NoError(t, err)
	return l
}

// timeout returns a context that ends after d.
func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// closed reports whether ch is closed, once every goroutine has settled.
func closed(ch <-chan struct{}) bool {
	synctest.Wait()
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// hinted reports whether a hint (not a close) is pending on ch.
func hinted(ch <-chan struct{}) bool {
	synctest.Wait()
	select {
	case _, ok := <-ch:
		return ok
	default:
		return false
	}
}

// call runs f on a goroutine and returns a channel with its error.
func call(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// sessionCalls returns every call of s that goes to the server (Close
// aside), each with ctx.
func sessionCalls(s backend.Session, l backend.Lease) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"KeepAlive": func(ctx context.Context) error { _, err := s.KeepAlive(ctx); return err },
		"Acquire":   func(ctx context.Context) error { _, err := s.Acquire(ctx, "other"); return err },
		"Join":      func(ctx context.Context) error { return s.Join(ctx, "g", backend.Member{ID: "m"}) },
		"Leave":     func(ctx context.Context) error { return s.Leave(ctx, "g") },
		"Members":   func(ctx context.Context) error { _, err := s.Members(ctx, "g"); return err },
		"WatchMembers": func(ctx context.Context) error {
			_, err := s.WatchMembers(ctx, "g")
			return err
		},
		"Release": func(ctx context.Context) error { return l.Release(ctx) },
	}
}

func TestSessionIDsAndNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		a := srv.Node("a")
		assert.Same(t, a, srv.Node("a"))
		assert.Same(t, srv.Node("default"), srv.Node(""))
		assert.Equal(t, "a", a.Name())

		ids := []string{
			open(t, a, ttl).ID(), open(t, a, ttl).ID(),
			open(t, srv.Node("b"), ttl).ID(), open(t, srv, ttl).ID(),
		}
		assert.Equal(t, []string{"a-1", "a-2", "b-1", "default-1"}, ids)
		assert.Equal(t, []string{"a-1", "a-2", "b-1", "default-1"}, srv.Sessions())

		_, err := a.Open(t.Context(), backend.SessionOptions{})
		assert.ErrorContains(t, err, "invalid TTL")
	})
}

func TestExpiryTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		start := time.Now()
		a := open(t, srv.Node("a"), ttl)
		b := open(t, srv.Node("b"), time.Hour)
		la := acquire(t, a, "x")

		time.Sleep(ttl / 2)
		got, err := a.KeepAlive(t.Context())
		require.NoError(t, err)
		assert.Equal(t, ttl, got)

		lb := acquire(t, b, "x") // waits for a to expire
		assert.Equal(t, ttl/2+ttl, time.Since(start), "expiry = last renewal + TTL")
		assert.Greater(t, lb.Token(), la.Token())
		assert.True(t, closed(a.Done()))
		assert.True(t, closed(la.Lost()))
		_, err = a.KeepAlive(t.Context())
		assert.ErrorIs(t, err, backend.ErrSessionDone)
		assert.NoError(t, a.Close(t.Context()), "Close of an expired session")
		assert.Equal(t, []string{"b-1"}, srv.Sessions())
	})
}

func TestTTLBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := memory.NewWithOptions(memory.WithTTLBounds(2*time.Second, 10*time.Second))
		require.NoError(t, err)
		defer srv.Close()
		for requested, granted := range map[time.Duration]time.Duration{
			time.Millisecond: 2 * time.Second,
			5 * time.Second:  5 * time.Second,
			time.Minute:      10 * time.Second,
		} {
			s := open(t, srv, requested)
			assert.Equal(t, granted, s.TTL(), "requested %v", requested)
			got, err := s.KeepAlive(t.Context())
			require.NoError(t, err)
			assert.Equal(t, granted, got)
		}

		// Expiry follows the granted TTL.
		start := time.Now()
		a := open(t, srv, time.Millisecond)
		b := open(t, srv, time.Minute)
		acquire(t, a, "x")
		acquire(t, b, "x")
		assert.Equal(t, 2*time.Second, time.Since(start))
	})
	assert.Panics(t, func() { memory.New().Node("a").SetDelay(-1, 0) })
}

// TestOptionsRefuseBadValues: NewWithOptions reports a bad option's value,
// and makes no server.
func TestOptionsRefuseBadValues(t *testing.T) {
	for _, c := range []struct {
		opts []memory.Option
		says string
	}{
		{[]memory.Option{memory.WithTTLBounds(-1, 0)}, "simba/memory: WithTTLBounds: negative bound"},
		{[]memory.Option{memory.WithTTLBounds(0, -1)}, "simba/memory: WithTTLBounds: negative bound"},
		{[]memory.Option{memory.WithTTLBounds(2, 1)}, "simba/memory: WithTTLBounds: min 2ns above max 1ns"},
		{[]memory.Option{nil}, "simba/memory: nil option"},
	} {
		b, err := memory.NewWithOptions(c.opts...)
		assert.Nil(t, b)
		assert.ErrorContains(t, err, c.says)
	}
	for _, bounds := range [][2]time.Duration{{0, time.Second}, {time.Second, 0}, {time.Second, time.Second}, {0, 0}} {
		b, err := memory.NewWithOptions(memory.WithTTLBounds(bounds[0], bounds[1]))
		if assert.NoError(t, err, "bounds %v", bounds) {
			b.Close()
		}
	}
}

func TestHistoryAndStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		srv := memory.New()
		defer srv.Close()
		a := open(t, srv.Node("a"), ttl)
		b := open(t, srv.Node("b"), time.Hour)
		l1 := acquire(t, a, "x")
		time.Sleep(time.Millisecond)
		l2 := acquire(t, a, "x")
		time.Sleep(time.Millisecond)
		require.NoError(t, l2.Release(t.Context()))
		assert.ErrorIs(t, l1.Release(t.Context()), backend.ErrNotHeld)
		acquire(t, a, "x")
		acquire(t, b, "y")
		lby := acquire(t, b, "x") // queued behind a's holding until a expires
		require.NoError(t, b.Join(t.Context(), "g", backend.Member{ID: "b"}))
		_, err := b.Members(t.Context(), "g")
		require.NoError(t, err)
		_, err = b.WatchMembers(t.Context(), "g")
		require.NoError(t, err)
		require.NoError(t, b.Leave(t.Context(), "g"))
		_, err = b.KeepAlive(t.Context())
		require.NoError(t, err)
		require.NoError(t, b.Close(t.Context()))
		assert.ErrorIs(t, lby.Release(t.Context()), backend.ErrNotHeld) // not sent: b is closed

		ms := time.Millisecond
		at := func(d time.Duration) time.Time { return t0.Add(d) }
		assert.Equal(t, []memory.Grant{
			{Name: "x", Token: 1, Session: "a-1", Node: "a", Start: at(0), End: at(ms), Ended: true, Reason: "reacquired"},
			{Name: "x", Token: 2, Session: "a-1", Node: "a", Start: at(ms), End: at(2 * ms), Ended: true, Reason: "released"},
			{Name: "x", Token: 3, Session: "a-1", Node: "a", Start: at(2 * ms), End: at(ttl), Ended: true, Reason: "expired"},
			{Name: "y", Token: 4, Session: "b-1", Node: "b", Start: at(2 * ms), End: at(ttl), Ended: true, Reason: "closed"},
			{Name: "x", Token: 5, Session: "b-1", Node: "b", Start: at(ttl), End: at(ttl), Ended: true, Reason: "closed"},
		}, srv.History())
		assert.Equal(t, memory.Stats{
			Open: 2, KeepAlive: 1, Acquire: 5, Release: 2, Join: 1, Leave: 1, Members: 1, WatchMembers: 1, Close: 1,
		}, srv.Stats())
	})
}

func TestRenewalTrafficIsConstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		s := open(t, srv, ttl)
		for i := range 100 {
			acquire(t, s, "lease-"+string(rune('a'+i%26))+string(rune('a'+i/26)))
		}
		before := srv.Stats()
		for range 9 {
			time.Sleep(ttl / 3)
			_, err := s.KeepAlive(t.Context())
			require.NoError(t, err)
		}
		after := srv.Stats()
		assert.Equal(t, before.KeepAlive+9, after.KeepAlive)
		after.KeepAlive = before.KeepAlive
		assert.Equal(t, before, after, "only keep-alives while holding 100 leases")
	})
}

func TestLostNotClosedByOwnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		s := open(t, srv, ttl)
		l := acquire(t, s, "x")
		require.NoError(t, l.Release(t.Context()))
		require.NoError(t, s.Close(t.Context()))
		assert.False(t, closed(l.Lost()))
		assert.ErrorIs(t, l.Release(t.Context()), backend.ErrNotHeld)
	})
}

func TestBackendClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		a := open(t, srv.Node("a"), time.Hour)
		b := open(t, srv.Node("b"), time.Hour)
		la := acquire(t, a, "x")
		watch, err := b.WatchMembers(t.Context(), "g")
		require.NoError(t, err)
		srv.Node("b").Partition()
		c := open(t, srv.Node("c"), time.Hour)
		blocked := call(func() error { _, err := b.KeepAlive(t.Context()); return err })
		waiting := call(func() error { _, err := c.Acquire(t.Context(), "x"); return err })
		synctest.Wait()

		require.NoError(t, srv.Close())
		require.NoError(t, srv.Close())
		assert.ErrorIs(t, <-blocked, backend.ErrSessionDone)
		err = <-waiting
		assert.ErrorIs(t, err, backend.ErrSessionDone)
		assert.ErrorIs(t, err, backend.ErrClosed)

		_, err = srv.Open(t.Context(), backend.SessionOptions{TTL: ttl})
		assert.ErrorIs(t, err, backend.ErrClosed)
		_, err = srv.Node("new").Open(t.Context(), backend.SessionOptions{TTL: ttl})
		assert.ErrorIs(t, err, backend.ErrClosed)
		_, err = a.KeepAlive(t.Context())
		assert.ErrorIs(t, err, backend.ErrSessionDone)
		assert.ErrorIs(t, la.Release(t.Context()), backend.ErrNotHeld)
		assert.NoError(t, a.Close(t.Context()))
		assert.True(t, closed(a.Done()))
		assert.True(t, closed(b.Done()))
		assert.True(t, closed(watch))
		srv.ExpireSession(a.ID())
		srv.Node("a").Expire()
		time.Sleep(2 * time.Hour) // no timer fires after Close
	})
}

func TestWatchMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		a, b := open(t, srv, time.Hour), open(t, srv, time.Hour)
		ctx, cancel := context.WithCancel(t.Context())
		w1, err := a.WatchMembers(ctx, "g")
		require.NoError(t, err)
		w2, err := a.WatchMembers(t.Context(), "g")
		require.NoError(t, err)
		other, err := a.WatchMembers(t.Context(), "h")
		require.NoError(t, err)

		require.NoError(t, b.Join(t.Context(), "g", backend.Member{ID: "b", Data: []byte{1}}))
		require.NoError(t, b.Join(t.Context(), "g", backend.Member{Data: []byte{2}}))
		assert.True(t, hinted(w1))
		assert.False(t, hinted(w1), "hints coalesce")
		assert.True(t, hinted(w2))
		assert.False(t, hinted(other))
		assert.Equal(t, []backend.Member{{ID: b.ID(), Session: b.ID(), Data: []byte{2}}}, srv.Members("g"),
			"an empty ID defaults to the session ID")
		require.NoError(t, a.Leave(t.Context(), "g"))
		assert.False(t, hinted(w1), "no change, no hint")

		cancel()
		assert.True(t, closed(w1))
		require.NoError(t, b.Leave(t.Context(), "g"))
		assert.True(t, hinted(w2))

		// A watch whose ctx has already ended is refused.
		_, err = a.WatchMembers(ctx, "g")
		assert.ErrorIs(t, err, context.Canceled)

		require.NoError(t, a.Close(t.Context()))
		assert.True(t, closed(w2))
		assert.True(t, closed(other))
	})
}

// TestConcurrentUse hammers one backend from many goroutines and checks the
// server's history: tokens strictly increase and holdings of a name never
// overlap.
func TestConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		names := []string{"p", "q", "r"}
		done := make(chan struct{})
		for i := range 8 {
			n := srv.Node(string(rune('a' + i)))
			go func() {
				defer func() { done <- struct{}{} }()
				for round := range 20 {
					s, err := n.Open(t.Context(), backend.SessionOptions{TTL: 50 * time.Millisecond})
					if !assert.NoError(t, err) {
						return
					}
					ctx, cancel := context.WithTimeout(t.Context(), time.Duration(10+i)*time.Millisecond)
					watch, _ := s.WatchMembers(ctx, "g")
					_ = s.Join(ctx, "g", backend.Member{ID: n.Name()})
					l, err := s.Acquire(ctx, names[(i+round)%len(names)])
					if err == nil {
						time.Sleep(time.Duration(round%4) * 5 * time.Millisecond)
						if round%3 == 0 {
							_ = l.Release(t.Context())
						}
					}
					if round%5 == 0 {
						n.Partition()
						time.Sleep(20 * time.Millisecond)
						n.Heal()
					}
					cancel()
					if watch != nil {
						for range watch { // closed with its ctx
						}
					}
					if round%2 == 0 {
						_ = s.Close(t.Context())
					}
				}
			}()
		}
		for range 8 {
			<-done
		}
		time.Sleep(time.Second) // every session expires
		assert.Empty(t, srv.Sessions())
		last := map[string]memory.Grant{}
		for _, g := range srv.History() {
			if prev, ok := last[g.Name]; ok {
				assert.Greater(t, g.Token, prev.Token, "tokens of %q in grant order", g.Name)
			}
			require.True(t, g.Ended, "%+v", g)
			if prev, ok := last[g.Name]; ok {
				assert.False(t, g.Start.Before(prev.End), "overlapping holdings %+v and %+v", prev, g)
			}
			last[g.Name] = g
		}
		assert.NotEmpty(t, last)
	})
}

func TestInvalidInput(t *testing.T) {
	srv := memory.New()
	defer srv.Close()
	s := open(t, srv, time.Hour)
	_, err := s.Acquire(t.Context(), "bad/name")
	assert.EqualError(t, err, `simba/memory: lease invalid name "bad/name": character '/' at byte 3 (allowed: A-Z a-z 0-9 . _ -, first a letter or digit)`)
	assert.ErrorIs(t, err, backend.ErrInvalidName)
	err = s.Join(t.Context(), ".g", backend.Member{})
	assert.ErrorContains(t, err, `simba/memory: group invalid name ".g": character '.' at byte 0`)
	assert.ErrorIs(t, err, backend.ErrInvalidName)
	err = s.Join(t.Context(), "g", backend.Member{Data: make([]byte, backend.MaxMemberData+1)})
	assert.ErrorContains(t, err, "exceeds 1024")
	assert.Equal(t, memory.Stats{Open: 1}, srv.Stats(), "invalid calls are refused before they are sent")
}
