package simba

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Event is one of the typed events a client publishes: [SessionStarted],
// [SessionLost], [Elected], [Revoked], [HandedOff], [WorkCompleted],
// [Misfired], [Skipped], [RunOverdue], [Paused], [ViewChanged],
// [GroupMismatch]. Switch on the concrete type.
//
// Events are delivered to the handlers given with [WithEventHandler], in
// the order they were published, on one goroutine of the client's that
// never blocks the election machinery: a slow handler delays later events,
// not hand-offs. The events not yet delivered wait in a queue of at most
// 16,384: past it the oldest are dropped, so that a stuck handler cannot
// hold the client's memory. Drops are counted by the metric
// simba.events.dropped (see [WithMeterProvider]); the first is logged at
// Warn, later ones at Debug. [Client.Shutdown] waits for the handlers at
// most 5 seconds; a handler must not wait for its client's closing (call
// [Client.Stop] there).
type Event interface {
	isEvent()
}

// Result is the outcome of one run of a task function.
type Result int

// Results of a run.
const (
	// ResultSucceeded: the function returned nil, or an error reporting exit
	// code 0 (see "Exit codes" in the package doc).
	ResultSucceeded Result = iota + 1
	// ResultFailed: the function returned an error or panicked while its term was
	// valid. An error wrapping [ErrYield] counts as ResultFailed (logged at Warn,
	// not Error) when it reports a failure all the same: when it, or an
	// error it wraps, has a method Failed() bool that returns true, as a
	// partition failure of package stream has.
	ResultFailed
	// ResultCancelled: the function returned an error or panicked after its term
	// had ended.
	ResultCancelled
)

// failedYield reports whether err, an error wrapping [ErrYield], reports a
// failure all the same (see [ResultFailed]).
func failedYield(err error) bool {
	var f interface{ Failed() bool }
	return errors.As(err, &f) && f.Failed()
}

// String returns "succeeded", "failed" or "cancelled".
func (r Result) String() string {
	switch r {
	case ResultSucceeded:
		return "succeeded"
	case ResultFailed:
		return "failed"
	case ResultCancelled:
		return "cancelled"
	}
	return fmt.Sprintf("Result(%d)", int(r))
}

// TermRef names the term an event is about.
type TermRef struct {
	// Election is the lease name: the election's name, or "{group}.{p}"
	// for a partition.
	Election string
	// Group is the partition group's name, or "" for a plain election.
	Group string
	// Partition is the partition number, or -1 for a plain election.
	Partition int
	// Token is the term's fencing token.
	Token uint64
}

// SessionStarted is published when the client has opened a backend session.
type SessionStarted struct {
	Session string        // the new session's ID
	TTL     time.Duration // the TTL the backend granted
	At      time.Time     // when the session started
}

// SessionLost is published when the client's session has ended (every term
// on it was revoked at that moment). The client opens a new one unless it is
// closing.
type SessionLost struct {
	Session string       // the lost session's ID
	Reason  RevokeReason // RevokeDeadline or RevokeSessionLost
	Err     error        // the backend's error, if any
	At      time.Time    // when the client ended the session
}

// Elected is published when this client starts a term.
type Elected struct {
	TermRef
	Session string    // the session holding the lease
	At      time.Time // when the term began
}

// Revoked is published when a term of this client ends.
type Revoked struct {
	TermRef
	Reason RevokeReason // why the term ended
	Err    error        // the underlying error, if any
	At     time.Time    // when the term ended
}

// HandedOff is published when a term's hand-off is complete: its run has
// exited (or its time ran out) and its lease was released (or was already
// gone).
type HandedOff struct {
	TermRef
	// Duration is the time from the revocation to the end of the hand-off.
	Duration time.Duration
	// Released reports whether this client released the lease itself (false
	// when the lease or the session had already ended).
	Released bool
	At       time.Time // when the hand-off ended
}

// WorkCompleted is published after every run of a task function.
type WorkCompleted struct {
	TermRef
	Result   Result        // how the run ended
	Err      error         // what the function returned (nil for an exit code of 0), or a *PanicError
	Start    time.Time     // when the run started
	Duration time.Duration // how long it ran
	// Attempt is the run's attempt: 1, or more for a retry (see
	// [RetryPolicy]).
	Attempt int
	// Source says why the run started.
	Source RunSource
}

// Misfired is published when a schedule's planned starts passed while a run
// was still going, once the overrun's runs have ended; not under
// [OverlapCancelRunning], whose new start cancels the run instead (each
// start it skips is a [Skipped] all the same).
type Misfired struct {
	TermRef
	// Missed is the number of planned starts that passed during the run.
	Missed int
	// CatchUp reports whether one catch-up run follows at once: a start
	// was buffered ([OverlapBufferOne], which [MisfireRunOnce] implies
	// unless another overlap policy is given); otherwise they were
	// skipped.
	CatchUp bool
	At      time.Time // when the overrunning run ended
}

// Skipped is published when a schedule skips planned starts, one event per
// occasion: Count starts from First to Last, for Reason. Each occasion is
// also counted by the metric simba.schedule.skipped (Count, by reason) and
// written as one history entry of result "skipped" (the history keeps the
// last 50 entries), and the status's SkippedRuns adds Count. An overrun is
// one occasion, reported when its runs end; the starts missed before a
// term began are reported at its start.
type Skipped struct {
	TermRef
	Reason SkipReason
	Count  int       // how many planned starts were skipped
	First  time.Time // the first of them
	Last   time.Time // the last of them
	At     time.Time // when the skip was decided
}

// RunOverdue is published when a run is still going a second after its
// timeout ([Schedule.WithTimeout]): it ignored the cancellation of its ctx.
type RunOverdue struct {
	TermRef
	Start   time.Time     // when the run started
	Timeout time.Duration // its timeout
	At      time.Time     // when it was found overdue
}

// Paused is published when a schedule pauses itself after failed runs in a
// row ([Schedule.WithPauseAfter]).
type Paused struct {
	TermRef
	Failures int       // the failed runs in a row
	Err      error     // the last run's error
	At       time.Time // when it paused
}

// ViewChanged is published when a partition group's member view changes.
type ViewChanged struct {
	Group string // the group's name
	// Members are the member ids in the view, sorted.
	Members []string
	// Assigned are the partitions this client contends for in the view.
	Assigned []int
	At       time.Time // when the view changed
}

// GroupMismatch is published when a member of a group uses another partition
// count or assignment variant than this client.
type GroupMismatch struct {
	Group  string    // the group's name
	Member string    // the member that differs
	Detail string    // what differs
	At     time.Time // when it was seen
}

func (SessionStarted) isEvent() {}
func (SessionLost) isEvent()    {}
func (Elected) isEvent()        {}
func (Revoked) isEvent()        {}
func (HandedOff) isEvent()      {}
func (WorkCompleted) isEvent()  {}
func (Misfired) isEvent()       {}
func (Skipped) isEvent()        {}
func (RunOverdue) isEvent()     {}
func (Paused) isEvent()         {}
func (ViewChanged) isEvent()    {}
func (GroupMismatch) isEvent()  {}

// maxQueuedEvents bounds the memory held for slow handlers. Past it the oldest
// undelivered events are dropped, counted and logged.
const maxQueuedEvents = 1 << 14

// handlerWait bounds the wait of [Client.Close] for the event handlers to
// deliver the events published before it.
const handlerWait = 5 * time.Second

// eventBus queues events and delivers them, in order, on one goroutine.
type eventBus struct {
	log *slog.Logger

	mu       sync.Mutex
	queue    []Event
	handlers map[int]func(Event)
	order    []int // handler ids in registration order
	nextID   int
	dropped  int
	closed   bool
	wake     chan struct{} // buffer 1
	finished chan struct{}

	// abandoned is closed when no handler may be called any more, though
	// one may still be running: close gave up waiting for it, or was called
	// from it.
	abandoned   chan struct{}
	abandonOnce sync.Once

	// onDrop counts dropped events (the metric simba.events.dropped);
	// droppedBefore is whether a drop was logged already.
	onDrop        func(n int)
	droppedBefore bool
}

func newEventBus(log *slog.Logger, handlers []func(Event), onDrop func(n int)) *eventBus {
	b := &eventBus{
		log:       log,
		onDrop:    onDrop,
		handlers:  make(map[int]func(Event)),
		wake:      make(chan struct{}, 1),
		finished:  make(chan struct{}),
		abandoned: make(chan struct{}),
	}
	for _, h := range handlers {
		b.subscribe(h)
	}
	go b.run()
	return b
}

func (b *eventBus) subscribe(h func(Event)) (cancel func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.nextID
	b.nextID++
	b.handlers[id] = h
	b.order = append(b.order, id)
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.handlers, id)
	}
}

// publish queues e; it never blocks. With no handler it does nothing:
// nothing would be delivered, and a hand-off wakes no goroutine for it.
func (b *eventBus) publish(e Event) {
	b.mu.Lock()
	if b.closed || len(b.handlers) == 0 {
		b.mu.Unlock()
		return
	}
	if len(b.queue) >= maxQueuedEvents {
		b.queue = b.queue[1:]
		b.dropped++
	}
	b.queue = append(b.queue, e)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// close delivers what is queued, for at most wait, then stops the delivery
// goroutine; no handler call begins after close returns. A handler still
// running after wait is abandoned and logged: its call is the last, the
// events not yet delivered are dropped, and the delivery goroutine ends when
// it returns. After abandon (Close called from a handler) close does not
// wait at all.
func (b *eventBus) close(wait time.Duration) {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-b.finished:
	case <-b.abandoned:
	case <-timer.C:
		dropped := b.abandon()
		b.log.Error("event handler still running when Close stopped waiting for it: abandoned; it is the last handler call, and the events not yet delivered are dropped",
			"waited", wait, "dropped", dropped)
	}
}

// abandon makes the handler call running now, if any, the last: no other
// begins, and the events queued are dropped; it returns how many. The
// delivery goroutine ends when that call returns.
func (b *eventBus) abandon() (dropped int) {
	b.mu.Lock()
	b.closed = true
	dropped, b.queue = len(b.queue), nil
	b.mu.Unlock()
	b.abandonOnce.Do(func() { close(b.abandoned) })
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return dropped
}

func (b *eventBus) isAbandoned() bool {
	select {
	case <-b.abandoned:
		return true
	default:
		return false
	}
}

func (b *eventBus) run() {
	defer close(b.finished)
	for {
		b.mu.Lock()
		batch, closed, dropped := b.queue, b.closed, b.dropped
		b.queue, b.dropped = nil, 0
		hs := make([]func(Event), 0, len(b.order))
		live := b.order[:0]
		for _, id := range b.order {
			if h, ok := b.handlers[id]; ok {
				hs = append(hs, h)
				live = append(live, id)
			}
		}
		b.order = live
		b.mu.Unlock()

		if dropped > 0 {
			b.onDrop(dropped)
			if !b.droppedBefore {
				b.droppedBefore = true
				b.log.Warn("event handlers too slow: events dropped (the oldest first); later drops are counted by the metric simba.events.dropped and logged at Debug", "dropped", dropped, "queue", maxQueuedEvents)
			} else {
				b.log.Debug("event handlers too slow: events dropped", "dropped", dropped)
			}
		}
		for _, e := range batch {
			for _, h := range hs {
				if b.isAbandoned() {
					return
				}
				b.deliver(h, e)
			}
		}
		if b.isAbandoned() {
			return
		}
		if len(batch) > 0 {
			continue
		}
		if closed {
			return
		}
		<-b.wake
	}
}

func (b *eventBus) deliver(h func(Event), e Event) {
	defer func() {
		if v := recover(); v != nil {
			b.log.Error("event handler panicked", "event", fmt.Sprintf("%T", e), "panic", v)
		}
	}()
	h(e)
}
