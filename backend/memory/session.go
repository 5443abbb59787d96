package memory

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/simba-go/simba/backend"
)

// session is one session: the server's record of it and the caller's handle
// on it, in one value. It implements [backend.Session].
type session struct {
	b   *Backend
	n   *Node
	id  string
	ttl time.Duration

	// The caller's side, guarded by b.mu.
	done       chan struct{} // closed when the caller knows the session is over
	doneClosed bool

	// The server's side, guarded by b.mu.
	live      bool
	expiresAt time.Time
	timer     *time.Timer
	ended     chan struct{}     // closed when the server ends the session
	leases    map[string]*lease // current holdings by name
	groups    map[string]struct{}
	watchers  []*watcher
}

// ID returns the session's ID, "<node name>-<n>".
func (s *session) ID() string { return s.id }

// TTL returns the granted time-to-live.
func (s *session) TTL() time.Duration { return s.ttl }

// Done is closed when the node learns that the session is over: expired or
// closed on the server (withheld while partitioned, never after a crash), or
// closed by the caller.
func (s *session) Done() <-chan struct{} { return s.done }

// KeepAlive renews the session: the server expires it no earlier than the
// granted TTL after it applied the renewal, which is at or after the call.
func (s *session) KeepAlive(ctx context.Context) (time.Duration, error) {
	err := s.n.exchange(ctx, opKeepAlive, s, func() (func(), error) {
		if !s.live {
			return nil, sessionDone(opKeepAlive)
		}
		s.b.renew(s)
		return nil, nil
	})
	if err != nil {
		return 0, err
	}
	return s.ttl, nil
}

// Acquire blocks until the session holds the lease called name. While
// another session holds it, Acquire waits for the holding to end and asks
// again.
func (s *session) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	if !backend.ValidName(name) {
		return nil, nameError("lease", name)
	}
	b := s.b
	for {
		var l *lease
		var freed <-chan struct{}
		err := s.n.exchange(ctx, opAcquire, s, func() (func(), error) {
			l, freed = nil, nil
			if !s.live {
				return nil, sessionDone(opAcquire)
			}
			if cur := b.leases[name]; cur != nil {
				if cur.s != s {
					freed = b.freedChan(name)
					return nil, nil
				}
				b.endHolding(cur, reasonReacquired, true)
			}
			l = b.grantLease(s, name)
			undo := func() {
				if b.leases[name] == l {
					b.endHolding(l, reasonCancelled, false)
				}
			}
			return undo, nil
		})
		if err != nil {
			return nil, err
		}
		if l != nil {
			return l, nil
		}
		select {
		case <-freed:
		case <-s.ended: // the next attempt learns it from the server
		case <-ctx.Done():
		case <-s.n.gone:
		case <-s.done:
		}
	}
}

// Close ends the session on the server now, releasing its leases and
// memberships. The session is over for the caller at once, whether or not
// the request reaches the server.
func (s *session) Close(ctx context.Context) error {
	b := s.b
	b.mu.Lock()
	switch {
	case s.n.crashed:
		err := s.n.abortErrLocked(ctx, opClose, s)
		b.mu.Unlock()
		return err
	case s.doneClosed || s.n.closed:
		b.mu.Unlock()
		return nil
	}
	s.closeLocal()
	b.mu.Unlock()
	err := s.n.exchange(ctx, opClose, s, func() (func(), error) {
		b.endSession(s, reasonClosed)
		return nil, nil
	})
	if errors.Is(err, backend.ErrClosed) {
		return nil
	}
	return err
}

// closeLocal makes the session over for the caller: Done and the session's
// member-watch channels close. b.mu is held.
func (s *session) closeLocal() {
	s.closeDone()
	for _, w := range slices.Clone(s.watchers) {
		s.b.unwatch(w)
		w.close()
	}
}

// closeDone closes Done, once. b.mu is held.
func (s *session) closeDone() {
	if !s.doneClosed {
		s.doneClosed = true
		close(s.done)
	}
}
