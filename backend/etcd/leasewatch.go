package etcd

import (
	"context"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseWatch tells a session's holdings that they are lost, from one
// prefix watch of <prefix>lease/ per session rather than one watch per
// holding: a held lease costs no goroutine and no watch, on the client or
// on the server.
//
// # Why no event is missed
//
// A holding created at revision r is lost by the first event on its key
// after r: a delete, or a put with another create revision or bound to
// another etcd lease. The watch starts, in Open, at the revision after the
// one that created the session's key, and every Acquire transaction comes
// later, so r is at least that revision: the watch delivers every event
// after r. What remains is the time between the transaction at r and the
// holding's registration here, while the watch goroutine may already be
// past r. Acquire therefore registers its key (expect) before it sends
// its first transaction; from then on the watch goroutine records the
// latest event on that key (keyState), and the registration of the holding
// (hold) checks it. An event processed before expect has a revision below
// the store's revision at that instant, which is below r, so it cannot
// concern the holding.
//
// When the watch breaks (compaction, cancellation by the server), one range
// read of every lease key at revision G stands for the events up to G:
// each registered key gets its state at G as an event of revision G, and
// the watch starts again at G+1.
//
// An event concerns a holding only if its revision is at least the
// holding's token (an event at the token itself is the holding's own
// creation, or a state read at that revision, and never looks lost).
type leaseWatch struct {
	mu   sync.Mutex
	over bool             // the session is over: every holding is lost
	keys map[string]*slot // by lease key: holdings and Acquire calls in flight
}

// slot is what the session has at one lease key.
type slot struct {
	held      *lease        // the holding of the key, if any
	acquiring int           // Acquire calls of the key in flight
	last      keyState      // the latest event seen while acquiring > 0
	wake      chan struct{} // closed at the next event; nil when no one waits
}

// keyState is one event on a lease key, or its state read at a revision.
type keyState struct {
	rev     int64 // the event's revision (0: none)
	deleted bool
	create  int64            // create revision, if not deleted
	lease   clientv3.LeaseID // etcd lease the key is bound to, if not deleted
}

// stateOf returns the state an event leaves its key in.
func stateOf(ev *clientv3.Event) keyState {
	if ev.Type == mvccpb.DELETE {
		return keyState{rev: ev.Kv.ModRevision, deleted: true}
	}
	return keyState{rev: ev.Kv.ModRevision, create: ev.Kv.CreateRevision, lease: clientv3.LeaseID(ev.Kv.Lease)}
}

// ends reports whether st shows that holding l of session s is over.
func (st keyState) ends(s *session, l *lease) bool {
	return st.rev >= l.token && (st.deleted || st.create != l.token || st.lease != s.lease)
}

// expect registers an Acquire of key about to send its transaction; the
// returned function unregisters it, after hold.
func (s *session) expect(key string) (done func()) {
	w := &s.lw
	w.mu.Lock()
	sl := w.keys[key]
	if sl == nil {
		sl = &slot{}
		w.keys[key] = sl
	}
	sl.acquiring++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		sl.acquiring--
		if sl.acquiring == 0 {
			sl.last = keyState{}
			if sl.held == nil {
				delete(w.keys, key)
			}
		}
	}
}

// hold registers the new holding l, between expect and its done. l is lost
// at once if the session is over or an event since expect ended it; an
// older holding of the key by this session is lost, as the key has been
// deleted since.
func (s *session) hold(l *lease) {
	w := &s.lw
	w.mu.Lock()
	var lost *lease
	sl := w.keys[l.key]
	switch {
	case w.over || s.ctx.Err() != nil || sl == nil || sl.last.ends(s, l):
		lost = l
	case sl.held != nil && sl.held.token > l.token:
		lost = l // a concurrent Acquire of the key took a newer holding
	default:
		lost, sl.held = sl.held, l
	}
	w.mu.Unlock()
	if lost != nil {
		lost.markLost()
	}
}

// awaitEvent waits until the shared watch has seen an event on key after
// revision rev, between expect and its done. It reports false when ctx
// ends or the session is over first.
//
// Acquire waits for the holder's key to go this way rather than with a
// watch of its own from rev+1: the shared watch is synced, and delivers
// the deletion as it happens, where a new watch from a revision below the
// store's (any write anywhere since rev) starts unsynced, and etcd catches
// unsynced watches up only every 100ms.
func (s *session) awaitEvent(ctx context.Context, key string, rev int64) bool {
	w := &s.lw
	for {
		w.mu.Lock()
		sl := w.keys[key]
		if w.over || sl == nil {
			w.mu.Unlock()
			return false
		}
		if sl.last.rev > rev {
			w.mu.Unlock()
			return true
		}
		if sl.wake == nil {
			sl.wake = make(chan struct{})
		}
		wake := sl.wake
		w.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
}

// unhold unregisters l, ended by its own Release.
func (s *session) unhold(l *lease) {
	w := &s.lw
	w.mu.Lock()
	defer w.mu.Unlock()
	if sl := w.keys[l.key]; sl != nil && sl.held == l {
		sl.held = nil
		if sl.acquiring == 0 {
			delete(w.keys, l.key)
		}
	}
}

// apply records the state st of key and returns the holding it ends, if
// any. w.mu is held.
func (w *leaseWatch) apply(s *session, key string, st keyState) *lease {
	sl := w.keys[key]
	if sl == nil {
		return nil
	}
	if sl.acquiring > 0 && st.rev > sl.last.rev {
		sl.last = st
		if sl.wake != nil {
			close(sl.wake)
			sl.wake = nil
		}
	}
	l := sl.held
	if l == nil || !st.ends(s, l) {
		return nil
	}
	sl.held = nil
	if sl.acquiring == 0 {
		delete(w.keys, key)
	}
	return l
}

// end marks every holding lost: the session is over.
func (w *leaseWatch) end() {
	w.mu.Lock()
	w.over = true
	var lost []*lease
	for key, sl := range w.keys {
		if sl.held != nil {
			lost = append(lost, sl.held)
			sl.held = nil
		}
		if sl.wake != nil {
			close(sl.wake)
			sl.wake = nil
		}
		if sl.acquiring == 0 {
			delete(w.keys, key)
		}
	}
	w.mu.Unlock()
	for _, l := range lost {
		l.markLost()
	}
}

// watchLeases runs the shared watch of the lease keys from revision rev,
// on a goroutine of the session, until the session is over; then every
// holding is lost.
func (s *session) watchLeases(rev int64) {
	defer s.lw.end()
	base := s.b.leaseKey("")
	for s.ctx.Err() == nil {
		ctx, cancel := context.WithCancel(s.ctx)
		s.dispatch(s.b.cli.Watch(ctx, base, clientv3.WithPrefix(), clientv3.WithRev(rev)))
		cancel()
		// The watch broke (compaction, cancellation by the server, a closed
		// client): read every lease key, and watch on from there.
		for {
			if s.ctx.Err() != nil || !s.pause(retryDelay) {
				return
			}
			if s.b.cli.Ctx().Err() != nil {
				s.end(errClientClosed)
				return
			}
			resp, err := s.b.kv.KV.Get(s.ctx, base, clientv3.WithPrefix())
			if err != nil {
				continue
			}
			s.resync(resp)
			rev = resp.Header.Revision + 1
			break
		}
	}
}

// dispatch hands the events of wch to the holdings until the watch ends.
func (s *session) dispatch(wch clientv3.WatchChan) {
	w := &s.lw
	var lost []*lease
	for resp := range wch {
		if resp.Err() != nil {
			return
		}
		w.mu.Lock()
		for _, ev := range resp.Events {
			if l := w.apply(s, string(ev.Kv.Key), stateOf(ev)); l != nil {
				lost = append(lost, l)
			}
		}
		w.mu.Unlock()
		for _, l := range lost {
			l.markLost()
		}
		clear(lost)
		lost = lost[:0]
	}
}

// resync applies the lease keys read at one revision, as events of that
// revision, to every key registered.
func (s *session) resync(resp *clientv3.GetResponse) {
	w := &s.lw
	found := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		found[string(kv.Key)] = kv
	}
	rev := resp.Header.Revision
	var lost []*lease
	w.mu.Lock()
	keys := make([]string, 0, len(w.keys))
	for key := range w.keys {
		keys = append(keys, key)
	}
	for _, key := range keys {
		st := keyState{rev: rev, deleted: true}
		if kv := found[key]; kv != nil {
			st = keyState{rev: rev, create: kv.CreateRevision, lease: clientv3.LeaseID(kv.Lease)}
		}
		if l := w.apply(s, key, st); l != nil {
			lost = append(lost, l)
		}
	}
	w.mu.Unlock()
	for _, l := range lost {
		l.markLost()
	}
}
