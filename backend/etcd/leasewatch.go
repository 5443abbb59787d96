package etcd

import (
	"context"
	"slices"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseWatch follows a session's candidacies, from one prefix watch of
// <prefix>lease/ per session rather than one watch per candidacy: it tells
// a waiting Acquire when the candidacies older than its own are gone, and
// a holding that it is lost. A held or waiting lease costs no goroutine
// and no watch, on the client or on the server.
//
// # Why no event is missed
//
// A candidacy created at revision r holds its name when every candidacy of
// the name created before r is gone, and a holding created at r is lost by
// the first event on its key after r: a delete, or a put with another
// create revision or bound to another etcd lease. The watch starts, in
// Open, at the revision after the one that created the session's key, and
// every Acquire transaction comes later, so r is at least that revision:
// the watch delivers every event after r. What remains is the time between
// the transaction at r and the registration of its outcome here (queue),
// while the watch goroutine may already be past r. Acquire therefore
// registers the name (expect) before it sends its first transaction; from
// then on the watch goroutine records the latest event on each key of the
// name (slot.last), and queue takes them into account. An event processed
// before expect has a revision below the store's revision at that instant,
// which is below r, so it cannot be the deletion of a candidacy that the
// transaction at r saw, nor concern the new candidacy.
//
// When the watch breaks (compaction, cancellation by the server), one range
// read of every lease key at revision G stands for the events up to G: each
// waiting Acquire keeps, of its older candidacies, those the read shows;
// each candidacy of the session is checked against the read; the name's
// keys at G are kept for the Acquire calls whose transactions are on their
// way (slot.snap); and the watch starts again at G+1.
//
// An event concerns a candidacy only if its revision is above the
// candidacy's creation (an event at the creation itself is the candidacy's
// own, or a state read at that revision, and never looks like its end).
type leaseWatch struct {
	mu    sync.Mutex
	over  bool             // the session is over: every holding is lost
	names map[string]*slot // by lease name: holdings and Acquire calls in flight
}

// slot is what the session has for one lease name.
type slot struct {
	key       string              // the session's candidacy key for the name
	held      *lease              // the holding of the name, if any
	acquiring int                 // Acquire calls of the name in flight
	last      map[string]keyState // while acquiring > 0: the latest event on each key of the name
	snap      *snapshot           // while acquiring > 0: the name's keys at the latest resync
	waiters   []*waiter           // candidacies waiting for their turn
}

// snapshot is the candidacies of a name read at a revision: create
// revisions by key.
type snapshot struct {
	rev  int64
	keys map[string]int64
}

// waiter is a candidacy of the session that waits for the older ones of
// its name to go.
type waiter struct {
	token int64            // the candidacy's create revision
	older map[string]int64 // the older candidacies not yet seen gone: create revisions by key
	// done is closed when older is empty, the candidacy itself is gone
	// (gone), or the session is over.
	done       chan struct{}
	closed     bool
	gone       bool
	superseded bool // gone, replaced by a newer candidacy of this session
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

// ends reports whether st shows that the candidacy of session s created at
// token is over.
func (st keyState) ends(s *session, token int64) bool {
	return st.rev > token && (st.deleted || st.create != token || st.lease != s.lease)
}

// removes reports whether st shows that the candidacy created at create
// (someone's, older than one created at after) is gone.
func (st keyState) removes(create, after int64) bool {
	return st.rev > after && (st.deleted || st.create != create)
}

// expect registers an Acquire of name about to send its transaction, key
// being the session's candidacy key for it; the returned function
// unregisters it, after queue, hold and dequeue.
func (s *session) expect(name, key string) (done func()) {
	w := &s.lw
	w.mu.Lock()
	sl := w.names[name]
	if sl == nil {
		sl = &slot{key: key}
		w.names[name] = sl
	}
	if sl.acquiring == 0 {
		sl.last = make(map[string]keyState)
	}
	sl.acquiring++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		sl.acquiring--
		if sl.acquiring == 0 {
			sl.last, sl.snap = nil, nil
			if sl.held == nil && len(sl.waiters) == 0 {
				delete(w.names, name)
			}
		}
	}
}

// queue registers the candidacy of name created at token, between expect
// and its done, with older, the candidacies of the name its transaction
// read that are older than it (create revisions by key; queue keeps the
// map). The waiter's done is closed at once if the events and reads since
// expect leave no older candidacy, or show this one gone.
func (s *session) queue(name string, token int64, older map[string]int64) *waiter {
	w := &s.lw
	wt := &waiter{token: token, older: older, done: make(chan struct{})}
	w.mu.Lock()
	defer w.mu.Unlock()
	sl := w.names[name]
	if w.over || sl == nil {
		wt.finish()
		return wt
	}
	for key, create := range older {
		st, ok := sl.last[key]
		if ok && st.removes(create, token) || sl.snap.removes(key, create, token) {
			delete(older, key)
		}
	}
	if st, ok := sl.last[sl.key]; ok && st.ends(s, token) || sl.snap.ends(s, sl.key, token) {
		wt.gone = true
		wt.superseded = ok && !st.deleted && st.lease == s.lease && st.create > token
	}
	sl.waiters = append(sl.waiters, wt)
	wt.update()
	return wt
}

// removes reports whether the snapshot, if any, shows that the candidacy
// key created at create, older than one created at after, is gone.
func (sn *snapshot) removes(key string, create, after int64) bool {
	return sn != nil && sn.rev > after && sn.keys[key] != create
}

// ends reports whether the snapshot, if any, shows the end of the
// session's candidacy key created at token. (A snapshot records no etcd
// lease: the session's key bound to another lease is seen by the events.)
func (sn *snapshot) ends(s *session, key string, token int64) bool {
	return sn != nil && sn.rev > token && sn.keys[key] != token
}

// update closes done if the waiter's turn has come or its candidacy is
// gone. w.mu is held.
func (wt *waiter) update() {
	if len(wt.older) == 0 || wt.gone {
		wt.finish()
	}
}

// finish closes done, once. w.mu is held.
func (wt *waiter) finish() {
	if !wt.closed {
		wt.closed = true
		close(wt.done)
	}
}

// turn reports the waiter's state: whether its candidacy holds the lease
// (no older one left, and it is not gone), and whether it is gone, replaced
// by a newer candidacy of this session.
func (s *session) turn(wt *waiter) (holds, gone, superseded bool) {
	w := &s.lw
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.over && !wt.gone && len(wt.older) == 0, wt.gone, wt.superseded
}

// dequeue unregisters the waiter of name, between expect and its done.
func (s *session) dequeue(name string, wt *waiter) {
	w := &s.lw
	w.mu.Lock()
	defer w.mu.Unlock()
	if sl := w.names[name]; sl != nil {
		sl.waiters = slices.DeleteFunc(sl.waiters, func(x *waiter) bool { return x == wt })
	}
}

// hold turns the waiter wt, whose turn has come, into the holding l,
// between expect and its done. l is lost at once if the session is over or
// the candidacy is gone; an older holding of the name by this session is
// lost, as its key has been deleted since.
func (s *session) hold(l *lease, wt *waiter) {
	w := &s.lw
	w.mu.Lock()
	var lost *lease
	sl := w.names[l.name]
	if sl != nil {
		sl.waiters = slices.DeleteFunc(sl.waiters, func(x *waiter) bool { return x == wt })
	}
	switch {
	case w.over || s.ctx.Err() != nil || sl == nil || wt.gone:
		lost = l
	case sl.held != nil && sl.held.token > l.token:
		lost = l // a concurrent Acquire of the name took a newer holding
	default:
		lost, sl.held = sl.held, l
	}
	w.mu.Unlock()
	if lost != nil {
		lost.markLost()
	}
}

// unhold unregisters l, ended by its own Release.
func (s *session) unhold(l *lease) {
	w := &s.lw
	w.mu.Lock()
	defer w.mu.Unlock()
	if sl := w.names[l.name]; sl != nil && sl.held == l {
		sl.held = nil
		if sl.acquiring == 0 && len(sl.waiters) == 0 {
			delete(w.names, l.name)
		}
	}
}

// apply records the state st of key, a candidacy key of name, and returns
// the holding it ends, if any. w.mu is held.
func (w *leaseWatch) apply(s *session, name, key string, st keyState) *lease {
	sl := w.names[name]
	if sl == nil {
		return nil
	}
	if sl.acquiring > 0 && st.rev > sl.last[key].rev {
		sl.last[key] = st
	}
	for _, wt := range sl.waiters {
		if key == sl.key {
			if st.ends(s, wt.token) {
				wt.gone = true
				wt.superseded = !st.deleted && st.lease == s.lease && st.create > wt.token
			}
		} else if create, ok := wt.older[key]; ok && st.removes(create, wt.token) {
			delete(wt.older, key)
		}
		wt.update()
	}
	l := sl.held
	if l == nil || key != sl.key || !st.ends(s, l.token) {
		return nil
	}
	sl.held = nil
	if sl.acquiring == 0 && len(sl.waiters) == 0 {
		delete(w.names, name)
	}
	return l
}

// end marks every holding lost and wakes every waiter: the session is over.
func (w *leaseWatch) end() {
	w.mu.Lock()
	w.over = true
	var lost []*lease
	for name, sl := range w.names {
		if sl.held != nil {
			lost = append(lost, sl.held)
			sl.held = nil
		}
		for _, wt := range sl.waiters {
			wt.finish()
		}
		if sl.acquiring == 0 {
			delete(w.names, name)
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
		s.dispatch(base, s.b.cli.Watch(ctx, base, clientv3.WithPrefix(), clientv3.WithRev(rev)))
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
			// Not keys only: etcd's keys-only ranges leave out the etcd
			// lease a key is bound to.
			resp, err := s.b.kv.KV.Get(s.ctx, base, clientv3.WithPrefix())
			if err != nil {
				continue
			}
			s.resync(base, resp)
			rev = resp.Header.Revision + 1
			break
		}
	}
}

// candidacyName returns the lease name of the candidacy key key, under
// base (<prefix>lease/), and false for a key that is not a candidacy's.
func candidacyName(base, key string) (string, bool) {
	name, sid, ok := strings.Cut(strings.TrimPrefix(key, base), "/")
	return name, ok && name != "" && sid != "" && strings.HasPrefix(key, base)
}

// dispatch hands the events of wch to the candidacies until the watch
// ends.
func (s *session) dispatch(base string, wch clientv3.WatchChan) {
	w := &s.lw
	var lost []*lease
	for resp := range wch {
		if resp.Err() != nil {
			return
		}
		if _, err := s.b.observe(resp.Header, 0, false); err != nil {
			return // the session is over
		}
		w.mu.Lock()
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			name, ok := candidacyName(base, key)
			if !ok {
				continue
			}
			if l := w.apply(s, name, key, stateOf(ev)); l != nil {
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

// resync applies the lease keys read at one revision to every name
// registered: their states at that revision stand for the events up to it.
func (s *session) resync(base string, resp *clientv3.GetResponse) {
	w := &s.lw
	rev := resp.Header.Revision
	var lost []*lease
	w.mu.Lock()
	found := make(map[string]map[string]*mvccpb.KeyValue, len(w.names))
	for name := range w.names {
		found[name] = map[string]*mvccpb.KeyValue{}
	}
	for _, kv := range resp.Kvs {
		name, ok := candidacyName(base, string(kv.Key))
		if keys := found[name]; ok && keys != nil {
			keys[string(kv.Key)] = kv
		}
	}
	for name, sl := range w.names {
		keys := found[name]
		if sl.acquiring > 0 {
			sn := &snapshot{rev: rev, keys: make(map[string]int64, len(keys))}
			for key, kv := range keys {
				sn.keys[key] = kv.CreateRevision
			}
			sl.snap = sn
		}
		var touched []string // the keys whose state at rev matters
		if sl.held != nil || len(sl.waiters) > 0 {
			touched = append(touched, sl.key)
		}
		for _, wt := range sl.waiters {
			for key := range wt.older {
				touched = append(touched, key)
			}
		}
		slices.Sort(touched)
		for _, key := range slices.Compact(touched) {
			st := keyState{rev: rev, deleted: true}
			if kv := keys[key]; kv != nil {
				st = keyState{rev: rev, create: kv.CreateRevision, lease: clientv3.LeaseID(kv.Lease)}
			}
			if l := w.apply(s, name, key, st); l != nil {
				lost = append(lost, l)
			}
		}
	}
	w.mu.Unlock()
	for _, l := range lost {
		l.markLost()
	}
}
