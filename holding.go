package simba

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/internal/plant"
	"github.com/simba-go/simba/internal/records"
)

// holding is one term of a started election, from the win to the end of its
// hand-off. The term's work runs on a goroutine of its own (or through the
// executor); callbacks on the session, on the task's stop and on the lease
// revoke the term while it runs, so a held lease needs no goroutine besides
// the work's. After the hand-off, whoever completed it carries the
// election's loop on.
type holding struct {
	t         *LeaderTask
	g         *generation
	lease     backend.Lease
	term      *Term
	runCtx    context.Context
	cancelRun context.CancelFunc

	mu        sync.Mutex
	stops     []func() bool // undo the watch
	reason    RevokeReason
	cause     error
	revokedAt time.Time
	running   bool        // the work has not returned yet
	capTimer  *time.Timer // hands off at the term's deadline if the work ignores cancellation
	claimed   bool        // the hand-off is taken care of
	resignV   uint64      // version of the resign request carried out
}

// holds reports whether this client still holds the lease after a term
// ended for reason: it does when the client ended the term itself.
func holds(reason RevokeReason) bool {
	switch reason {
	case RevokeStopped, RevokeClosed, RevokeYielded, RevokeDisabled, RevokeResigned, RevokeDrained, RevokePaused, RevokeStuck:
		return true
	}
	return false
}

// startTerm begins a term on lease; the caller, which owns the election's
// loop, then runs it (holding.run). It returns nil, having released the
// lease, if the term could not begin.
func (t *LeaderTask) startTerm(g *generation, lease backend.Lease) *holding {
	c := t.c
	ref := t.ref
	ref.Token = lease.Token()
	term := newTerm(ref, g)
	if !term.valid() {
		// Won after the session's deadline: the term never began.
		reason, cause := RevokeDeadline, error(nil)
		if g.ended.Load() {
			reason, cause = g.why()
		}
		term.revoke(reason, cause)
		t.release(g, lease, nil)
		return nil
	}
	c.log.Info("elected", "election", ref.Election, "token", ref.Token, "session", g.sess.ID())
	c.metrics.elected(ref)
	c.events.publish(Elected{TermRef: ref, Session: g.sess.ID(), At: term.start})
	term.status = c.openStatus(g, term, t.schedule)

	runCtx, cancelRun := context.WithCancel(withTask(context.Background(), t))
	h := &holding{t: t, g: g, lease: lease, term: term, runCtx: runCtx, cancelRun: cancelRun, running: true}
	if t.watchdog > 0 {
		term.dog = newWatchdog(term, t.watchdog, h.stuck)
	}
	c.runStarting(h)
	h.watch()
	t.current.Store(h)
	h.checkOps()
	return h
}

// run checks the term's start against the operations, runs the term's
// work, waits for the term to end (an early return keeps the term), and
// hands off. It reports whether the caller carries the election's loop on
// (see after): false when the hand-off was completed elsewhere. All of it
// on the goroutine that won the lease: no goroutine is woken between the
// grant and the first run, nor between the end of the work and the
// release (issue 43).
func (h *holding) run() bool {
	// A disable or drain found here revokes the term before its first
	// run. Not only through the view's subscribers: when the view's watch
	// applied the same records first, the read here changes nothing and
	// notifies no one, and the watch's notification may not have reached
	// this term yet (a process that started with the lease free, its first
	// listing and its first term at the same instant: the simulation found
	// the term's first run begun before the revocation). A revocation
	// meanwhile cuts the read short (see opsView.checkStart).
	h.t.c.ops.checkStart(h.g, h.term, h.lease, h.runCtx)
	h.checkOps()
	close(h.term.ready)
	var err error
	select {
	case <-h.term.Revoked(): // revoked before it began: an operator's stop, disable or drain
	default:
		err = h.work()
	}
	h.t.c.runEnded(h)
	h.mu.Lock()
	h.running = false
	h.mu.Unlock()
	if errors.Is(err, ErrYield) {
		h.revoke(RevokeYielded, nil)
	}
	<-h.term.Revoked()
	return h.handOff(false)
}

// next carries the election's loop on after a hand-off made off the work's
// goroutine (see after), on a goroutine of its own.
func (h *holding) next() {
	if h.after() {
		h.t.contend()
	}
}

// after is the election's loop after the hand-off: it completes a stopped
// task, or sits out one lease term after a yield, a resignation or a term
// given up for want of progress; it reports whether to contend again.
func (h *holding) after() bool {
	h.mu.Lock()
	reason := h.reason
	h.mu.Unlock()
	if h.t.ctx.Err() != nil {
		h.t.finish()
		return false
	}
	if (reason == RevokeYielded || reason == RevokeResigned || reason == RevokeStuck) && !backoff.Sleep(h.t.ctx, h.g.ttl) {
		h.t.finish()
		return false
	}
	return true
}

// work runs the task's function for the term: on this goroutine, or
// through the executor while this goroutine waits. The function is
// unregistered (see Client.runEnded) as soon as it returns, on the goroutine
// it ran on, before that goroutine can run another.
func (h *holding) work() error {
	t, c := h.t, h.t.c
	if t.exec == nil {
		defer c.runEnded(h)
		return t.body(h.runCtx, h.term)
	}
	done := make(chan error, 1)
	c.wg.Add(1)
	t.exec(func() {
		defer c.wg.Done()
		err := t.body(h.runCtx, h.term)
		c.runEnded(h)
		done <- err
	})
	return <-done
}

// stuck gives the term up when its work went without progress for the
// limit of the task's progress watchdog (see [WithProgressWatchdog]): the
// lease is handed off as for any revoke the client makes itself, and the
// task sits out one lease term (see next) so that another member takes
// over.
func (h *holding) stuck(idle time.Duration) {
	ref, limit := h.term.ref, h.t.watchdog
	h.t.c.log.Warn("no progress within the watchdog's limit: giving the term up", "election", ref.Election, "token", ref.Token, "limit", limit, "idle", idle)
	h.revoke(RevokeStuck, fmt.Errorf("simba: no progress for %v", limit))
}

// watch arranges for the term to be revoked when the session ends, the task
// stops or the lease is lost. The callbacks run on goroutines of their own
// and wait for h.mu, so they see the watch complete.
func (h *holding) watch() {
	h.mu.Lock()
	defer h.mu.Unlock()
	stopOps := h.t.c.ops.subscribe(h.checkOps)
	h.stops = []func() bool{
		context.AfterFunc(h.g.ctx, func() { h.revoke(h.g.why()) }),
		context.AfterFunc(h.t.ctx, func() { h.revoke(h.t.stopReason(), nil) }),
		func() bool { stopOps(); return true },
	}
	lost := func() {
		select {
		case <-h.g.sess.Done(): // the lease went with the session
			h.revoke(RevokeSessionLost, backend.ErrSessionDone)
		default:
			h.revoke(RevokeLeaseLost, nil)
		}
	}
	if n, ok := h.lease.(backend.LostNotifier); ok {
		// The term's validity ends on the backend's goroutine, before it
		// goes on (a hand-off to a preferred holder withdraws the
		// candidacy next); the revoke follows on a goroutine of its own.
		h.stops = append(h.stops, n.OnLost(func() { h.term.endNow(); h.t.c.wg.Go(lost) }))
	} else {
		done := make(chan struct{})
		h.t.c.wg.Go(func() {
			select {
			case <-h.lease.Lost():
				lost()
			case <-done:
			}
		})
		h.stops = append(h.stops, func() bool { close(done); return true })
	}
}

// checkOps revokes the term if an operator disabled the election, drained
// this member, or asked this term to resign.
func (h *holding) checkOps() {
	ops := h.t.c.ops
	if r := ops.blocked(h.term.ref, h.t.c.memberID(h.g)); r != 0 {
		h.revoke(r, nil)
		return
	}
	if v, ok := ops.resigns(h.term.ref.Election, h.term.ref.Token); ok {
		h.mu.Lock()
		h.resignV = v
		h.mu.Unlock()
		h.revoke(RevokeResigned, nil)
	}
}

// revoke ends the term, once: the work's ctx is cancelled and Revoked is
// closed. The term is not extended past this point. If the client still
// holds the lease and the work is still running, the hand-off waits for the
// work at most until the deadline the term had when it was revoked; if the
// lease is gone already, the hand-off is complete at once and the election
// contends again without waiting for the work.
func (h *holding) revoke(reason RevokeReason, cause error) {
	c, ref := h.t.c, h.term.ref
	h.mu.Lock()
	if h.reason != 0 {
		h.mu.Unlock()
		return
	}
	h.reason, h.cause = reason, cause
	h.revokedAt = time.Now()
	running := h.running
	if holds(reason) {
		h.term.handOffUntil.Store(h.g.deadline.Load())
	}
	if running && holds(reason) {
		c.wg.Add(1) // for atCap; undone if the timer is stopped
		h.capTimer = time.AfterFunc(max(h.term.leftNow(), 0), h.atCap)
	}
	h.mu.Unlock()

	c.metrics.revokedTerm(ref, reason)
	c.events.publish(Revoked{TermRef: ref, Reason: reason, Err: cause, At: h.revokedAt})
	h.term.revoke(reason, cause)
	h.cancelRun()
	// Logged once the term is over and its work told, not before: a log
	// line is a write, and the hand-off waits for nothing but the work.
	c.log.Info("revoked", "election", ref.Election, "token", ref.Token, "reason", reason)
	if running && (!holds(reason) || plant.Is(plant.ReleaseBeforeExit)) && h.handOff(false) {
		c.wg.Go(h.next)
	}
}

// atCap runs at the capped deadline of a revoked term whose work ignored
// the cancellation: the lease is handed off without waiting any longer, and
// the election's loop goes on here while the work still runs.
func (h *holding) atCap() {
	defer h.t.c.wg.Done()
	if !h.handOff(true) {
		return
	}
	ref := h.term.ref
	h.t.c.log.Warn("task ignored cancellation; handed off at the term's deadline", "election", ref.Election, "token", ref.Token)
	h.next()
}

// handOff releases the lease if the client still holds it and publishes the
// end of the hand-off, unless it was done already. At the cap it does
// nothing once the work has returned: the work's goroutine hands off then.
// It reports whether this call did the hand-off.
func (h *holding) handOff(atCap bool) bool {
	h.mu.Lock()
	if h.claimed || (atCap && !h.running) {
		h.mu.Unlock()
		return false
	}
	h.claimed = true
	h.t.current.CompareAndSwap(h, nil)
	if !atCap && h.capTimer != nil && h.capTimer.Stop() {
		h.t.c.wg.Done() // atCap will not run
	}
	reason, revokedAt, stops, resignV := h.reason, h.revokedAt, h.stops, h.resignV
	h.stops = nil
	h.mu.Unlock()

	for _, stop := range stops {
		stop()
	}
	h.cancelRun()
	var final []backend.Record
	// The planted bug releases at once: not after the status's last
	// writes either, which on a slow backend would take longer than the
	// run's exit and hide the bug from the checkers.
	if holds(reason) && !plant.Is(plant.ReleaseBeforeExit) {
		_, together := h.lease.(backend.RecordReleaser)
		final = h.term.status.handedOff(h.g, together, h.t.endedWords(reason), revokedAt)
	}
	h.term.handOffUntil.Store(0) // the lease goes now
	released := holds(reason) && h.t.release(h.g, h.lease, final)
	if reason == RevokeResigned {
		h.t.c.ops.consume(h.g, records.ResignPrefix+h.term.ref.Election, resignV)
	}
	d := time.Since(revokedAt)
	h.t.c.metrics.handedOff(h.term.ref, d)
	h.t.c.events.publish(HandedOff{TermRef: h.term.ref, Duration: d, Released: released, At: time.Now()})
	return true
}

// endedWords says how a term of t that ended for reason ended, in its
// status's term log: a partition stopped because the group's assignment
// moved it ended records.EndedMoved.
func (t *LeaderTask) endedWords(reason RevokeReason) string {
	if reason == RevokeStopped && t.moved.Load() {
		return records.EndedMoved
	}
	return reason.String()
}
