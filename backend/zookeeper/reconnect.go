package zookeeper

import (
	"maps"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/wake"
)

// After a reconnection, go-zookeeper sets the session's watches again with
// a setWatches request, from a goroutine of its own that gives up at the
// first error, and that races with its receiving goroutine (see wire). The
// server may also have lost them. Whatever the session learns from watches
// is therefore read again after each reconnection, rather than left to
// those watches:
//
//   - a waiting Acquire reads its own candidacy and each older one it still
//     counts (an exists watch each, set again): one found gone is counted
//     as gone, as its delete event would have been;
//   - a held lease reads its znode (see rewatch), so that Lost closes if it
//     was deleted while the watch was down;
//   - HeldLeases forgets what it cached from its child watches;
//   - WatchRecords and WatchMembers set their watches again and send a
//     hint, as when a watch fires.
//
// The reads of leases take the session's request slots (see
// WithMaxRequests), so that a session holding or waiting for thousands of
// leases does not queue thousands of requests in front of its keep-alives.

// sessionEstablished handles go-zookeeper's StateHasSession event, sent on
// each connection once the server has answered the session request
// (before the connection carries requests). It must not block.
func (s *session) sessionEstablished() {
	if s.connections.Add(1) > 1 {
		s.reconnected()
	}
}

// reconnected starts the re-checks of a reconnection (see above).
func (s *session) reconnected() {
	s.heldMu.Lock()
	clear(s.held)
	s.heldGen++
	s.heldMu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over {
		return
	}
	for w := range s.recWatches {
		for p := range w.watching {
			delete(w.watching, p)
			w.fired[p] = true
		}
		w.disarmLocked()
		wake.Poke(w.wake)
	}
	if s.reconnects != nil {
		close(s.reconnects)
	}
	s.reconnects = make(chan struct{})
	for _, l := range s.leases {
		switch {
		case l.state == leasePending && l.path != "":
			s.calls.Add(1)
			go func() {
				defer s.calls.Done()
				s.recheckPending(l)
			}()
		case l.state == leaseHeld && !l.releasing:
			s.calls.Add(1)
			go func() {
				defer s.calls.Done()
				s.withSlot(func() { s.rewatch(l) })
			}()
		}
	}
}

// withSlot runs f, which sends requests, once one of the session's slots
// is free (see WithMaxRequests): the re-checks of a reconnection of a
// session with thousands of leases must not queue thousands of requests in
// front of its keep-alives. It reports false, running nothing, when the
// session is over first.
func (s *session) withSlot(f func()) bool {
	if s.lim.TakeUntil(s.ctx, s.ctx) != nil {
		return false
	}
	defer s.lim.Free()
	f()
	return true
}

// reconnection returns a channel that is closed at the next reconnection.
func (s *session) reconnection() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reconnects == nil {
		s.reconnects = make(chan struct{})
	}
	return s.reconnects
}

// recheckPending reads, with an exists watch each, the candidacy of a
// waiting Acquire and the older ones it still counts. If it cannot, the
// Acquire is woken to register again.
func (s *session) recheckPending(l *lease) {
	s.mu.Lock()
	own := l.path
	older := slices.Collect(maps.Keys(l.older))
	s.mu.Unlock()
	paths := append([]string{own}, older...)
	for attempt := 1; attempt <= 5; attempt++ {
		err := together(len(paths), func(i int) error {
			var ok bool
			var err error
			if !s.withSlot(func() { ok, _, _, err = s.conn.ExistsW(paths[i]) }) {
				return zk.ErrClosing
			}
			if err != nil || ok {
				return err
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.leases[l.name] != l || l.state != leasePending {
				return nil
			}
			if i == 0 {
				l.deleted = true
				l.signalLocked()
			} else if l.older[paths[i]] {
				delete(l.older, paths[i])
				if len(l.older) == 0 {
					l.signalLocked()
				}
			}
			return nil
		})
		if err == nil {
			return
		}
		if !s.sleep(s.ctx, backoff.Jitter(time.Duration(attempt)*50*time.Millisecond)) {
			return
		}
	}
	s.mu.Lock()
	if s.leases[l.name] == l && l.state == leasePending {
		l.deleted = true // not what happened, but what Acquire does next: register again
		l.signalLocked()
	}
	s.mu.Unlock()
}
