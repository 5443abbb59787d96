package simba_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
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
)

// Bad input found by review: each is refused with a clear error, or
// bounded, instead of panicking, spinning or growing without bound.

func TestHandOffLimitRefusesBadRates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		fn := func(ctx context.Context, _ *simba.Term, _ int) error { <-ctx.Done(); return nil }
		for _, tc := range []struct {
			rate  float64
			burst int
		}{
			{math.NaN(), 1},
			{math.Inf(1), 1},
			{math.Inf(-1), 1},
			{0, 1},
			{-1, 1},
			{1e-12, 1},                        // a token every 31,700 years
			{(1.0 / 3600) / 2, 1},             // just under the minimum
			{math.SmallestNonzeroFloat64, 10}, // a denormal
			{1, 0},
			{1, -1},
		} {
			task, err := c.Group("g", 4, simba.WithHandOffLimit(tc.rate, tc.burst)).RunWhileLeader(fn)
			if !assert.ErrorIs(t, err, simba.ErrInvalidArgument, "rate %v, burst %d", tc.rate, tc.burst) {
				task.Close()
				continue
			}
			assert.True(t, strings.HasPrefix(err.Error(), "simba: "), err.Error())
		}
		for _, rate := range []float64{(1.0 / 3600), 1, 1e300} {
			task, err := c.Group("g", 4, simba.WithHandOffLimit(rate, 1<<40)).RunWhileLeader(fn)
			require.NoError(t, err, "rate %v", rate)
			require.NoError(t, task.Close())
		}
		closeAll(t, c)
	})
}

func TestGroupRefusesTooManyPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		fn := func(ctx context.Context, _ *simba.Term, _ int) error { <-ctx.Done(); return nil }
		assert.GreaterOrEqual(t, simba.MaxPartitions, 10000, "the scale runs use 10,000 partitions")
		// Accepted, these crash the process: the assignment of the
		// partitions runs out of memory on a goroutine of the client's.
		for _, n := range []int{1 << 40, math.MaxInt, simba.MaxPartitions + 1} {
			task, err := c.Group("g", n).RunWhileLeader(fn)
			if !assert.ErrorIs(t, err, simba.ErrInvalidArgument, "%d partitions", n) {
				task.Close()
				continue
			}
			assert.True(t, strings.HasPrefix(err.Error(), "simba: "), err.Error())
			assert.Contains(t, err.Error(), "from 1 to 65536")
			_, err = c.Group("g", n).Schedule(simba.FixedDelay(time.Second), fn)
			assert.ErrorIs(t, err, simba.ErrInvalidArgument, "%d partitions", n)
		}
		closeAll(t, c)
	})
}

func TestNewRefusesTTLBelowMinTTL(t *testing.T) {
	b := memory.New()
	defer b.Close()
	for _, ttl := range []time.Duration{1, time.Millisecond, 100 * time.Millisecond, simba.MinTTL - 1} {
		c, err := simba.New(b, simba.WithTTL(ttl))
		if !assert.ErrorIs(t, err, simba.ErrInvalidArgument, "TTL %v", ttl) {
			c.Close()
			continue
		}
		assert.True(t, strings.HasPrefix(err.Error(), "simba: "), err.Error())
		assert.Contains(t, err.Error(), "at least")
	}
	c, err := simba.New(b, simba.WithTTL(simba.MinTTL))
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// grantingBackend is a memory node whose sessions report the TTLs given
// instead of the ones granted: a misbehaving backend. Past maxCalls Opens or
// KeepAlives it blocks them until their ctx ends, so that a client spinning
// on them is reported instead of hanging the test.
type grantingBackend struct {
	backend.Backend
	openTTL  time.Duration // what Session.TTL reports
	renewTTL time.Duration // what KeepAlive returns; 0: the granted one
	maxCalls int64

	opens, renewals atomic.Int64
}

func (b *grantingBackend) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	if b.opens.Add(1) > b.maxCalls {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	s, err := b.Backend.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return &grantingSession{Session: s, b: b}, nil
}

type grantingSession struct {
	backend.Session
	b *grantingBackend
}

func (s *grantingSession) TTL() time.Duration { return s.b.openTTL }

func (s *grantingSession) KeepAlive(ctx context.Context) (time.Duration, error) {
	if s.b.renewals.Add(1) > s.b.maxCalls {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	ttl, err := s.Session.KeepAlive(ctx)
	if err == nil && s.b.renewTTL != 0 {
		ttl = s.b.renewTTL
	}
	return ttl, err
}

// logRecorder keeps the messages of the records logged at level or above,
// with the time each was logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
	at   []time.Time
}

func (r *logRecorder) logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.msgs = append(r.msgs, string(p))
		r.at = append(r.at, time.Now())
		return len(p), nil
	}), &slog.HandlerOptions{Level: level}))
}

// count returns the number of records whose text contains s.
func (r *logRecorder) count(s string) int { return len(r.times(s)) }

// times returns when the records whose text contains s were logged.
func (r *logRecorder) times(s string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for i, m := range r.msgs {
		if strings.Contains(m, s) {
			out = append(out, r.at[i])
		}
	}
	return out
}

// text returns every record kept, one per line.
func (r *logRecorder) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestSessionWithTooSmallGrantedTTLBacksOff(t *testing.T) {
	for _, granted := range []time.Duration{0, -time.Second, 1, simba.MinTTL - 1} {
		t.Run(granted.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := memory.New()
				defer srv.Close()
				b := &grantingBackend{Backend: srv.Node("a"), openTTL: granted, maxCalls: 1000}
				h := newHistory()
				var logs logRecorder
				c, err := simba.New(b, simba.WithTTL(testTTL), simba.WithEventHandler(h.Event), simba.WithLogger(logs.logger(slog.LevelWarn)))
				require.NoError(t, err)
				time.Sleep(10 * time.Second)
				opens := b.opens.Load()
				// Backing off to a renewal period (1s): 10ms, 20ms, …,
				// 640ms, then every second, each wait jittered down to no
				// less than half: at most 7 + 9.4s/0.5s = 26 opens.
				assert.LessOrEqual(t, opens, int64(26), "sessions opened in 10s")
				assert.GreaterOrEqual(t, opens, int64(5), "sessions opened in 10s: the keeper still retries")
				assert.Empty(t, eventsOf[simba.SessionStarted](h), "no session is used")
				assert.Equal(t, "", c.SessionID())
				assert.Positive(t, logs.count("level=ERROR"), "the unusable TTL is logged as an error")
				assert.Positive(t, logs.count("granted"))
				require.NoError(t, c.Close())
			})
		})
	}
}

func TestRenewalWithTooSmallGrantedTTLBacksOff(t *testing.T) {
	for _, granted := range []time.Duration{-time.Second, 1, simba.MinTTL - 1} {
		t.Run(granted.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := memory.New()
				defer srv.Close()
				b := &grantingBackend{Backend: srv.Node("a"), openTTL: testTTL, renewTTL: granted, maxCalls: 1000}
				h := newHistory()
				var logs logRecorder
				c, err := simba.New(b, simba.WithTTL(testTTL), simba.WithEventHandler(h.Event), simba.WithLogger(logs.logger(slog.LevelWarn)))
				require.NoError(t, err)
				time.Sleep(10 * time.Second)
				// No renewal extends the session, so each lives until
				// its first deadline (2.7s), renewed with backoff.
				assert.LessOrEqual(t, b.renewals.Load(), int64(40), "renewals in 10s")
				assert.Len(t, eventsOf[simba.SessionLost](h), 3, "each session ends at its first deadline")
				assert.Positive(t, logs.count("granted"), "the unusable TTL is logged")
				require.NoError(t, c.Close())
			})
		})
	}
}

func TestEnsureValidStepsDoNotOverflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		_, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait()
		require.Len(t, h.Terms(), 1)
		term := h.Terms()[0]
		require.NoError(t, term.EnsureValid(time.Second))
		for _, steps := range [][]time.Duration{
			{math.MaxInt64, math.MaxInt64},
			{math.MaxInt64, 1},
			{math.MaxInt64 / 2, math.MaxInt64/2 + 2},
			{time.Second, math.MaxInt64, time.Second},
		} {
			assert.ErrorIs(t, term.EnsureValid(steps...), simba.ErrTermExpired, "steps %v", steps)
		}
		closeAll(t, c)
	})
}

// closeWithin calls c.Close and waits for it at most d of (virtual) time;
// it returns how long Close took, and whether it returned in time. If it
// did not, unblock is called (so that the test can end) and Close awaited.
func closeWithin(t *testing.T, c *simba.Client, d time.Duration, closed *atomic.Bool, unblock func()) (time.Duration, bool) {
	t.Helper()
	start := time.Now()
	var took time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		assert.NoError(t, c.Close())
		took = time.Since(start)
		if closed != nil {
			closed.Store(true)
		}
	}()
	select {
	case <-done:
		return took, true
	case <-time.After(d):
		t.Errorf("Close did not return within %v", d)
		unblock()
		<-done
		return took, false
	}
}

func TestCloseDoesNotWaitForeverForABlockedEventHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		var logs logRecorder
		release := make(chan struct{})
		var closed atomic.Bool
		var late atomic.Int64 // handler calls begun after Close returned
		block := func(e simba.Event) {
			if closed.Load() {
				late.Add(1)
			}
			if _, ok := e.(simba.Elected); ok {
				<-release
			}
		}
		c, _ := node(t, b, "a", h, simba.WithEventHandler(block), simba.WithLogger(logs.logger(slog.LevelWarn)))
		_, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait() // the handler blocks on Elected

		took, ok := closeWithin(t, c, time.Minute, &closed, func() { close(release) })
		if ok {
			assert.Equal(t, 5*time.Second, took, "Close waits for a blocked handler for 5s, as documented")
			assert.Equal(t, 1, logs.count("still running"), "the abandoned handler is logged")
			close(release)
		}
		synctest.Wait() // the abandoned handler returns, its goroutine ends
		assert.Zero(t, late.Load(), "no handler call after Close returned")
		_, _, held := b.Holder("e")
		assert.False(t, held, "the lease was handed off")
	})
}

// A handler stops its client with Stop, which returns at once; Close,
// elsewhere, then waits for all of it.
func TestStopFromAnEventHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		var c *simba.Client
		var closed atomic.Bool
		var late atomic.Int64
		returned := make(chan time.Duration, 1)
		closeOnElected := func(e simba.Event) {
			if closed.Load() {
				late.Add(1)
			}
			if _, ok := e.(simba.Elected); ok {
				start := time.Now()
				c.Stop()
				returned <- time.Since(start)
			}
		}
		c, _ = node(t, b, "a", h, simba.WithEventHandler(closeOnElected))
		_, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		select {
		case took := <-returned:
			assert.Zero(t, took, "Stop from a handler waits for nothing")
		case <-time.After(time.Minute):
			t.Fatal("Stop called from an event handler did not return")
		}
		require.NoError(t, c.Close(), "Close waits for the closing Stop began")
		closed.Store(true)
		synctest.Wait()
		assert.Zero(t, late.Load(), "no handler call after Close returned")
		_, _, held := b.Holder("e")
		assert.False(t, held, "the lease was handed off")
		for _, term := range h.Terms() {
			assert.Error(t, term.EnsureValid())
		}
	})
}

// failingRelease is a memory node whose leases cannot be released (a
// transient error, every time) until healed.
type failingRelease struct {
	backend.Backend
	healed atomic.Bool
}

var errReleaseRefused = errors.New("release refused (test)")

func (b *failingRelease) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	s, err := b.Backend.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return &failingReleaseSession{Session: s, b: b}, nil
}

type failingReleaseSession struct {
	backend.Session
	b *failingRelease
}

func (s *failingReleaseSession) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	l, err := s.Session.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return &failingReleaseLease{Lease: l, b: s.b}, nil
}

type failingReleaseLease struct {
	backend.Lease
	b *failingRelease
}

func (l *failingReleaseLease) Release(ctx context.Context) error {
	if !l.b.healed.Load() {
		return errReleaseRefused
	}
	return l.Lease.Release(ctx)
}

func TestCloseBoundedWhenReleaseKeepsFailing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		fb := &failingRelease{Backend: srv.Node("a")}
		h := newHistory()
		var logs logRecorder
		c, err := simba.New(fb, simba.WithTTL(testTTL), simba.WithEventHandler(h.Event), simba.WithLogger(logs.logger(slog.LevelWarn)))
		require.NoError(t, err)
		_, err = c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		time.Sleep(1500 * time.Millisecond) // renewed at 1s: the deadline is 3.7s
		require.Len(t, h.Terms(), 1)

		took, ok := closeWithin(t, c, time.Minute, nil, func() { fb.healed.Store(true) })
		if ok {
			assert.Equal(t, testTTL, took, "release retried for one TTL, no longer")
			assert.Positive(t, logs.count("goes with the session"), "giving up is logged")
		}
		_, _, held := srv.Holder("e")
		assert.False(t, held, "the lease went with the session Close ended")
	})
}

func TestStopBoundedWhenReleaseKeepsFailing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memory.New()
		defer srv.Close()
		fb := &failingRelease{Backend: srv.Node("a")}
		h := newHistory()
		var logs logRecorder
		c, err := simba.New(fb, simba.WithTTL(testTTL), simba.WithEventHandler(h.Event), simba.WithLogger(logs.logger(slog.LevelWarn)))
		require.NoError(t, err)
		defer c.Close()
		task, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		time.Sleep(1500 * time.Millisecond)
		first := c.SessionID()

		start := time.Now()
		task.Stop()
		select {
		case <-task.Done():
			assert.Equal(t, testTTL, time.Since(start), "release retried for one TTL")
		case <-time.After(time.Minute):
			t.Error("Stop did not complete")
			fb.healed.Store(true)
			<-task.Done()
		}
		synctest.Wait()
		// The session that held the lease, renewed meanwhile, was ended so
		// that the lease goes with it, at the deadline it had reached (the
		// runs of its terms were promised that much); the client has a new
		// one.
		ended := time.Now()
		_, _, held := srv.Holder("e")
		assert.True(t, held, "the lease is held until the ended session's deadline")
		time.Sleep(testTTL)
		synctest.Wait()
		holder, _, held := srv.Holder("e")
		assert.False(t, held, "the lease is free (held by %q)", holder)
		for _, g := range srv.History() {
			if g.Name == "e" && g.Ended {
				assert.Less(t, g.End.Sub(ended), testTTL, "freed at the old deadline, within a TTL")
				assert.Positive(t, g.End.Sub(ended), "not freed before the old deadline")
			}
		}
		assert.NotEqual(t, first, c.SessionID())
		assert.Positive(t, logs.count("ending the session"), "ending the session is logged")
		lost := eventsOf[simba.SessionLost](h)
		if assert.Len(t, lost, 1) {
			assert.ErrorIs(t, lost[0].Err, errReleaseRefused)
		}

		// The election can start again and win on the new session.
		fb.healed.Store(true)
		task, err = c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait()
		assert.Len(t, h.Terms(), 2)
		require.NoError(t, c.Close())
	})
}
