package simba

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The stages of a client's closing, for what Shutdown reports when its ctx
// ends first.
const (
	closeHandOffs   int32 = iota + 1 // the tasks hand off
	closeSession                     // the keeper ends the session
	closeGoroutines                  // the task functions and the client's goroutines end
	closeEvents                      // the handlers get the events published before
)

// runs counts the task functions of a task (or of a group's partitions)
// that have not returned yet, and closes quiet once the task is done and
// none is left. Guarded by the client's mu.
type runs struct {
	n     int
	done  bool
	quiet chan struct{}
}

func newRuns() runs { return runs{quiet: make(chan struct{})} }

func (r *runs) add() { r.n++ }

func (r *runs) remove() {
	r.n--
	if r.n == 0 && r.done {
		close(r.quiet)
	}
}

// finish marks the task done: no function of it starts from now on.
func (r *runs) finish() {
	if r.done {
		return
	}
	r.done = true
	if r.n == 0 {
		close(r.quiet)
	}
}

// running is one task function that has not returned: the term it runs in
// and, once it has begun, the goroutine it runs on (0 before, or if that
// cannot be read).
type running struct {
	h         *holding
	goroutine uint64
}

// runStarting registers the function of h's term before its goroutine
// starts: from then on Shutdown waits for it.
func (c *Client) runStarting(h *holding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[h] = 0
	h.t.runs.add()
	if h.t.group != nil {
		h.t.group.runs.add()
	}
}

// runOn records the goroutine h's function runs on, so that a Shutdown or
// Close called from the function does not wait for it.
func (c *Client) runOn(h *holding) {
	id := goroutineID()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.running[h]; ok {
		c.running[h] = id
	}
}

// runEnded unregisters h's function once it returned (or never began); only
// the first call counts.
func (c *Client) runEnded(h *holding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.running[h]; !ok {
		return
	}
	delete(c.running, h)
	h.t.runs.remove()
	if h.t.group != nil {
		h.t.group.runs.remove()
	}
}

// calledFromTask reports whether the caller runs on the goroutine of a task
// function of this client for which in is true.
func (c *Client) calledFromTask(in func(*LeaderTask) bool) bool {
	id := goroutineID()
	if id == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, g := range c.running {
		if g == id && in(h.t) {
			return true
		}
	}
	return false
}

// stillRunning lists the task functions of this client for which in is
// true that have not returned yet, as `term 4 of election "e"`, sorted.
func (c *Client) stillRunning(in func(*LeaderTask) bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for h := range c.running {
		if in(h.t) {
			out = append(out, fmt.Sprintf("term %d of %s", h.term.ref.Token, h.t.describe()))
		}
	}
	slices.Sort(out)
	return out
}

// describe names the task in messages: election "e" or partition "g.3".
func (t *LeaderTask) describe() string {
	if t.group != nil {
		return fmt.Sprintf("partition %q", t.ref.Election)
	}
	return fmt.Sprintf("election %q", t.ref.Election)
}

// listed joins at most the first five of items, saying how many more
// there are: a group of thousands of partitions gives one line.
func listed(items []string) string {
	const most = 5
	if len(items) <= most {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:most], ", "), len(items)-most)
}

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// notDone lists the tasks among ts whose hand-off is not complete.
func notDone(ts []*LeaderTask) []string {
	var out []string
	for _, t := range ts {
		select {
		case <-t.done:
		default:
			out = append(out, t.describe())
		}
	}
	slices.Sort(out)
	return out
}

// Shutdown closes the client gracefully, as [Client.Close] does, waiting
// for it at most until ctx ends, in the manner of [net/http.Server.Shutdown]:
// it stops every task and group at once (no task contends from then on),
// then waits for every task function to return, every lease to be released
// (task first, then lease), the session to end on the backend and the event
// handlers to be called with the events published before, and returns nil.
//
// If ctx ends first, Shutdown returns an error that wraps ctx.Err() and says
// what was still running (the hand-offs not complete, the task functions
// that had not returned, the session's end, the event handlers). The client
// goes on closing in the background, in the same order, which keeps every
// promise of a term: a lease is released only once its task function has
// returned, or the deadline its term had when it was stopped has passed
// (then the function still runs, and is waited for). Nothing is released
// early because Shutdown stopped waiting. A later Close, or Shutdown with
// another ctx, waits for the rest.
//
// Shutdown is safe to call several times and concurrently with Close: each
// call waits for the same shutdown, within its own ctx. Called from an event
// handler, it acts as Close does there (see [Client.Close]). Called from a
// task function of the client, on the goroutine the client runs it on, it
// begins the shutdown and returns nil at once, since it cannot wait for the
// function that called it: the function should return then, and the client
// finishes closing once it has. Call Close or Shutdown elsewhere to wait for
// that.
func (c *Client) Shutdown(ctx context.Context) error {
	if c.events.inHandler() {
		dropped := c.events.abandon()
		c.log.Warn("client closed from an event handler: no handler is called from now on", "dropped", dropped)
	}
	c.beginClose()
	if c.calledFromTask(func(*LeaderTask) bool { return true }) {
		c.log.Info("client closed from a task function: the client finishes closing once the function returns")
		return nil
	}
	if awaitClosed(ctx, c.closed) {
		return nil
	}
	return fmt.Errorf("simba: shutdown stopped waiting with %s; the client goes on closing in the background: %w", c.closingState(), ctx.Err())
}

// closingState says what the client's closing still waits for.
func (c *Client) closingState() string {
	all := func(*LeaderTask) bool { return true }
	var parts []string
	switch c.closeStage.Load() {
	case closeHandOffs:
		c.mu.Lock()
		tasks := c.closingTasks
		c.mu.Unlock()
		if pending := notDone(tasks); len(pending) > 0 {
			parts = append(parts, fmt.Sprintf("%s not complete (%s)", plural(len(pending), "hand-off"), listed(pending)))
		}
		if fns := c.stillRunning(all); len(fns) > 0 {
			parts = append(parts, fmt.Sprintf("%s running (%s)", plural(len(fns), "task function"), listed(fns)))
		}
		if len(parts) == 0 {
			parts = append(parts, "the groups leaving")
		}
	case closeSession:
		parts = append(parts, "the session ending")
	case closeGoroutines:
		if fns := c.stillRunning(all); len(fns) > 0 {
			parts = append(parts, fmt.Sprintf("%s still running after the hand-off (%s)", plural(len(fns), "task function"), listed(fns)))
		} else {
			parts = append(parts, "the session ending on the backend")
		}
	default:
		parts = append(parts, "the event handlers still being called")
	}
	return strings.Join(parts, " and ")
}

// beginClose starts the client's closing, once: it stops every task and
// group and leaves the waiting to finishClose, on a goroutine of its own.
func (c *Client) beginClose() {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	c.closeStage.Store(closeHandOffs)
	c.stopClient()
	groups := slices.Collect(maps.Values(c.groups))
	tasks := slices.Collect(maps.Values(c.tasks))
	c.closingTasks = tasks
	c.mu.Unlock()

	for _, g := range groups {
		g.stop(RevokeClosed)
	}
	for _, t := range tasks {
		t.stop(RevokeClosed)
	}
	go c.finishClose(groups, tasks)
}

// finishClose waits for the closing begun by beginClose: the hand-offs
// (task first, then lease), the session's end, every goroutine of the
// client, the event handlers (at most handlerWait). Then c.closed is
// closed.
func (c *Client) finishClose(groups []*GroupTask, tasks []*LeaderTask) {
	for _, g := range groups {
		<-g.done
	}
	for _, t := range tasks {
		<-t.done
	}
	c.closeStage.Store(closeSession)
	c.deleteHealth()
	c.stopKeeper()
	<-c.keeperDone
	c.closeStage.Store(closeGoroutines)
	c.wg.Wait()
	c.closeStage.Store(closeEvents)
	c.events.close(handlerWait)
	c.metrics.close()
	close(c.closed)
}

// Shutdown stops the task like [LeaderTask.Stop] and waits, at most until
// ctx ends, for the graceful hand-off: every run of the task's function has
// returned and the lease is released (task first, then lease). Unlike
// [LeaderTask.Close], which returns once the lease is handed off, it also
// waits for a function that ignored its cancellation past its term's
// deadline (the lease is handed off at that deadline all the same).
//
// If ctx ends first, Shutdown returns an error that wraps ctx.Err() and says
// what was still running; the hand-off goes on in the background, as after
// Stop, and never releases the lease before the function returned or the
// term's deadline passed. [LeaderTask.Done] tells when the lease is handed
// off.
//
// Shutdown is safe to call several times, concurrently with Stop and Close,
// and with the client's Close. Called from the task's own function (on the
// goroutine the client runs it on), it stops the task and returns nil at
// once: the hand-off follows when the function returns.
func (t *LeaderTask) Shutdown(ctx context.Context) error {
	t.stop(RevokeStopped)
	if t.calledFromOwn() {
		return nil
	}
	if awaitClosed(ctx, t.runs.quiet) {
		return nil
	}
	var parts []string
	select {
	case <-t.done:
	default:
		parts = append(parts, "its hand-off not complete (the lease not released yet)")
	}
	if fns := t.c.stillRunning(func(x *LeaderTask) bool { return x == t }); len(fns) > 0 {
		parts = append(parts, fmt.Sprintf("%s running (%s)", plural(len(fns), "task function"), listed(fns)))
	}
	return fmt.Errorf("simba: shutdown of %s stopped waiting with %s; the hand-off goes on in the background: %w", t.describe(), strings.Join(parts, " and "), ctx.Err())
}

// calledFromOwn reports whether the caller runs on the goroutine of one of
// t's functions.
func (t *LeaderTask) calledFromOwn() bool {
	return t.c.calledFromTask(func(x *LeaderTask) bool { return x == t })
}

// Shutdown stops the group task like [GroupTask.Stop] and waits, at most
// until ctx ends, for the graceful hand-off of every partition: every run of
// the partitions' functions has returned and every lease is released, as
// [LeaderTask.Shutdown] does for an election. If ctx ends first, it returns
// an error that wraps ctx.Err() and says what was still running; the
// hand-offs go on in the background, and never release a lease before its
// function returned or its term's deadline passed.
//
// Shutdown is safe to call several times, concurrently with Stop and Close,
// and with the client's Close. Called from one of the group's partition
// functions (on the goroutine the client runs it on), it stops the group and
// returns nil at once.
func (t *GroupTask) Shutdown(ctx context.Context) error {
	t.cancel(nil)
	if t.calledFromOwn() {
		return nil
	}
	if awaitClosed(ctx, t.runs.quiet) {
		return nil
	}
	var parts []string
	t.mu.Lock()
	tasks := slices.Collect(maps.Values(t.active))
	for lt := range t.handing {
		tasks = append(tasks, lt)
	}
	t.mu.Unlock()
	if pending := notDone(tasks); len(pending) > 0 {
		parts = append(parts, fmt.Sprintf("%s not complete (%s)", plural(len(pending), "hand-off"), listed(pending)))
	}
	if fns := t.c.stillRunning(func(x *LeaderTask) bool { return x.group == t }); len(fns) > 0 {
		parts = append(parts, fmt.Sprintf("%s running (%s)", plural(len(fns), "task function"), listed(fns)))
	}
	if len(parts) == 0 {
		parts = append(parts, "the group not left yet")
	}
	return fmt.Errorf("simba: shutdown of group %q stopped waiting with %s; the hand-offs go on in the background: %w", t.name, strings.Join(parts, " and "), ctx.Err())
}

// calledFromOwn reports whether the caller runs on the goroutine of one of
// the group's partition functions.
func (t *GroupTask) calledFromOwn() bool {
	return t.c.calledFromTask(func(x *LeaderTask) bool { return x.group == t })
}

// awaitClosed waits for ch to be closed until ctx ends, and reports whether
// it was; a ch closed by then wins over an ended ctx.
func awaitClosed(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
