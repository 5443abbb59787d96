package etcd

import (
	"context"
	"runtime"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestLeaseWatchRegistration drives the shared watch's bookkeeping with
// events in the orders the network can produce, without a server.
func TestLeaseWatchRegistration(t *testing.T) {
	const me, other = clientv3.LeaseID(7), clientv3.LeaseID(8)
	newSession := func() (*session, context.CancelFunc) {
		ctx, cancel := context.WithCancelCause(context.Background())
		return &session{ctx: ctx, cancel: cancel, lease: me, lw: leaseWatch{keys: map[string]*slot{}}}, func() { cancel(nil) }
	}
	put := func(rev, create int64, l clientv3.LeaseID) keyState {
		return keyState{rev: rev, create: create, lease: l}
	}
	del := func(rev int64) keyState { return keyState{rev: rev, deleted: true} }
	// event feeds st for key k as the watch goroutine does.
	event := func(s *session, k string, st keyState) {
		s.lw.mu.Lock()
		l := s.lw.apply(s, k, st)
		s.lw.mu.Unlock()
		if l != nil {
			l.markLost()
		}
	}
	isLost := func(l *lease) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.lostClosed
	}

	cases := []struct {
		name   string
		events []keyState // seen between expect and hold (token 10)
		after  []keyState // seen after hold
		lost   bool
	}{
		{name: "nothing", lost: false},
		{name: "own creation", events: []keyState{put(10, 10, me)}, lost: false},
		{name: "older events", events: []keyState{put(5, 5, other), del(9)}, lost: false},
		{name: "deleted before the registration", events: []keyState{put(10, 10, me), del(11)}, lost: true},
		{name: "taken over before the registration", events: []keyState{del(11), put(12, 12, other)}, lost: true},
		{name: "rebound before the registration", events: []keyState{put(11, 10, other)}, lost: true},
		{name: "value rewritten, still ours", events: []keyState{put(11, 10, me)}, lost: false},
		{name: "deleted after", after: []keyState{del(11)}, lost: true},
		{name: "late old event after", after: []keyState{del(9)}, lost: false},
		{name: "state read at the token", after: []keyState{put(10, 10, me)}, lost: false},
		{name: "state read: gone", after: []keyState{del(12)}, lost: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, end := newSession()
			defer end()
			done := s.expect("k")
			for _, st := range c.events {
				event(s, "k", st)
			}
			l := &lease{s: s, key: "k", name: "k", token: 10}
			s.hold(l)
			done()
			for _, st := range c.after {
				event(s, "k", st)
			}
			if got := isLost(l); got != c.lost {
				t.Errorf("lost = %v, want %v", got, c.lost)
			}
			if !c.lost && len(s.lw.keys) != 1 || c.lost && len(s.lw.keys) != 0 {
				t.Errorf("%d keys registered", len(s.lw.keys))
			}
		})
	}

	t.Run("concurrent acquires of one key", func(t *testing.T) {
		s, end := newSession()
		defer end()
		done1, done2 := s.expect("k"), s.expect("k")
		newer := &lease{s: s, key: "k", name: "k", token: 12}
		older := &lease{s: s, key: "k", name: "k", token: 10}
		s.hold(newer) // registered first
		s.hold(older)
		done1()
		done2()
		if !isLost(older) || isLost(newer) {
			t.Errorf("older lost %v, newer lost %v; want true, false", isLost(older), isLost(newer))
		}
		third := &lease{s: s, key: "k", name: "k", token: 14}
		done3 := s.expect("k")
		s.hold(third)
		done3()
		if !isLost(newer) || isLost(third) {
			t.Errorf("replaced holding lost %v, new one lost %v; want true, false", isLost(newer), isLost(third))
		}
	})

	t.Run("session over", func(t *testing.T) {
		s, end := newSession()
		done := s.expect("a")
		a := &lease{s: s, key: "a", name: "a", token: 10}
		s.hold(a)
		done()
		end()
		s.lw.end()
		done = s.expect("b")
		b := &lease{s: s, key: "b", name: "b", token: 11}
		s.hold(b)
		done()
		if !isLost(a) || !isLost(b) {
			t.Errorf("lost: a %v, b %v; want both", isLost(a), isLost(b))
		}
		if len(s.lw.keys) != 0 {
			t.Errorf("%d keys registered", len(s.lw.keys))
		}
	})

	t.Run("released", func(t *testing.T) {
		s, end := newSession()
		defer end()
		done := s.expect("k")
		l := &lease{s: s, key: "k", name: "k", token: 10}
		s.hold(l)
		done()
		l.released = true
		s.unhold(l)
		event(s, "k", del(11))
		if isLost(l) || len(s.lw.keys) != 0 {
			t.Errorf("lost %v, %d keys registered; want false, 0", isLost(l), len(s.lw.keys))
		}
	})
}

// TestAwaitEvent checks the wait of an Acquire on the shared watch: events
// at or below the revision its transaction saw do not wake it, a later one
// does, and the end of the session or of ctx ends the wait.
func TestAwaitEvent(t *testing.T) {
	newSession := func() *session {
		ctx, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		return &session{ctx: ctx, cancel: cancel, lease: 7, lw: leaseWatch{keys: map[string]*slot{}}}
	}
	event := func(s *session, st keyState) {
		s.lw.mu.Lock()
		s.lw.apply(s, "k", st)
		s.lw.mu.Unlock()
	}
	wait := func(s *session, ctx context.Context, rev int64) <-chan bool {
		res := make(chan bool, 1)
		go func() { res <- s.awaitEvent(ctx, "k", rev) }()
		return res
	}
	waiting := func(s *session) bool {
		s.lw.mu.Lock()
		defer s.lw.mu.Unlock()
		return s.lw.keys["k"].wake != nil
	}
	// settle waits until the waiter has parked on the slot.
	settle := func(s *session) {
		for !waiting(s) {
			runtime.Gosched()
		}
	}

	t.Run("woken by a later event only", func(t *testing.T) {
		s := newSession()
		done := s.expect("k")
		defer done()
		res := wait(s, context.Background(), 20)
		settle(s)
		event(s, keyState{rev: 19, deleted: true}) // older than the transaction
		event(s, keyState{rev: 20, create: 20, lease: 8})
		select {
		case <-res:
			t.Fatal("woken by an event the transaction had seen")
		default:
		}
		settle(s)
		event(s, keyState{rev: 21, deleted: true})
		if !<-res {
			t.Error("awaitEvent = false after a later event; want true")
		}
	})
	t.Run("an event seen before the wait counts", func(t *testing.T) {
		s := newSession()
		done := s.expect("k")
		defer done()
		event(s, keyState{rev: 21, deleted: true})
		if !<-wait(s, context.Background(), 20) {
			t.Error("awaitEvent = false; want true")
		}
	})
	t.Run("session over", func(t *testing.T) {
		s := newSession()
		done := s.expect("k")
		defer done()
		res := wait(s, context.Background(), 20)
		settle(s)
		s.lw.end()
		if <-res {
			t.Error("awaitEvent = true after the session ended; want false")
		}
	})
	t.Run("ctx ends", func(t *testing.T) {
		s := newSession()
		done := s.expect("k")
		defer done()
		ctx, cancel := context.WithCancel(context.Background())
		res := wait(s, ctx, 20)
		settle(s)
		cancel()
		if <-res {
			t.Error("awaitEvent = true after ctx ended; want false")
		}
	})
}
