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

// runStarting registers the function of h's term before its goroutine
// starts: from then on Shutdown waits for it.
func (c *Client) runStarting(h *holding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[h] = struct{}{}
	h.t.runs.add()
	if h.t.group != nil {
		h.t.group.runs.add()
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

// taskKey is the key of the value every task function's ctx carries: the
// *LeaderTask it runs for. Shutdown looks for it in its own ctx, to refuse
// to wait for the function that called it.
type taskKey struct{}

// withTask returns ctx carrying t (see taskKey).
func withTask(ctx context.Context, t *LeaderTask) context.Context {
	return context.WithValue(ctx, taskKey{}, t)
}

// taskOf returns the task whose function's ctx ctx is, or derives from;
// nil for any other ctx.
func taskOf(ctx context.Context) *LeaderTask {
	t, _ := ctx.Value(taskKey{}).(*LeaderTask)
	return t
}

// waitsForItself is the error of a Shutdown called with the ctx of a task
// function it would wait for: what began (the stop), and what to do.
func waitsForItself(what string, own *LeaderTask) error {
	return fmt.Errorf("simba: shutdown of %s called with the ctx of its own task function (%s), which it would wait for: the stop has begun and completes once that function returns (call Stop from a task function)", what, own.describe())
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

// Stop begins the client's closing, as [Client.Shutdown] describes it, and
// returns at once; [Client.Done] tells when it is over. It is the form to
// call from a task function or an event handler, which must not wait for
// the client's closing (it waits for them). Stop is idempotent.
func (c *Client) Stop() { c.beginClose() }

// Done is closed once the client has closed: every task stopped and handed
// off, every task function returned, the session ended, every goroutine of
// the client ended and the event handlers called (or abandoned, see
// [Client.Shutdown]). It is closed at the moment Shutdown returns nil.
func (c *Client) Done() <-chan struct{} { return c.closed }

// Shutdown closes the client gracefully and waits for it at most until ctx
// ends, in the manner of [net/http.Server.Shutdown]: it stops every task
// and group at once (no task contends from then on), then waits
//
//   - for every task function to return. One that ignores the cancellation
//     of its ctx delays Shutdown until it returns (its lease is handed off at
//     its term's deadline all the same);
//   - for every lease to be released (task first, then lease), retrying
//     failures for about one TTL from the start of the release. A lease not
//     released by then is logged and goes with the session;
//   - for the session to end on the backend, at most until its deadline
//     plus the drift margin; past it the session expires by itself;
//   - for the event handlers to be called with the events published before,
//     at most 5 seconds. A handler still running then is abandoned: it is
//     logged, that handler call is the last one (its goroutine ends when it
//     returns), and the events not yet delivered are dropped.
//
// and returns nil, at the moment [Client.Done] is closed. If ctx ends first,
// Shutdown returns an error that wraps ctx.Err() and says what was still
// running. The client goes on closing in the background, in the same
// order, which keeps every promise of a term: a lease is released only once
// its task function has returned, or the deadline its term had when it was
// stopped has passed. Nothing is released early because Shutdown stopped
// waiting. A later Shutdown or Close waits for the rest.
//
// A task function or an event handler must not wait for the client's
// closing, which waits for it: call [Client.Stop] there. Called with the
// ctx of one of the client's task functions (or a ctx derived from it),
// Shutdown knows it: it begins the closing and returns an error at once.
// Called from an event handler it cannot know, and waits the 5 seconds
// above before abandoning the handler.
//
// Shutdown is safe to call several times and concurrently with Stop and
// Close: each call waits for the same closing, within its own ctx.
func (c *Client) Shutdown(ctx context.Context) error {
	c.beginClose()
	if own := taskOf(ctx); own != nil && own.c == c {
		return waitsForItself("the client", own)
	}
	if awaitClosed(ctx, c.closed) {
		return nil
	}
	return fmt.Errorf("simba: shutdown stopped waiting with %s; the client goes on closing in the background: %w", c.closingState(), ctx.Err())
}

// Close is [Client.Shutdown] without a bound: Shutdown(context.Background()).
// It must not be called from a task function or an event handler of the
// client (see Shutdown); use [Client.Stop] there. Close is idempotent.
func (c *Client) Close() error { return c.Shutdown(context.Background()) }

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

// Stop stops the election and returns at once; [LeaderTask.Done] tells when
// it is over. The current term is revoked and handed off: its function's
// ctx is cancelled, and the lease is released once the function has
// returned, or at the latest at the deadline the term had when it was
// stopped (the term is no longer extended). A release that keeps failing is
// retried at most until the session's deadline as it began (about one TTL);
// then the lease is left to go with the session, which the client ends at
// once (logged, with a [SessionLost] event) unless it is closing or not
// renewed anyway. Stop is idempotent, and is the form to call from the
// task's own function.
func (t *LeaderTask) Stop() { t.stop(RevokeStopped) }

// Done is closed once the task has stopped (by [LeaderTask.Stop], Shutdown,
// Close or the client's closing), its lease is handed off, and every run of
// its function has returned: at the moment Shutdown returns nil. After that
// the same election may be started again on the client.
func (t *LeaderTask) Done() <-chan struct{} { return t.runs.quiet }

// Shutdown stops the task like [LeaderTask.Stop] and waits, at most until
// ctx ends, for all of it: every run of the task's function has returned
// and the lease is released (task first, then lease). It returns nil at the
// moment [LeaderTask.Done] is closed. A function that ignores its
// cancellation delays Shutdown until it returns, though the lease is handed
// off at its term's deadline all the same.
//
// If ctx ends first, Shutdown returns an error that wraps ctx.Err() and says
// what was still running; the stop goes on in the background, and never
// releases the lease before the function returned or the term's deadline
// passed. Called with the ctx of the task's own function (or one derived
// from it), it stops the task and returns an error at once, since it would
// wait for itself.
//
// Shutdown is safe to call several times, concurrently with Stop and Close,
// and with the client's closing.
func (t *LeaderTask) Shutdown(ctx context.Context) error {
	t.stop(RevokeStopped)
	if own := taskOf(ctx); own == t {
		return waitsForItself(t.describe(), own)
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

// Close is [LeaderTask.Shutdown] without a bound. It must not be called from
// the task's own function, which it would wait for: use Stop there.
func (t *LeaderTask) Close() error { return t.Shutdown(context.Background()) }

// Stop leaves the group and stops every partition, and returns at once;
// [GroupTask.Done] tells when it is over. Each partition's term is handed
// off as [LeaderTask.Stop] describes, partitions moved away by an earlier
// view change and still handing off included. Stop is idempotent, and is
// the form to call from one of the group's partition functions.
func (t *GroupTask) Stop() { t.cancel(nil) }

// Done is closed once the group task has stopped, every partition has
// handed off and every run of the partitions' functions has returned: at
// the moment Shutdown returns nil. After that the group may be started
// again on the client.
func (t *GroupTask) Done() <-chan struct{} { return t.runs.quiet }

// Shutdown stops the group task like [GroupTask.Stop] and waits, at most
// until ctx ends, for all of it: every run of the partitions' functions has
// returned and every lease is released, as [LeaderTask.Shutdown] does for an
// election. It returns nil at the moment [GroupTask.Done] is closed. If ctx
// ends first, it returns an error that wraps ctx.Err() and says what was
// still running; the hand-offs go on in the background, and never release a
// lease before its function returned or its term's deadline passed. Called
// with the ctx of one of the group's partition functions, it stops the
// group and returns an error at once, since it would wait for itself.
//
// Shutdown is safe to call several times, concurrently with Stop and Close,
// and with the client's closing.
func (t *GroupTask) Shutdown(ctx context.Context) error {
	t.cancel(nil)
	if own := taskOf(ctx); own != nil && own.group == t {
		return waitsForItself(fmt.Sprintf("group %q", t.name), own)
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

// Close is [GroupTask.Shutdown] without a bound. It must not be called from
// one of the group's partition functions, which it would wait for: use Stop
// there.
func (t *GroupTask) Close() error { return t.Shutdown(context.Background()) }

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
