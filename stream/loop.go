package stream

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba"
)

// The event loop of one partition in one term. One goroutine (the term's
// run) owns every field of the loop but the atomics; the Process and Window
// calls run on maxConcurrency goroutines of their own (see calls.go), and a
// poller goroutine fetches the next batch ahead (poll.go).
// Process, Window and the checkpoint never overlap because only the loop
// starts them: Window and checkpoints only when no call is running, and no
// call while a Window or checkpoint is due.
type loop struct {
	t         *Task
	o         *options
	term      *simba.Term
	partition int
	ctx       context.Context // the term's run: ends when the term ends
	log       *slog.Logger

	h   Handler  // the handler, wrapped
	win Windower // nil: no Window calls

	taking      chan struct{}   // its one token is held by the caller taking the next call: see loop.caller
	callCtx     context.Context // the parent of every call's ctx
	cancelCalls context.CancelFunc
	stopPoll    context.CancelFunc
	polled      chan batch
	calls       chan call
	outcomes    chan outcome

	batch []Message // the current batch; next is the first not dispatched
	next  int

	flight      ring // concurrency > 1: dispatched messages not yet covered by the position
	running     int  // Process calls (or serial runs) started and neither returned nor abandoned
	winRunning  bool // a Window call is running
	winDeadline time.Time

	// Concurrency 1: the serial run handed to the caller.
	serialSeq      uint64
	serialMsgs     []Message    // nil when none is out
	pause          atomic.Bool  // the caller starts no further message
	serialOffset   atomic.Int64 // with a call timeout: the message running
	serialDeadline atomic.Int64 // and its deadline (Unix ns; 0 between messages)
	serialReported int64        // the deadline reported as overdue

	position int64 // every message below it is processed: the checkpoint
	saved    int64 // the last checkpoint loaded or saved in this term

	windowDue, commitDue bool
	// The timers and the stop signals wake the loop through wake, with
	// what happened in sigs: selecting on few channels, none a timer's,
	// keeps the loop cheap per message.
	wake                    chan struct{}
	sigs                    atomic.Uint32
	windowT, commitT        *time.Timer
	timeoutT                *time.Timer
	timeoutArmed            bool
	unwatchCtx, unwatchStop func() bool

	horizon time.Time // the term's deadline, last seen while it was valid
	failure *PartitionError
	coord   *Coordinator // the handler's requests (coordinator.go)
}

// Signals, set in loop.sigs.
const (
	sigWindow  = 1 << iota // the window interval passed
	sigCommit              // the commit interval passed
	sigTimeout             // a call may be past its timeout
	sigStop                // the term ended or the task stops
)

// signal sets sig and wakes the loop.
func (l *loop) signal(sig uint32) {
	l.sigs.Or(sig)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *loop) run() error {
	start, found, err := l.o.store.Load(l.ctx, l.term, l.partition)
	if err != nil {
		if l.ctx.Err() != nil {
			return nil
		}
		return l.partitionError("load", -1, err)
	}
	if !found {
		start = l.o.startOffset
	}
	l.position, l.saved = start, start
	l.log.Debug("partition starts", "offset", start, "checkpoint", found)

	raw, err := l.handler()
	if err != nil {
		return l.partitionError("init", -1, err)
	}
	l.h = Chain(raw, l.o.wrappers...)
	if l.o.window > 0 {
		l.win, _ = raw.(Windower)
	}
	if in, ok := raw.(Initializer); ok {
		if err := protect(func() error { return in.Init(l.ctx, l.term) }); err != nil {
			if l.ctx.Err() != nil {
				return nil
			}
			return l.partitionError("init", -1, err)
		}
	}

	l.start(start)
	l.events()
	return l.handOff(raw)
}

// handler gets the term's handler from the task's handler function.
func (l *loop) handler() (h Handler, err error) {
	err = protect(func() error {
		h = l.t.newHandler(l.partition)
		return nil
	})
	if err == nil && h == nil {
		err = errors.New("the handler function returned nil")
	}
	return h, err
}

// start starts the poller and the callers, and the timers.
func (l *loop) start(from int64) {
	var pollCtx context.Context
	pollCtx, l.stopPoll = context.WithCancel(l.ctx)
	l.callCtx, l.cancelCalls = context.WithCancel(l.ctx)
	n := l.o.maxConcurrency
	l.polled = make(chan batch, 1)
	l.calls = make(chan call, n)
	l.taking = make(chan struct{}, 1)
	l.taking <- struct{}{}
	l.outcomes = make(chan outcome, n)
	l.flight.init(n)
	l.t.wg.Go(func() { l.poll(pollCtx, from) })
	for range n {
		l.t.wg.Go(l.caller)
	}
	l.wake = make(chan struct{}, 1)
	l.commitT = time.AfterFunc(l.o.commitInterval, func() { l.signal(sigCommit) })
	if l.win != nil {
		l.windowT = time.AfterFunc(l.o.window, func() { l.signal(sigWindow) })
	}
	if l.o.callTimeout > 0 {
		l.timeoutT = time.AfterFunc(time.Hour, func() { l.signal(sigTimeout) })
		l.timeoutT.Stop()
	}
	stop := func() { l.signal(sigStop) }
	l.unwatchCtx = context.AfterFunc(l.ctx, stop)
	l.unwatchStop = context.AfterFunc(l.t.stopping, stop)
}

// events is the event loop: it starts calls while it may, and waits for
// the next thing to happen, until the term ends, the task stops or the
// partition fails.
func (l *loop) events() {
	for {
		l.see()
		if l.failure != nil || l.coordinate() {
			return
		}
		if l.over() {
			l.log.Debug("term ended or stream stopping: handing off")
			return
		}
		if l.startWork() {
			continue
		}
		var polled <-chan batch
		if l.next >= len(l.batch) {
			polled = l.polled
		}
		select {
		case o := <-l.outcomes:
			l.complete(o)
		case b := <-polled:
			l.batch, l.next = b.msgs, 0
			if b.err != nil {
				l.batch = nil
				if l.ctx.Err() == nil {
					l.fail("poll", -1, b.err)
				}
			}
		case <-l.wake:
			if l.signalled() {
				return
			}
		}
	}
}

// startWork starts the Process calls that may start; or, when none is
// running, a Window call or a checkpoint that is due. It reports whether it
// did the latter, so that the loop looks again before it waits.
func (l *loop) startWork() bool {
	if !l.windowDue && !l.commitDue && !l.winRunning {
		if l.o.maxConcurrency == 1 {
			if l.running == 0 && l.next < len(l.batch) {
				l.dispatchSerial()
			}
		} else {
			for l.running < l.o.maxConcurrency && l.next < len(l.batch) && !l.over() {
				l.dispatch()
			}
		}
	}
	if l.running > 0 || l.winRunning {
		return false
	}
	switch {
	case l.windowDue:
		l.windowDue = false
		l.startWindow()
		return true
	case l.commitDue:
		l.commitDue = false
		l.checkpoint(l.ctx, false)
		l.commitT.Reset(l.o.commitInterval)
		return true
	}
	return false
}

// signalled takes the signals that woke the loop, and reports whether the
// loop must hand off.
func (l *loop) signalled() bool {
	sigs := l.sigs.Swap(0)
	if sigs&(sigWindow|sigCommit) != 0 {
		l.windowDue = l.windowDue || sigs&sigWindow != 0
		l.commitDue = l.commitDue || sigs&sigCommit != 0
		l.pause.Store(true) // a serial run stops after its current message
	}
	if sigs&sigTimeout != 0 {
		l.timeoutArmed = false
		l.overdue()
	}
	if sigs&sigStop == 0 {
		return false
	}
	if l.ctx.Err() != nil {
		l.log.Debug("term ended: handing off")
	} else {
		l.log.Debug("stream stopping: handing off")
	}
	return true
}

// over reports whether the term has ended or the task is stopping: from
// then on no Process or Window call starts, neither from the loop nor from
// a caller holding a call or a serial run handed over before. The term's
// Revoked is closed before its ctx is cancelled; both are looked at,
// without blocking or locking, at every call's start. Once over, always
// over. (A term's validity is not looked at: it can come back after a
// late renewal, and the core revokes a term whose deadline passed.)
func (l *loop) over() bool {
	select {
	case <-l.term.Revoked():
		return true
	default:
	}
	select {
	case <-l.t.stopping.Done():
		return true
	default:
	}
	select {
	case <-l.ctx.Done():
		return true
	default:
	}
	return false
}

// see keeps the latest deadline the term had while it was valid: the bound
// of the hand-off. A term's Deadline moves later with every renewal and
// drops to the instant it ended once it is over, so the latest value seen is
// kept.
func (l *loop) see() {
	if d := l.term.Deadline(); d.After(l.horizon) {
		l.horizon = d
	}
}

// fail records the partition's first failure.
func (l *loop) fail(op string, offset int64, err error) {
	if l.failure != nil {
		return
	}
	l.failure = l.partitionError(op, offset, err)
	l.log.Warn("partition failed: handing off", "op", op, "offset", offset, "err", err)
}

func (l *loop) partitionError(op string, offset int64, err error) *PartitionError {
	return &PartitionError{Partition: l.partition, Token: l.term.Token(), Op: op, Offset: offset, Err: err}
}

// checkpoint saves the position if it moved. A refusal fails the
// partition, unless the hand-off is under way anyway.
func (l *loop) checkpoint(ctx context.Context, final bool) {
	if l.position <= l.saved {
		return
	}
	err := l.o.store.Save(ctx, l.term, l.partition, l.position)
	switch {
	case err == nil:
		l.saved = l.position
		l.log.Debug("checkpoint", "offset", l.position, "final", final)
	case final:
		l.log.Info("final checkpoint not written", "offset", l.position, "err", err)
	case l.ctx.Err() != nil:
		// The term is over: the hand-off follows.
	case errors.Is(err, ErrFenced):
		l.fail("checkpoint", -1, err)
	default:
		l.log.Warn("checkpoint failed; retrying at the next commit", "offset", l.position, "err", err)
	}
}

// handOff ends the term's work: it stops the intake, waits for the calls in
// flight at most until the term's deadline as it stands (the last one seen
// if the term has ended), writes the final checkpoint, and closes the
// handler.
func (l *loop) handOff(raw Handler) error {
	l.stopPoll()
	l.pause.Store(true)
	l.see()
	bound := time.NewTimer(time.Until(l.horizon))
	defer bound.Stop()
	for l.running > 0 || l.winRunning {
		select {
		case o := <-l.outcomes:
			l.complete(o)
		case <-l.wake:
			if l.sigs.Swap(0)&sigTimeout != 0 {
				l.timeoutArmed = false
				l.overdue()
			}
		case <-bound.C:
			l.abandonAll()
		}
	}
	l.cancelCalls()
	close(l.calls)
	l.unwatchCtx()
	l.unwatchStop()
	l.commitT.Stop()
	if l.windowT != nil {
		l.windowT.Stop()
	}
	if l.timeoutT != nil {
		l.timeoutT.Stop()
	}

	// A term still valid has been renewed meanwhile: its new deadline
	// bounds the final checkpoint and Close.
	l.see()
	ctx, cancel := context.WithDeadline(context.WithoutCancel(l.ctx), l.horizon)
	defer cancel()
	l.checkpoint(ctx, true)
	if c, ok := raw.(Closer); ok {
		if err := protect(func() error { return c.Close(ctx, l.term) }); err != nil {
			l.log.Warn("close failed", "err", err)
		}
	}
	l.log.Debug("handed off", "offset", l.position, "saved", l.saved)
	if l.failure != nil {
		return l.failure
	}
	return nil
}
