package stream

import (
	"context"
	"fmt"
	"sync"

	"github.com/simba-go/simba"
)

// Task is a started stream: a partition group whose per-partition work is
// the event loop. Create it with [Start]. It ends as every task of simba
// does (see the lifecycle of [simba.Client]): [Task.Stop] begins the stop
// and returns at once, from a handler too; [Task.Done] is closed once it is
// over; [Task.Shutdown] waits for it within a ctx, and [Task.Close] without
// bound (never from the task's own handlers).
//
// A Task is safe for concurrent use by multiple goroutines.
type Task struct {
	group      *simba.GroupTask
	src        Source
	newHandler func(partition int) Handler
	o          options

	// wg owns every goroutine the loops start (pollers and the goroutines
	// that run Process and Window), including calls abandoned at their
	// timeout, which outlive their loop.
	wg sync.WaitGroup

	stopping context.Context // cancelled by Stop
	stop     context.CancelFunc
	done     chan struct{} // closed when everything has ended

	mu      sync.Mutex
	running int  // loops between their start and the end of their hand-off
	closing bool // no new loop starts
	idle    chan struct{}
}

// taskKey is the key of the [Task] in the ctx of its calls, which lets
// Shutdown tell the task's own calls from the rest.
type taskKey struct{}

// Start runs the stream on group g: for every partition of g this client
// holds, it loads the partition's checkpoint, gets a [Handler] from
// newHandler, and runs the event loop over src until the term ends. It
// returns at once; the group's partitions are contended for in the
// background, as with [simba.Group.RunWhileLeader].
//
// Every member of the group must run the same stream (the same source and
// options). Start returns the errors of [simba.Group.RunWhileLeader], and one
// matching [simba.ErrInvalidArgument] for a nil argument or a bad option.
func Start(g *simba.Group, src Source, newHandler func(partition int) Handler, opts ...Option) (*Task, error) {
	switch {
	case g == nil:
		return nil, invalid("nil group")
	case src == nil:
		return nil, invalid("nil source")
	case newHandler == nil:
		return nil, invalid("nil handler function")
	}
	o := defaults()
	for _, opt := range opts {
		if opt == nil {
			return nil, invalid("nil option")
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	t := &Task{
		src:        src,
		newHandler: newHandler,
		o:          o,
		done:       make(chan struct{}),
		idle:       make(chan struct{}),
	}
	t.stopping, t.stop = context.WithCancel(context.Background())
	gt, err := g.RunWhileLeader(t.run)
	if err != nil {
		t.stop()
		return nil, err
	}
	t.group = gt
	go t.own()
	return t, nil
}

// Name returns the group's name.
func (t *Task) Name() string { return t.group.Name() }

// Partitions returns the partitions this client contends for in its latest
// view of the group, sorted.
func (t *Task) Partitions() []int { return t.group.Partitions() }

// Stop begins stopping the stream and returns at once. Every partition's
// loop hands off while its term is still valid: it stops taking messages,
// waits for the calls in flight (at most until the term's deadline as it
// stood when the hand-off began), writes a final checkpoint, and calls
// Close. Then the group is stopped and the leases released. [Task.Done]
// tells when all of it is over. Stop is idempotent and safe to call from
// anywhere, from the task's own handlers too: it is how a handler stops its
// stream.
func (t *Task) Stop() { t.stop() }

// Done is closed once the stream has stopped: every partition handed off
// (final checkpoint, Close, lease released), the group stopped, every
// handler call returned, abandoned ones included, and every goroutine of
// the task ended. It is closed at the moment [Task.Shutdown] returns nil,
// and also when the stream stops by itself, which only the closing of its
// client makes it do.
func (t *Task) Done() <-chan struct{} { return t.done }

// Shutdown stops the stream like [Task.Stop] and waits for [Task.Done], at
// most until ctx ends, as the lifecycle of [simba.Client] says. It returns
// nil once every partition has handed off and every goroutine of the task
// has ended. If ctx ends first, it returns an error that wraps ctx.Err() and
// says what was still running; the stop goes on in the background in the
// same order, and no lease is released before its loop has handed off or
// its term's deadline has passed.
//
// Given the ctx of one of the task's own calls (Init, Process, Window,
// Close, a [Wrapper]'s, the [Source]'s or the [CheckpointStore]'s) or a ctx
// derived from it, Shutdown cannot wait for the call that made it: it begins
// the stop, as Stop does, and returns an error at once instead of waiting.
// Call Stop there.
//
// Shutdown is safe to call several times and concurrently with Stop and
// Close. Shut a Task down before its client: a client closed first revokes
// every term at once, and the loops' final checkpoints may then be refused.
func (t *Task) Shutdown(ctx context.Context) error {
	t.stop()
	if own, _ := ctx.Value(taskKey{}).(*Task); own == t {
		return fmt.Errorf("simba/stream: shutdown of %s called with the ctx of one of its own calls: it cannot wait for itself, so it only began the stop (a handler stops its stream with Stop)", t)
	}
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-t.done: // done wins over an ended ctx
		return nil
	default:
	}
	t.mu.Lock()
	loops := t.running
	t.mu.Unlock()
	what := "the group's hand-offs"
	switch {
	case loops == 1:
		what = "1 partition loop"
	case loops > 1:
		what = fmt.Sprintf("%d partition loops", loops)
	default:
		select {
		case <-t.group.Done():
			what = "calls abandoned at a hand-off's bound"
		default:
		}
	}
	return fmt.Errorf("simba/stream: shutdown of %s stopped waiting with %s still running; the stop goes on in the background: %w", t, what, ctx.Err())
}

// Close is Shutdown(context.Background()): it stops the stream and waits
// for all of it, without bound. It must not be called from the task's own
// handlers: it would wait for the very call that made it, forever, as
// [net/http.Server.Shutdown] called from an HTTP handler does. Call
// [Task.Stop] there. Close a Task before its client, as with Shutdown.
func (t *Task) Close() error {
	return t.Shutdown(context.Background())
}

// own ends the task: when stopped (or when the group ended by itself), it
// waits for every loop to hand off, stops the group, and waits for every
// goroutine of the loops.
func (t *Task) own() {
	select {
	case <-t.stopping.Done():
	case <-t.group.Done():
	}
	t.stop()
	t.mu.Lock()
	t.closing = true
	if t.running == 0 {
		close(t.idle)
	}
	t.mu.Unlock()
	<-t.idle
	t.group.Stop()
	<-t.group.Done()
	t.wg.Wait()
	close(t.done)
}

// enter registers a loop about to start, unless the task is stopping.
func (t *Task) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		return false
	}
	t.running++
	return true
}

// leave unregisters a loop that has handed off.
func (t *Task) leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running--
	if t.closing && t.running == 0 {
		close(t.idle)
	}
}

// run is the group's function: one loop per term of a partition. Once the
// task is stopping it returns at once, keeping the term until the group is
// stopped.
func (t *Task) run(ctx context.Context, term *simba.Term, partition int) error {
	if !t.enter() {
		return nil
	}
	defer t.leave()
	l := &loop{t: t, o: &t.o, term: term, partition: partition,
		log: t.o.logger.With("lease", term.Name(), "token", term.Token())}
	l.coord = &Coordinator{l: l}
	l.ctx = context.WithValue(context.WithValue(ctx, coordinatorKey{}, l.coord), taskKey{}, t)
	err := l.run()
	if err == nil && l.coord.handingOff() && ctx.Err() == nil && t.stopping.Err() == nil {
		l.log.Info("handed off at the handler's request: giving the lease up", "offset", l.saved)
		return fmt.Errorf("%w: stream: partition %d (token %d) handed off at its handler's request", simba.ErrYield, partition, term.Token())
	}
	return err
}

// String describes the task for logs.
func (t *Task) String() string { return fmt.Sprintf("stream %q", t.Name()) }
