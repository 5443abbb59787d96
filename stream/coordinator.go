package stream

import (
	"context"
	"sync/atomic"
)

// Coordinator lets a handler steer its partition's loop, as Samza's
// TaskCoordinator does: it can ask for a checkpoint now, and for the
// partition to be handed off after the current call. Every term of every
// partition has its own; get it with [CoordinatorFrom] from the ctx of the
// handler's Init, Process or Window calls.
//
// Its methods return at once: the loop acts on a request once the calls in
// flight have returned. They are safe for concurrent use, and do nothing on
// a nil Coordinator or once the term's loop has begun its hand-off (from
// Close, say).
type Coordinator struct {
	l       *loop
	commit  atomic.Bool
	handOff atomic.Bool
}

type coordinatorKey struct{}

// CoordinatorFrom returns the [Coordinator] of the partition's term whose
// handler call ctx belongs to, or nil when ctx is not from such a call (the
// methods of a nil Coordinator do nothing).
func CoordinatorFrom(ctx context.Context) *Coordinator {
	c, _ := ctx.Value(coordinatorKey{}).(*Coordinator)
	return c
}

// RequestCommit asks for a checkpoint now, whatever [WithCommitInterval]:
// no Process call starts after the calls in flight (with concurrency 1, the
// current one) until the checkpoint of every message processed so far, the
// current one too if it returns nil, is written; the next interval counts
// from there. Like every checkpoint, it is written only if it moved, and a
// refusal fails the partition.
func (c *Coordinator) RequestCommit() {
	if c == nil {
		return
	}
	c.commit.Store(true)
	c.l.pause.Store(true) // a serial run stops after its current message
	c.l.signal(0)
}

// RequestHandOff asks for the partition to be handed off after the current
// call: no Process or Window call starts after the calls in flight (with
// concurrency 1, the current one), and the loop hands off as at the end of
// a term (final checkpoint, [Closer.Close]). Then the partition's lease is
// given up, as with [simba.ErrYield]: the partition is taken over after one
// lease term, from that checkpoint, by another member or by this one again.
// The run is published as [simba.WorkCompleted] with result
// [simba.ResultSucceeded] and an error matching [simba.ErrYield]; it is not a
// failure. When the term ends or the task stops meanwhile, the hand-off is
// theirs.
func (c *Coordinator) RequestHandOff() {
	if c == nil {
		return
	}
	c.handOff.Store(true)
	c.l.pause.Store(true)
	c.l.signal(0)
}

// handingOff reports whether the handler asked for a hand-off.
func (c *Coordinator) handingOff() bool { return c.handOff.Load() }

// coordinate takes the handler's requests, on the loop's goroutine before
// it starts work: a commit request makes a checkpoint due. It reports
// whether the loop must hand off.
func (l *loop) coordinate() bool {
	if l.coord == nil {
		return false
	}
	if l.coord.commit.Swap(false) {
		l.commitDue = true
	}
	return l.coord.handingOff()
}
