package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	ended     chan struct{}       // closed when the server ends the session
	leases    map[string]*lease   // current holdings by name
	cands     map[*lease]struct{} // every candidacy, holding or waiting
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

// Acquire registers a candidacy of the session for the lease called name
// at the back of the name's queue and blocks until it holds the lease: at
// once if the queue was empty, else when the node is told that every older
// candidacy has gone. A holding of name by the session ends first (reason
// "reacquired"). When ctx ends first the candidacy is withdrawn, if the
// link lets the withdrawal through, or else stays until the session ends.
func (s *session) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	if err := checkName("lease", name); err != nil {
		return nil, err
	}
	b := s.b
	var l *lease
	var held bool
	err := s.n.exchange(ctx, opAcquire, s, func() (func(), error) {
		l, held = nil, false
		if !s.live {
			return nil, sessionDone(opAcquire)
		}
		if cur := s.leases[name]; cur != nil {
			b.endHolding(cur, reasonReacquired, true)
		}
		l = b.register(s, name)
		held = b.leases[name] == l
		return func() { b.withdraw(l, reasonCancelled) }, nil
	})
	if err != nil {
		return nil, err
	}
	if held {
		return l, nil
	}
	select {
	case <-l.told:
		return l, nil
	case <-ctx.Done():
		s.withdraw(ctx, l)
	case <-s.n.gone:
	case <-s.done:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := s.n.abortErrLocked(ctx, opAcquire, s); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("simba/memory: acquire %q: aborted", name) // not reached
}

// withdraw sends the withdrawal of the candidacy l, whose Acquire's ctx has
// ended, and returns once it is sent: the request crosses the link after
// the node's request delay. While the link is cut the withdrawal waits for
// [Node.Heal] (the session sends it as soon as it can; meanwhile the
// candidacy keeps its place). It is dropped if the node crashes or closes,
// or the session is over for the caller: the candidacy goes with the
// session.
func (s *session) withdraw(ctx context.Context, l *lease) {
	n, b := s.n, s.b
	send := context.WithoutCancel(ctx)
	b.mu.Lock()
	d := n.reqDelay
	gone := n.abortErrLocked(send, opWithdraw, s) != nil
	if !gone && n.partitioned {
		n.withdrawals = append(n.withdrawals, l)
		gone = true
	}
	b.mu.Unlock()
	if gone || n.sleep(send, opWithdraw, s, d) != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case n.abortErrLocked(send, opWithdraw, s) != nil:
	case n.partitioned: // cut while in flight: sent again after Heal
		n.withdrawals = append(n.withdrawals, l)
	default:
		b.stats.count(opWithdraw)
		b.withdraw(l, reasonCancelled)
	}
}

// Candidates returns the IDs of the sessions of the candidacies for the
// lease called name, oldest (the holder) first: the optional
// [backend.CandidateLister] capability.
func (s *session) Candidates(ctx context.Context, name string) ([]string, error) {
	if err := checkName("lease", name); err != nil {
		return nil, err
	}
	var ids []string
	err := s.n.exchange(ctx, opCandidates, s, func() (func(), error) {
		if !s.live {
			return nil, sessionDone(opCandidates)
		}
		ids = s.b.candidates(name)
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// waitingCandidacies returns the session's candidacies that do not hold
// their lease, by name and then age. b.mu is held.
func (s *session) waitingCandidacies() []*lease {
	var out []*lease
	for l := range s.cands {
		if s.b.leases[l.name] != l {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(x, y *lease) int {
		if c := strings.Compare(x.name, y.name); c != 0 {
			return c
		}
		return cmp.Compare(x.token, y.token)
	})
	return out
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
