package etcd

import (
	"context"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend/kit/lost"
)

const me, other = clientv3.LeaseID(7), clientv3.LeaseID(8)

// The candidacy keys of the lease "k" in these tests, under base "": this
// session's, and two others'.
const (
	mine = "k/me"
	keyA = "k/a"
	keyB = "k/b"
)

func testSession(t *testing.T) *session {
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	return &session{ctx: ctx, cancel: cancel, lease: me, lw: leaseWatch{names: map[string]*slot{}}}
}

func put(rev, create int64, l clientv3.LeaseID) keyState {
	return keyState{rev: rev, create: create, lease: l}
}

func del(rev int64) keyState { return keyState{rev: rev, deleted: true} }

// event feeds st for key (of the lease "k") as the watch goroutine does.
func event(s *session, key string, st keyState) {
	s.lw.mu.Lock()
	l := s.lw.apply(s, "k", key, st)
	s.lw.mu.Unlock()
	if l != nil {
		l.markLost()
	}
}

func isLost(l *lease) bool {
	select {
	case <-l.Lost():
		return true
	default:
		return false
	}
}

func isDone(wt *waiter) bool {
	select {
	case <-wt.done:
		return true
	default:
		return false
	}
}

// acquireAt plays an Acquire of "k" whose transaction created the
// candidacy at token with no older one, the events between expect and the
// transaction's answer being seen first: the holding it returns.
func acquireAt(s *session, token int64, events ...keyState) *lease {
	done := s.expect("k", mine)
	defer done()
	for _, st := range events {
		event(s, mine, st)
	}
	wt := s.queue("k", token, map[string]int64{})
	l := &lease{s: s, key: mine, name: "k", token: token, sig: lost.New()}
	s.hold(l, wt)
	return l
}

// TestLeaseWatchRegistration drives the shared watch's bookkeeping of a
// holding with events in the orders the network can produce, without a
// server.
func TestLeaseWatchRegistration(t *testing.T) {
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
		{name: "recreated before the registration", events: []keyState{del(11), put(12, 12, other)}, lost: true},
		{name: "rebound before the registration", events: []keyState{put(11, 10, other)}, lost: true},
		{name: "value rewritten, still ours", events: []keyState{put(11, 10, me)}, lost: false},
		{name: "deleted after", after: []keyState{del(11)}, lost: true},
		{name: "late old event after", after: []keyState{del(9)}, lost: false},
		{name: "state read at the token", after: []keyState{put(10, 10, me)}, lost: false},
		{name: "state read: gone", after: []keyState{del(12)}, lost: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := testSession(t)
			l := acquireAt(s, 10, c.events...)
			for _, st := range c.after {
				event(s, mine, st)
			}
			if got := isLost(l); got != c.lost {
				t.Errorf("lost = %v, want %v", got, c.lost)
			}
			if !c.lost && len(s.lw.names) != 1 || c.lost && len(s.lw.names) != 0 {
				t.Errorf("%d names registered", len(s.lw.names))
			}
		})
	}

	t.Run("events of other candidacies", func(t *testing.T) {
		s := testSession(t)
		l := acquireAt(s, 10)
		event(s, keyA, put(11, 11, other))
		event(s, keyA, del(12))
		if isLost(l) {
			t.Error("the holding is lost by another candidacy's events")
		}
	})

	t.Run("re-acquire", func(t *testing.T) {
		s := testSession(t)
		first := acquireAt(s, 10)
		// The second Acquire deletes the first candidacy, then queues anew.
		second := acquireAt(s, 12, del(11))
		if !isLost(first) || isLost(second) {
			t.Errorf("first lost %v, second lost %v; want true, false", isLost(first), isLost(second))
		}
	})

	t.Run("session over", func(t *testing.T) {
		s := testSession(t)
		a := acquireAt(s, 10)
		s.cancel(nil)
		s.lw.end()
		b := acquireAt(s, 11)
		if !isLost(a) || !isLost(b) {
			t.Errorf("lost: a %v, b %v; want both", isLost(a), isLost(b))
		}
		if len(s.lw.names) != 0 {
			t.Errorf("%d names registered", len(s.lw.names))
		}
	})

	t.Run("released", func(t *testing.T) {
		s := testSession(t)
		l := acquireAt(s, 10)
		l.sig.Released()
		s.unhold(l)
		event(s, mine, del(11))
		if isLost(l) || len(s.lw.names) != 0 {
			t.Errorf("lost %v, %d names registered; want false, 0", isLost(l), len(s.lw.names))
		}
	})
}

// TestQueueOlderSet: the older candidacies a transaction read are counted
// down by the deletions the watch delivers after the transaction's
// revision, whether they came before the waiter was queued or after; an
// event at or below the revision, or on a newer candidacy, changes nothing.
func TestQueueOlderSet(t *testing.T) {
	t.Run("deletions before and after queue", func(t *testing.T) {
		s := testSession(t)
		done := s.expect("k", mine)
		defer done()
		event(s, keyA, del(11)) // after the transaction at 10
		event(s, keyB, del(9))  // an earlier incarnation of keyB
		wt := s.queue("k", 10, map[string]int64{keyA: 5, keyB: 7})
		if isDone(wt) {
			t.Fatal("turn came with keyB still there")
		}
		if _, ok := wt.older[keyA]; ok || len(wt.older) != 1 {
			t.Fatalf("older set %v, want only keyB", wt.older)
		}
		event(s, "k/c", put(12, 12, other)) // a newer candidacy
		event(s, keyB, put(13, 7, other))   // keyB's value rewritten
		if isDone(wt) {
			t.Fatal("turn came by a newer candidacy's creation or a rewrite")
		}
		event(s, keyB, del(14))
		if !isDone(wt) {
			t.Fatal("turn did not come when the last older candidacy went")
		}
		if holds, gone, _ := s.turn(wt); !holds || gone {
			t.Errorf("turn: holds %v, gone %v; want true, false", holds, gone)
		}
		l := &lease{s: s, key: mine, name: "k", token: 10, sig: lost.New()}
		s.hold(l, wt)
		if isLost(l) {
			t.Error("the holding is lost")
		}
	})
	t.Run("recreated older key counts as gone", func(t *testing.T) {
		s := testSession(t)
		done := s.expect("k", mine)
		defer done()
		wt := s.queue("k", 10, map[string]int64{keyA: 5})
		event(s, keyA, put(15, 15, other)) // deleted and recreated, the delete compacted away
		if !isDone(wt) {
			t.Error("turn did not come")
		}
	})
	t.Run("own candidacy deleted while waiting", func(t *testing.T) {
		s := testSession(t)
		done := s.expect("k", mine)
		defer done()
		wt := s.queue("k", 10, map[string]int64{keyA: 5})
		event(s, mine, del(12))
		if holds, gone, superseded := s.turn(wt); !isDone(wt) || holds || !gone || superseded {
			t.Errorf("done %v, holds %v, gone %v, superseded %v; want true, false, true, false", isDone(wt), holds, gone, superseded)
		}
		s.dequeue("k", wt)
	})
	t.Run("own candidacy replaced by a concurrent Acquire", func(t *testing.T) {
		s := testSession(t)
		done := s.expect("k", mine)
		defer done()
		wt := s.queue("k", 10, map[string]int64{keyA: 5})
		event(s, mine, del(12))
		event(s, mine, put(13, 13, me))
		if _, gone, superseded := s.turn(wt); !gone || !superseded {
			t.Errorf("gone %v, superseded %v; want both", gone, superseded)
		}
		s.dequeue("k", wt)
	})
	t.Run("own candidacy gone before queue", func(t *testing.T) {
		s := testSession(t)
		done := s.expect("k", mine)
		defer done()
		event(s, mine, del(11))
		wt := s.queue("k", 10, map[string]int64{keyA: 5})
		if _, gone, _ := s.turn(wt); !isDone(wt) || !gone {
			t.Error("a candidacy deleted before queue is not seen gone")
		}
		s.dequeue("k", wt)
	})
	t.Run("session over", func(t *testing.T) {
		s := testSession(t)
		done := s.expect("k", mine)
		defer done()
		wt := s.queue("k", 10, map[string]int64{keyA: 5})
		s.cancel(nil)
		s.lw.end()
		if holds, _, _ := s.turn(wt); !isDone(wt) || holds {
			t.Errorf("done %v, holds %v after the session ended; want true, false", isDone(wt), holds)
		}
		s.dequeue("k", wt)
	})
	t.Run("unregistered when done", func(t *testing.T) {
		s := testSession(t)
		done := s.expect("k", mine)
		wt := s.queue("k", 10, map[string]int64{keyA: 5})
		s.dequeue("k", wt)
		done()
		if len(s.lw.names) != 0 {
			t.Errorf("%d names registered", len(s.lw.names))
		}
	})
}

// rangeAt is a read of candidacy keys at revision rev.
func rangeAt(rev int64, kvs ...*mvccpb.KeyValue) *clientv3.GetResponse {
	return &clientv3.GetResponse{Header: &etcdserverpb.ResponseHeader{Revision: rev}, Kvs: kvs}
}

func kv(key string, create int64, l clientv3.LeaseID) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), CreateRevision: create, ModRevision: create, Lease: int64(l)}
}

// TestResyncRecomputesOlderSet: after the watch broke, the read of the
// lease keys at G replaces the events up to G: a waiter keeps only the
// older candidacies the read shows, an Acquire whose transaction is still
// on its way takes the read into account when it is queued (if its
// revision is below G), and a holding absent from the read is lost.
func TestResyncRecomputesOlderSet(t *testing.T) {
	t.Run("waiting", func(t *testing.T) {
		s := testSession(t)
		done := s.expect("k", mine)
		defer done()
		wt := s.queue("k", 10, map[string]int64{keyA: 5, keyB: 7})
		s.resync("", rangeAt(20, kv(keyB, 7, other), kv(mine, 10, me), kv("other/x", 3, other)))
		if isDone(wt) || len(wt.older) != 1 || wt.older[keyB] != 7 {
			t.Fatalf("after the first read: done %v, older %v; want keyB left", isDone(wt), wt.older)
		}
		s.resync("", rangeAt(30, kv(mine, 10, me)))
		if holds, gone, _ := s.turn(wt); !holds || gone {
			t.Errorf("after the second read: holds %v, gone %v; want true, false", holds, gone)
		}
	})
	t.Run("own candidacy missing from the read", func(t *testing.T) {
		s := testSession(t)
		done := s.expect("k", mine)
		defer done()
		wt := s.queue("k", 10, map[string]int64{keyA: 5})
		s.resync("", rangeAt(20, kv(keyA, 5, other)))
		if _, gone, _ := s.turn(wt); !gone {
			t.Error("not gone")
		}
		s.dequeue("k", wt)
	})
	t.Run("transaction on its way", func(t *testing.T) {
		s := testSession(t)
		done := s.expect("k", mine)
		defer done()
		s.resync("", rangeAt(20, kv(keyB, 7, other), kv(mine, 15, me)))
		// The transaction at 15 read keyA and keyB; the read at 20 shows
		// that keyA went after it.
		wt := s.queue("k", 15, map[string]int64{keyA: 5, keyB: 7})
		if isDone(wt) || len(wt.older) != 1 || wt.older[keyB] != 7 {
			t.Fatalf("done %v, older %v; want keyB left", isDone(wt), wt.older)
		}
		s.dequeue("k", wt)
		// A transaction at 25, after the read: the read says nothing of it.
		wt = s.queue("k", 25, map[string]int64{keyA: 22})
		if isDone(wt) || len(wt.older) != 1 {
			t.Fatalf("done %v, older %v; want keyA left", isDone(wt), wt.older)
		}
		s.dequeue("k", wt)
	})
	t.Run("holding", func(t *testing.T) {
		s := testSession(t)
		kept := acquireAt(s, 10)
		s.resync("", rangeAt(20, kv(mine, 10, me)))
		if isLost(kept) {
			t.Fatal("a holding the read shows is lost")
		}
		s.resync("", rangeAt(30))
		if !isLost(kept) {
			t.Error("a holding missing from the read is not lost")
		}
	})
}

func TestCandidacyName(t *testing.T) {
	for _, c := range []struct {
		key, name string
		ok        bool
	}{
		{"/p/lease/x/00ab", "x", true},
		{"/p/lease/x", "", false},  // not a candidacy (an older layout)
		{"/p/lease/x/", "", false}, // no session ID
		{"/p/lease//00ab", "", false},
	} {
		name, ok := candidacyName("/p/lease/", c.key)
		if ok != c.ok || ok && name != c.name {
			t.Errorf("candidacyName(%q) = %q, %v; want %q, %v", c.key, name, ok, c.name, c.ok)
		}
	}
}
