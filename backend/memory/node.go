package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/simba-go/simba/backend"
)

// ErrCrashed is returned, wrapped, by every call through a [Node] after
// [Node.Crash]. It is a transient error in the terms of package backend: it
// does not wrap [backend.ErrSessionDone].
var ErrCrashed = errors.New("simba/memory: node crashed")

// Node is one process's connection to a [Backend] server. It implements
// [backend.Backend]: sessions opened through it belong to the node, and the
// node's faults (see the package documentation) apply to all of them.
//
// A Node is safe for concurrent use by multiple goroutines.
type Node struct {
	b    *Backend
	name string

	// Guarded by b.mu.
	seq         uint64        // sessions opened so far
	partitioned bool          // the link is cut
	healed      chan struct{} // closed by Heal; set while partitioned
	pending     []func()      // notifications withheld by the partition
	withdrawals []*lease      // withdrawals of candidacies held back by the partition
	crashed     bool          // Crash was called
	closed      bool          // Close (or Backend.Close) was called
	gone        chan struct{} // closed on Crash or Close
	reqDelay    time.Duration
	respDelay   time.Duration
	views       map[*view]struct{} // open views, whose watches Close ends
}

// Name returns the node's name.
func (n *Node) Name() string { return n.name }

// Open opens a session through this node. The TTL requested in o must be
// positive; the granted one, reported by Session.TTL, is clamped by
// [WithTTLBounds]. The session's ID is "<node name>-<n>".
//
// After [Node.Close] or [Backend.Close], Open returns an error wrapping
// [backend.ErrClosed]; after [Node.Crash], one wrapping [ErrCrashed].
func (n *Node) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	if o.TTL <= 0 {
		return nil, fmt.Errorf("simba/memory: open: invalid TTL %v: must be positive", o.TTL)
	}
	var s *session
	err := n.exchange(ctx, opOpen, nil, func() (func(), error) {
		s = n.b.openSession(n, o.TTL)
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Close closes this node's connection to the server. Its sessions are
// abandoned, not closed: they expire on the server by their TTL. Every later
// call through the node fails, waiting calls return, and the Done, Lost and
// member-watch channels of its sessions are closed. Close is idempotent and
// returns nil.
func (n *Node) Close() error {
	n.b.mu.Lock()
	defer n.b.mu.Unlock()
	n.shutLocked()
	return nil
}

// Partition cuts the link between this node and the server. Requests from
// the node no longer reach the server: every call blocks until its ctx ends
// (returning an error wrapping ctx.Err()) or [Node.Heal]. Notifications to
// the node (Session.Done, Lease.Lost, member-watch hints) are withheld until
// Heal. The server goes on expiring the node's sessions by their TTL.
// Partition does nothing if the node is already partitioned, crashed or
// closed.
func (n *Node) Partition() {
	n.b.mu.Lock()
	defer n.b.mu.Unlock()
	if n.partitioned || n.crashed || n.closed {
		return
	}
	n.partitioned = true
	n.healed = make(chan struct{})
}

// Heal restores the link cut by [Node.Partition]: withheld notifications are
// delivered, in order, blocked calls proceed, and the withdrawals of
// candidacies whose Acquire gave up during the partition reach the server
// (as the session's own clean-up would send them once it can). It does nothing if the node
// is not partitioned.
func (n *Node) Heal() {
	n.b.mu.Lock()
	defer n.b.mu.Unlock()
	if !n.partitioned {
		return
	}
	n.partitioned = false
	close(n.healed)
	n.healed = nil
	pending := n.pending
	n.pending = nil
	for _, f := range pending {
		f()
	}
	withdrawals := n.withdrawals
	n.withdrawals = nil
	for _, l := range withdrawals {
		if l.s.live && !n.b.closed {
			n.b.stats.count(opWithdraw)
			n.b.withdraw(l, reasonCancelled)
		}
	}
}

// Crash ends the node's process for good. The server simply stops hearing
// from it: its sessions expire by their TTL and its leases are not released
// before that. Every later call through the node, Open and Session.Close
// included, and every call in progress, returns at once an error wrapping
// [ErrCrashed]; Done, Lost and member-watch hints are never delivered to it
// again.
func (n *Node) Crash() {
	n.b.mu.Lock()
	defer n.b.mu.Unlock()
	if n.crashed {
		return
	}
	n.crashed = true
	n.pending = nil
	n.withdrawals = nil
	if !n.closed {
		close(n.gone)
	}
}

// SetDelay sets the one-way delays of the link: every request reaches the
// server request after the call is made, and its reply reaches the caller
// response after the server applied it. A call whose ctx ends during the
// request delay never reaches the server. One whose ctx ends during the
// response delay returns an error wrapping ctx.Err() but has taken effect on
// the server, except Acquire: its candidacy is withdrawn (a grant is
// recorded in [Backend.History] with reason "cancelled"), so that it
// leaves nothing behind. A waiting Acquire whose ctx ends sends the
// withdrawal of its candidacy, which takes the request delay and, while
// the link is cut, waits for Heal. New delays apply to requests sent and replies sent after the call.
// SetDelay panics if a delay is negative.
func (n *Node) SetDelay(request, response time.Duration) {
	if request < 0 || response < 0 {
		panic(fmt.Sprintf("simba/memory: negative delay (%v, %v)", request, response))
	}
	n.b.mu.Lock()
	defer n.b.mu.Unlock()
	n.reqDelay, n.respDelay = request, response
}

// Expire makes the server expire every live session of this node now, as if
// their TTL had run out. The node learns of it through its notifications,
// like of any expiry (late, if partitioned).
func (n *Node) Expire() {
	b := n.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for _, s := range n.liveSessions() {
		b.endSession(s, reasonEvicted)
	}
}

// liveSessions returns the node's sessions that are live on the server,
// ordered by ID. b.mu is held.
func (n *Node) liveSessions() []*session {
	var out []*session
	for _, id := range slices.Sorted(maps.Keys(n.b.sessions)) {
		if s := n.b.sessions[id]; s.n == n {
			out = append(out, s)
		}
	}
	return out
}

// shutLocked closes the node's connection: see Close. b.mu is held.
func (n *Node) shutLocked() {
	if n.closed || n.crashed {
		n.closed = true
		return
	}
	pending := n.pending
	n.pending = nil
	for _, f := range pending {
		f()
	}
	for _, s := range n.liveSessions() {
		s.closeLocal()
		for _, name := range slices.Sorted(maps.Keys(s.leases)) {
			s.leases[name].closeLost()
		}
	}
	for v := range n.views {
		v.closeLocked()
	}
	n.closed = true
	close(n.gone)
}

// notify delivers a notification from the server to this node: at once, or
// when the partition heals, or never if the node crashed or was closed. f
// runs with b.mu held; it must only close channels or send without
// blocking.
func (n *Node) notify(f func()) {
	switch {
	case n.crashed || n.closed:
	case n.partitioned:
		n.pending = append(n.pending, f)
	default:
		f()
	}
}

// op is the kind of a request.
type op int

const (
	opOpen op = iota
	opKeepAlive
	opAcquire
	opRelease
	opJoin
	opLeave
	opMembers
	opWatchMembers
	opClose
	opHeldLeases
	opRecords
	opWatchRecords
	opWithdraw
	opCandidates
)

func (k op) String() string {
	return [...]string{"open", "keep-alive", "acquire", "release", "join", "leave", "members", "watch members", "close", "held leases", "records", "watch records", "withdraw", "candidates"}[k]
}

// exchange carries one request of kind k, for session s (nil for Open),
// from the node to the server and its reply back, honouring ctx, the node's
// faults and delays. apply runs at the server with b.mu held and returns the
// server's answer, and an undo function (or nil) to run, with b.mu held, if
// the caller gives up while the reply is on its way.
func (n *Node) exchange(ctx context.Context, k op, s *session, apply func() (undo func(), err error)) error {
	b := n.b
	b.mu.Lock()
	err := n.abortErrLocked(ctx, k, s)
	b.mu.Unlock()
	if err != nil {
		return err
	}

	// The request leg: wait for the link, then cross it.
	var undo func()
	var result error
	for {
		if err := n.waitLink(ctx, k, s); err != nil {
			return err
		}
		b.mu.Lock()
		d := n.reqDelay
		b.mu.Unlock()
		if err := n.sleep(ctx, k, s, d); err != nil {
			return err
		}
		b.mu.Lock()
		if err := n.abortErrLocked(ctx, k, s); err != nil {
			b.mu.Unlock()
			return err
		}
		if n.partitioned { // cut while in flight: sent again after Heal
			b.mu.Unlock()
			continue
		}
		b.stats.count(k)
		undo, result = apply()
		d = n.respDelay
		b.mu.Unlock()

		// The reply leg.
		err := n.sleep(ctx, k, s, d)
		if err == nil {
			err = n.waitLink(ctx, k, s)
		}
		if err != nil {
			if undo != nil {
				b.mu.Lock()
				undo()
				b.mu.Unlock()
			}
			return err
		}
		return result
	}
}

// waitLink blocks until the node is not partitioned, or the call of kind k
// is aborted.
func (n *Node) waitLink(ctx context.Context, k op, s *session) error {
	for {
		n.b.mu.Lock()
		partitioned, healed := n.partitioned, n.healed
		n.b.mu.Unlock()
		if !partitioned {
			return nil
		}
		if err := n.await(ctx, k, s, healed); err != nil {
			return err
		}
	}
}

// sleep waits for d, unless the call of kind k is aborted first.
func (n *Node) sleep(ctx context.Context, k op, s *session, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	return await(n, ctx, k, s, t.C)
}

// await waits until ch is ready or the call of kind k is aborted.
func (n *Node) await(ctx context.Context, k op, s *session, ch <-chan struct{}) error {
	return await(n, ctx, k, s, ch)
}

// await waits until ch is ready or the call of kind k, through node n for
// session s, is aborted: its ctx ends, the node crashes or closes, or the
// session is over for the caller. It returns nil when ch is ready and the
// reason of the abort otherwise.
func await[T any](n *Node, ctx context.Context, k op, s *session, ch <-chan T) error {
	var done <-chan struct{}
	if s != nil && k != opClose {
		done = s.done
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	case <-n.gone:
	case <-done:
	}
	n.b.mu.Lock()
	defer n.b.mu.Unlock()
	if err := n.abortErrLocked(ctx, k, s); err != nil {
		return err
	}
	return fmt.Errorf("simba/memory: %v: aborted", k) // not reached
}

// abortErrLocked returns why a call of kind k through n for session s (nil
// for Open) cannot go on, or nil if it can. b.mu is held.
func (n *Node) abortErrLocked(ctx context.Context, k op, s *session) error {
	switch {
	case n.crashed:
		return fmt.Errorf("simba/memory: %v through node %q: %w", k, n.name, ErrCrashed)
	case n.closed && (k == opOpen || s == nil): // Open, or a view's call
		return fmt.Errorf("simba/memory: %v: %w", k, backend.ErrClosed)
	case n.closed && k == opRelease:
		return fmt.Errorf("simba/memory: release: %w: %w", backend.ErrNotHeld, backend.ErrClosed)
	case n.closed:
		return fmt.Errorf("simba/memory: %v: %w: %w", k, backend.ErrSessionDone, backend.ErrClosed)
	case s != nil && k != opClose && s.doneClosed:
		return sessionDone(k)
	case ctx.Err() != nil:
		return fmt.Errorf("simba/memory: %v: %w", k, ctx.Err())
	}
	return nil
}

// sessionDone is the error of a call of kind k on a session that is over.
func sessionDone(k op) error {
	if k == opRelease {
		return fmt.Errorf("simba/memory: release: %w: %w", backend.ErrNotHeld, backend.ErrSessionDone)
	}
	return fmt.Errorf("simba/memory: %v: %w", k, backend.ErrSessionDone)
}
