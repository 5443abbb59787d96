package simba

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/records"
)

// What a run's outcome leads to beyond its own record: the streak of
// failed runs, the failure handler, the pause after failures, and the
// report of skipped starts.

// leaderRun runs fn once as the run of a leader task's term
// (RunWhileLeader), and counts its outcome as a schedule's run's: the
// streak of failures, the failure handler.
func (c *Client) leaderRun(ctx context.Context, term *Term, fn func(context.Context, *Term) error) error {
	ri := &RunInfo{Source: sourceFirst, Attempt: 1} // the source is learnt from the status
	start := time.Now()
	result, err := c.invoke(ctx, term, fn, ri)
	if result != ResultFailed && result != ResultSucceeded {
		return err // cancelled: neither a failure nor a success
	}
	t := taskOf(ctx)
	streak := 0
	if result == ResultFailed {
		streak = t.streakAtStart(term) + 1
	}
	t.recordStreak(term, streak)
	if result == ResultFailed {
		c.notifyFailure(t, RunFailure{
			TermRef: term.ref, Member: c.memberID(term.gen), Source: term.status.source(sourceFirst),
			Start: start, Duration: time.Since(start), Attempts: 1, Err: err, Failures: streak,
		})
	}
	return err
}

// streakAtStart returns the failed runs in a row before term's runs: the
// count in the status the previous holders left (it survives hand-offs),
// or the task's own on this client when there is no status to read. Call
// it once the status is opened, or it waits for that (bounded).
func (t *LeaderTask) streakAtStart(term *Term) int {
	if term.status.awaitOpened(term.gen.ctx) {
		if n, ok := term.status.streakBefore(); ok {
			return n
		}
	}
	if t == nil {
		return 0
	}
	return int(t.failStreak.Load())
}

// recordStreak records n failed runs in a row, in the status and in the
// task.
func (t *LeaderTask) recordStreak(term *Term, n int) {
	if t != nil {
		t.failStreak.Store(int64(n))
	}
	term.status.failStreak(n)
}

// notifyFailure calls the failure handler of t, if it has one, for the
// failed run f, on a goroutine of the client's (Shutdown waits for it),
// with a ctx that ends when the client closes. A panic in the handler is
// logged.
func (c *Client) notifyFailure(t *LeaderTask, f RunFailure) {
	if t == nil || t.onFailure == nil {
		return
	}
	h := t.onFailure
	c.wg.Go(func() {
		defer func() {
			if v := recover(); v != nil {
				c.log.Error("failure handler panicked", "election", f.Election, "panic", v, "stack", string(debug.Stack()))
			}
		}()
		h(c.ctx, f)
	})
}

// pause pauses the schedule of t after failures failed runs in a row, the
// last with err: it publishes Paused, ends the term (RevokePaused: the
// lease is released once the runs returned) and disables the term's lease
// in the operation records, with an audit entry, as `simba disable` does,
// so that no node runs it until an operator enables it. The writes are
// made during the hand-off, before the lease is released, bounded by the
// deadline the term had when it ended.
//
// Where the disable cannot be recorded (a backend without records, or the
// writes failed), the task stops on this client: it runs nothing more
// here, and the error is logged; other clients running the task are not
// paused.
func (c *Client) pause(t *LeaderTask, term *Term, failures int, err error) {
	ref := term.ref
	at := time.Now()
	reason := fmt.Sprintf("paused after %d failed runs in a row: %v", failures, err)
	c.log.Warn("pausing the schedule after failed runs in a row: it is disabled until an operator enables it", "election", ref.Election, "token", ref.Token, "failures", failures, "err", err)
	c.events.publish(Paused{TermRef: ref, Failures: failures, Err: err, At: at})
	c.revokeTerm(term, RevokePaused, nil)
	if werr := c.recordPause(term, reason, at); werr != nil {
		c.log.Error("the schedule paused, but its disable could not be recorded: the task stops on this client, other clients are not paused", "election", ref.Election, "err", werr)
		if t != nil {
			t.stop(RevokeStopped)
		}
	}
}

// recordPause writes the disable of term's lease, with Paused set, and its
// audit entry, on term's session.
func (c *Client) recordPause(term *Term, reason string, at time.Time) error {
	g := term.gen
	rec, ok := g.sess.(backend.Records)
	if !ok {
		return fmt.Errorf("simba: the backend keeps no operation records")
	}
	ctx, cancel := context.WithDeadline(g.ctx, term.HandOffDeadline())
	defer cancel()
	member, lease := c.memberID(g), term.ref.Election
	op := records.Op{By: member, At: at, Reason: reason, Paused: true}
	if _, err := rec.PutRecord(ctx, records.DisabledPrefix+lease, records.Encode(op), backend.Condition{}); err != nil {
		return fmt.Errorf("simba: writing the disable of %q: %w", lease, err)
	}
	if err := c.ops.refresh(g, ctx); err != nil {
		// The watch delivers it; until then the task may win the lease
		// again, and its term's first read of the operations stops it.
		c.log.Debug("reading the operations after the pause failed", "election", lease, "err", err)
	}
	entry := records.Audit{
		V: records.AuditVersion, At: at, By: member, Reason: reason,
		Op: records.OpDisable, Target: lease, Changed: true, Change: "paused itself after failed runs: disabled; was enabled",
	}
	if err := records.AppendAudit(ctx, rec, entry); err != nil {
		// The pause is in force: only its entry is missing.
		c.log.Error("the schedule paused, but its audit entry could not be written", "election", lease, "err", err)
	}
	return nil
}

// revokeTerm ends term, whose work is running, for reason.
func (c *Client) revokeTerm(term *Term, reason RevokeReason, cause error) {
	c.mu.Lock()
	var h *holding
	for x := range c.running {
		if x.term == term {
			h = x
			break
		}
	}
	c.mu.Unlock()
	if h != nil {
		h.revoke(reason, cause)
	}
}

// skip reports the planned starts sp of term skipped for reason, as one
// occasion: a Skipped event, the counter simba.schedule.skipped, a history
// entry and the status's count.
func (c *Client) skip(term *Term, reason SkipReason, sp span) {
	if sp.count == 0 {
		return
	}
	ref := term.ref
	c.log.Info("planned starts skipped", "election", ref.Election, "reason", reason, "count", sp.count, "first", sp.first, "last", sp.last)
	c.metrics.skipped(ref, reason, sp.count)
	term.status.skipped(reason, sp)
	c.events.publish(Skipped{TermRef: ref, Reason: reason, Count: sp.count, First: sp.first, Last: sp.last, At: time.Now()})
}
