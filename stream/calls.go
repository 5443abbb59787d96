package stream

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/simba-go/simba"
)

// How calls run. The loop hands calls to maxConcurrency caller goroutines
// through loop.calls and takes their outcomes from loop.outcomes; both
// channels have a slot per caller, so neither side ever blocks on them.
//
// With concurrency 1 the loop hands over a serial run: the rest of the
// current batch, which the caller processes message after message, checking
// loop.pause before each, until the batch ends, a call fails, or the loop
// pauses it (a Window or checkpoint is due, or the hand-off begins). So the
// loop and the caller meet once per batch, not once per message. With
// concurrency n > 1 every message is a call of its own, and the dispatched
// messages wait in loop.flight until the checkpoint can move past them.

type callKind uint8

const (
	callProcess callKind = iota // one message
	callSerial                  // a run of messages, one after the other
	callWindow
)

// call is what a caller runs.
type call struct {
	kind   callKind
	seq    uint64    // callProcess: the message's dispatch number; callSerial: the run's
	msg    Message   // callProcess
	msgs   []Message // callSerial
	ctx    context.Context
	cancel context.CancelFunc // nil without a call timeout
}

// outcome is the end of a call.
type outcome struct {
	kind     callKind
	seq      uint64
	done     int // callSerial: messages processed, from the first
	err      error
	timedOut bool
	skipped  bool // not run: the term had ended or the task was stopping (see loop.over)
}

// dispatch starts a Process call for the next message (concurrency > 1).
func (l *loop) dispatch() {
	msg := l.batch[l.next]
	l.batch[l.next] = Message{} // the call has its copy; let the batch go
	l.next++
	c := call{kind: callProcess, msg: msg, ctx: l.callCtx}
	var deadline time.Time
	if l.o.callTimeout > 0 {
		c.ctx, c.cancel = context.WithTimeout(l.callCtx, l.o.callTimeout)
		deadline, _ = c.ctx.Deadline()
		l.armTimeout(deadline)
	}
	c.seq = l.flight.push(msg.Offset, deadline)
	l.running++
	l.calls <- c
}

// dispatchSerial hands the rest of the batch to the caller (concurrency 1).
// l.next stays at the run's first message until the outcome.
func (l *loop) dispatchSerial() {
	l.serialSeq++
	l.serialMsgs = l.batch[l.next:]
	l.pause.Store(false)
	if l.o.callTimeout > 0 {
		l.armTimeout(time.Now().Add(l.o.callTimeout))
	}
	l.running = 1
	l.calls <- call{kind: callSerial, seq: l.serialSeq, msgs: l.serialMsgs}
}

// startWindow starts a Window call; no Process call is running.
func (l *loop) startWindow() {
	c := call{kind: callWindow, ctx: l.callCtx}
	if l.o.callTimeout > 0 {
		c.ctx, c.cancel = context.WithTimeout(l.callCtx, l.o.callTimeout)
		l.winDeadline, _ = c.ctx.Deadline()
		l.armTimeout(l.winDeadline)
	}
	l.winRunning = true
	l.calls <- c
}

// complete takes the outcome of a call.
func (l *loop) complete(o outcome) {
	switch o.kind {
	case callWindow:
		l.completeWindow(o)
	case callSerial:
		l.completeSerial(o)
	default:
		l.completeProcess(o)
	}
}

func (l *loop) completeWindow(o outcome) {
	if !l.winRunning {
		return // abandoned at the hand-off's bound
	}
	l.winRunning = false
	switch {
	case o.skipped:
	case o.timedOut:
		l.fail("window", -1, ErrTimeout)
	case o.err != nil && l.callCtx.Err() == nil:
		l.fail("window", -1, o.err)
	}
	if l.windowT != nil {
		l.windowT.Reset(l.o.window)
	}
}

func (l *loop) completeSerial(o outcome) {
	if o.seq != l.serialSeq || l.running == 0 {
		return // abandoned
	}
	l.running = 0
	msgs := l.serialMsgs
	l.serialMsgs = nil
	if o.done > 0 {
		l.position = msgs[o.done-1].Offset + 1
	}
	l.next += o.done
	if o.done == len(msgs) {
		return
	}
	if o.err == nil && !o.timedOut {
		return // paused
	}
	l.next++ // consumed, not processed
	switch off := msgs[o.done].Offset; {
	case o.timedOut:
		l.fail("process", off, ErrTimeout)
	case l.callCtx.Err() == nil:
		l.fail("process", off, o.err)
	}
}

func (l *loop) completeProcess(o outcome) {
	e := l.flight.at(o.seq)
	if e == nil || e.state != running {
		return // abandoned
	}
	l.running--
	switch {
	case o.skipped:
		e.state = failed // not processed; the hand-off follows
	case o.timedOut:
		e.state = failed
		l.fail("process", e.offset, ErrTimeout)
	case o.err != nil:
		e.state = failed
		if l.callCtx.Err() == nil {
			l.fail("process", e.offset, o.err)
		}
	default:
		e.state = done
		for {
			off, ok := l.flight.popDone()
			if !ok {
				break
			}
			l.position = off + 1
		}
	}
}

// overdue fails the partition when a call has run past its timeout, and
// arms the timer for the next deadline. The call is not abandoned here: the
// hand-off that follows waits for it like for any call in flight (its ctx
// has ended), at most until its bound.
func (l *loop) overdue() {
	now := time.Now()
	var next time.Time
	later := func(d time.Time) {
		if next.IsZero() || d.Before(next) {
			next = d
		}
	}
	if l.serialMsgs != nil && l.running > 0 {
		if dl := l.serialDeadline.Load(); dl == 0 {
			later(now.Add(l.o.callTimeout)) // between two messages
		} else if d := time.Unix(0, dl); d.After(now) {
			later(d)
		} else if dl != l.serialReported {
			l.serialReported = dl
			l.fail("process", l.serialOffset.Load(), ErrTimeout)
		}
	}
	l.flight.each(func(e *entry) {
		if e.state != running || e.deadline.IsZero() {
			return
		}
		if e.deadline.After(now) {
			later(e.deadline)
			return
		}
		e.deadline = time.Time{} // reported
		l.fail("process", e.offset, ErrTimeout)
	})
	if l.winRunning && !l.winDeadline.IsZero() {
		if l.winDeadline.After(now) {
			later(l.winDeadline)
		} else {
			l.winDeadline = time.Time{}
			l.fail("window", -1, ErrTimeout)
		}
	}
	if !next.IsZero() {
		l.armTimeout(next)
	}
}

// armTimeout makes sure the timeout timer fires by deadline.
func (l *loop) armTimeout(deadline time.Time) {
	if l.timeoutArmed {
		return // armed for an earlier deadline: calls start in order
	}
	l.timeoutArmed = true
	l.timeoutT.Reset(time.Until(deadline))
}

// abandonAll stops waiting for the calls still running at the hand-off's
// bound; their ctx is cancelled.
func (l *loop) abandonAll() {
	l.cancelCalls()
	l.flight.each(func(e *entry) {
		if e.state == running {
			e.state = abandoned
		}
	})
	if l.running > 0 || l.winRunning {
		l.log.Warn("calls still running at the term's deadline: abandoned", "process", l.running, "window", l.winRunning)
	}
	l.running, l.winRunning = 0, false
}

// caller runs calls until the loop closes calls. A call handed over
// before the term ended or the task stopped, but taken after, is skipped
// (see loop.over). The callers take calls and decide whether to skip them
// one at a time, under loop.taking, so in dispatch order: once a call is
// skipped, every later one is, and a term never processes a message while
// an earlier one it was handed was skipped. (loop.taking is a channel, not
// a mutex, so that a caller waiting for it is durably blocked in a
// testing/synctest bubble.)
func (l *loop) caller() {
	for {
		<-l.taking
		c, ok := <-l.calls
		skip := ok && c.kind != callSerial && l.over()
		l.taking <- struct{}{}
		if !ok {
			return
		}
		var o outcome
		switch {
		case skip:
			o = outcome{kind: c.kind, seq: c.seq, skipped: true}
		case c.kind == callSerial:
			o = l.serial(c)
		case c.kind == callWindow:
			o = outcome{kind: callWindow, err: protect(func() error { return l.win.Window(c.ctx, l.term) })}
		default:
			o = outcome{kind: callProcess, seq: c.seq, err: l.process(c.ctx, c.msg)}
		}
		if c.cancel != nil {
			o.timedOut = !o.skipped && c.ctx.Err() == context.DeadlineExceeded
			c.cancel()
		}
		l.outcomes <- o
	}
}

// serial processes a run of messages one after the other, until one fails,
// the loop pauses the run, or the term ends or the task stops.
func (l *loop) serial(c call) outcome {
	o := outcome{kind: callSerial, seq: c.seq}
	for i := range c.msgs {
		if l.pause.Load() || l.over() {
			break
		}
		ctx := l.callCtx
		var cancel context.CancelFunc
		if l.o.callTimeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, l.o.callTimeout)
			d, _ := ctx.Deadline()
			l.serialOffset.Store(c.msgs[i].Offset)
			l.serialDeadline.Store(d.UnixNano())
		}
		o.err = l.process(ctx, c.msgs[i])
		if cancel != nil {
			o.timedOut = ctx.Err() == context.DeadlineExceeded
			cancel()
			l.serialDeadline.Store(0)
		}
		if o.err != nil || o.timedOut {
			break
		}
		o.done++
	}
	return o
}

// process runs one Process call, turning a panic into an error.
func (l *loop) process(ctx context.Context, msg Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &simba.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return l.h.Process(ctx, l.term, msg)
}

// protect runs f, turning a panic into a *simba.PanicError.
func protect(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &simba.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return f()
}
