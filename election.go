package simba

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
)

// Election is a named election on a client. It is a lightweight value: start
// it with [Election.RunWhileLeader] or [Election.Schedule].
type Election struct {
	c    *Client
	name string
}

// Election returns the election called name. Names are 1–128 characters of
// A–Z a–z 0–9 . _ -, starting with a letter or a digit; they live in one space
// per backend (and key prefix) shared with partition groups, whose partition p
// of group g uses the lease "g.p", so do not name an election like a group's
// partition. A bad name is reported when the election is started.
func (c *Client) Election(name string) *Election { return &Election{c: c, name: name} }

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// RunWhileLeader starts the election at once and runs fn once per term won,
// each time on a new goroutine (or through [WithExecutor]).
//
// When the term is revoked, fn's ctx is cancelled and term.Revoked() is
// closed; fn should return when either happens. A fn that returns early keeps
// the term until the term ends, and does not run again before the next term.
// An error or a panic from fn is logged and published as [WorkCompleted]
// with result [ResultFailed] ([ResultCancelled] when the term had already ended); it
// never affects the election. An error wrapping [ErrYield] gives the lease up
// and sits out one lease term (published with result [ResultSucceeded], or
// [ResultFailed] when the error reports a failure: see [ResultFailed]).
//
// It returns [ErrAlreadyStarted] when the election is already started on this
// client, [ErrClosed] when the client is closing, and errors matching
// [backend.ErrInvalidName] or [ErrInvalidArgument] for bad input.
func (e *Election) RunWhileLeader(fn func(ctx context.Context, term *Term) error, opts ...TaskOption) (*LeaderTask, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil task function for election %q", ErrInvalidArgument, e.name)
	}
	ref := TermRef{Election: e.name, Partition: -1}
	return e.c.start("election", ref, nil, "", func(ctx context.Context, t *Term) error {
		return e.c.leaderRun(ctx, t, fn)
	}, opts)
}

// Schedule starts the election at once and, in every term won, runs fn on
// schedule s: one loop per term, calling term.EnsureValid() before every
// attempt of every run (see [Schedule] for the timing rules and the run
// policies). Each run goes on a goroutine of its own, so that the loop
// sees the planned starts that come while a run is going; the term's
// hand-off waits for every run the loop started, as for a leader task's
// function. A failed run (error or panic) is logged and published, and the
// loop goes on; a run returning an error wrapping [ErrYield] ends the loop
// (the other runs going on are cancelled), gives the lease up and sits out
// one lease term. The loop ends with its term.
//
// Errors are those of [Election.RunWhileLeader], and an error matching
// [ErrInvalidSchedule] for a schedule that cannot run.
func (e *Election) Schedule(s Schedule, fn func(ctx context.Context, term *Term) error, opts ...TaskOption) (*LeaderTask, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("%w: nil task function for election %q", ErrInvalidArgument, e.name)
	}
	ref := TermRef{Election: e.name, Partition: -1}
	return e.c.start("election", ref, nil, s.String(), func(ctx context.Context, t *Term) error {
		return s.run(ctx, t, e.c, fn)
	}, opts)
}

// LeaderTask is a started election: it contends, runs its work in every term
// won, and hands off when stopped.
type LeaderTask struct {
	c        *Client
	ref      TermRef // Token unset
	body     func(context.Context, *Term) error
	exec     func(f func())
	schedule string     // the schedule's description, "" for RunWhileLeader
	group    *GroupTask // the group of a partition's election, nil for an election

	ctx    context.Context // cancelled by Stop or the client's Close
	cancel context.CancelCauseFunc
	// current is the term being held, until its hand-off: stop revokes it
	// on the caller's goroutine (the holding's watch of ctx would do it on
	// a goroutine of its own, a wake-up on the hand-off's path).
	current  atomic.Pointer[holding]
	done     chan struct{}
	finished sync.Once
	onDone   []func() // guarded by c.mu; run by finish
	runs     runs     // the task's functions not returned yet; guarded by c.mu
	// moved: the group's assignment moved the partition away, and stopped
	// the task for it.
	moved atomic.Bool
	// watchdog is the limit of the progress watchdog
	// ([WithProgressWatchdog]); 0 for none.
	watchdog time.Duration
	// onFailure is the handler of WithFailureHandler, or nil.
	onFailure func(context.Context, RunFailure)
	// failStreak counts the task's failed runs in a row, for terms
	// without status records (see LeaderTask.streakAtStart).
	failStreak atomic.Int64
}

// errClientClosing is the cancel cause of tasks stopped by the client's
// closing.
var errClientClosing = errors.New("simba: client closing")

// errMemberDrained is the cancel cause of a group's partitions stopped
// because an operator drained the member: their terms end as drained,
// whichever of the group's loop and the term's own check of the
// operations sees the drain first.
var errMemberDrained = errors.New("simba: member drained")

func (c *Client) start(what string, ref TermRef, group *GroupTask, schedule string, body func(context.Context, *Term) error, opts []TaskOption) (*LeaderTask, error) {
	if err := checkName(what, ref.Election); err != nil {
		return nil, err
	}
	var o taskOptions
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil task option", ErrInvalidArgument)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.claim != nil {
		body = c.claimFirst(o.claim, body)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	t := &LeaderTask{c: c, ref: ref, group: group, schedule: schedule, body: body, exec: o.executor, onFailure: o.onFailure, ctx: ctx, cancel: cancel, done: make(chan struct{}), runs: newRuns()}
	t.watchdog = o.watchdog
	if err := c.register(t); err != nil {
		cancel(nil)
		return nil, err
	}
	go func() {
		defer c.wg.Done() // taken by register
		t.contend()
	}()
	return t, nil
}

// Name returns the task's lease name.
func (t *LeaderTask) Name() string { return t.ref.Election }

// finish marks the task complete, once: the election may start again.
func (t *LeaderTask) finish() {
	t.finished.Do(func() {
		t.c.unregister(t)
		close(t.done)
		t.c.mu.Lock()
		fs := t.onDone
		t.onDone = nil
		t.runs.finish()
		t.c.mu.Unlock()
		for _, f := range fs {
			f()
		}
	})
}

// whenDone calls f once the task is complete (at once if it is).
func (t *LeaderTask) whenDone(f func()) {
	t.c.mu.Lock()
	select {
	case <-t.done:
		t.c.mu.Unlock()
		f()
		return
	default:
	}
	t.onDone = append(t.onDone, f)
	t.c.mu.Unlock()
}

func (t *LeaderTask) stop(reason RevokeReason) {
	switch reason {
	case RevokeClosed:
		t.cancel(errClientClosing)
	case RevokeDrained:
		t.cancel(errMemberDrained)
	default:
		t.cancel(nil)
	}
	if h := t.current.Load(); h != nil {
		h.revoke(t.stopReason(), nil)
	}
}

func (t *LeaderTask) stopReason() RevokeReason {
	switch cause := context.Cause(t.ctx); {
	case errors.Is(cause, errClientClosing):
		return RevokeClosed
	case errors.Is(cause, errMemberDrained):
		return RevokeDrained
	}
	return RevokeStopped
}

// contend is the election's loop: it waits for a session, contends for
// the lease, runs the term on this goroutine and, after its hand-off,
// contends again. A hand-off made elsewhere (the lease lost while the work
// runs, or the work still running at the capped deadline) carries the
// loop on on a goroutine of its own, and this one ends with the work.
// Exactly one goroutine owns the loop at any time; the one that sees the
// task stopped completes it.
func (t *LeaderTask) contend() {
	var failures int
	for {
		if err := t.c.ops.waitUnblocked(t.ctx, t.ref, t.c.currentMemberID); err != nil {
			t.finish()
			return
		}
		g, err := t.c.awaitGeneration(t.ctx)
		if err != nil {
			t.finish()
			return
		}
		lease, err := t.acquire(g)
		if err != nil {
			if t.ctx.Err() != nil {
				t.finish()
				return
			}
			if errors.Is(err, backend.ErrSessionDone) {
				g.end(RevokeSessionLost, err) // the keeper opens the next one
			}
			if g.ctx.Err() != nil || t.c.ops.blocked(t.ref, t.c.currentMemberID()) != 0 {
				continue // the session ended, or an operator said stop
			}
			failures++
			t.c.log.Log(t.ctx, retryLevel(failures), "acquiring a lease failed", "election", t.ref.Election, "err", err, "attempt", failures)
			if !backoff.Sleep(t.ctx, backoff.Wait(failures, g.ttl/3)) {
				t.finish()
				return
			}
			continue
		}
		failures = 0
		if h := t.startTerm(g, lease); h != nil && (!h.run() || !h.after()) {
			return // another goroutine owns the loop now, or the task is done
		}
	}
}

// acquire waits for the lease on g's session until the task stops, g ends,
// or an operator disables the election or drains this member.
func (t *LeaderTask) acquire(g *generation) (backend.Lease, error) {
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	defer context.AfterFunc(g.ctx, cancel)()
	defer t.c.ops.subscribe(func() {
		if t.c.ops.blocked(t.ref, t.c.currentMemberID()) != 0 {
			cancel()
		}
	})()
	return g.sess.Acquire(ctx, t.ref.Election)
}

// release gives the lease back, with the records final written in the
// same step (see backend.RecordReleaser), retrying transient failures while
// the session lives (once it has ended the lease goes with it) for about
// one TTL from the start of the release. Past that the lease is left to go
// with the session (see giveUpRelease). It reports whether this call
// released it.
func (t *LeaderTask) release(g *generation, lease backend.Lease, final []backend.Record) bool {
	until := g.deadline.Load()
	budget := time.Now().Add(g.ttl)
	ctx, cancel := context.WithDeadline(g.ctx, budget)
	defer cancel()
	rr, together := lease.(backend.RecordReleaser)
	for attempt := 1; ; attempt++ {
		var err error
		if together && len(final) > 0 {
			err = rr.ReleaseWithRecords(ctx, final)
		} else {
			err = lease.Release(ctx)
		}
		if err == nil {
			return true
		}
		if errors.Is(err, backend.ErrSessionDone) {
			g.end(RevokeSessionLost, err)
		}
		if errors.Is(err, backend.ErrNotHeld) || g.ctx.Err() != nil {
			return false
		}
		if ctx.Err() == nil {
			// Retried for about a TTL; giveUpRelease says so at Error if
			// none succeeds.
			t.c.log.Debug("releasing a lease failed", "election", t.ref.Election, "token", lease.Token(), "err", err, "attempt", attempt)
		}
		if ctx.Err() != nil || !backoff.Sleep(ctx, backoff.Wait(attempt, g.ttl/3)) {
			if g.ctx.Err() == nil {
				t.giveUpRelease(g, lease, until, err, attempt)
			}
			return false
		}
	}
}

// claimFirst returns body preceded by claim in every term: claim is
// retried until it succeeds, the term ends or it yields (see [WithClaim]).
func (c *Client) claimFirst(claim, body func(context.Context, *Term) error) func(context.Context, *Term) error {
	return func(ctx context.Context, t *Term) error {
		for attempt := 1; ; attempt++ {
			err := recovered(ctx, t, claim)
			if err == nil {
				return body(ctx, t)
			}
			if errors.Is(err, ErrYield) {
				return err
			}
			if ctx.Err() != nil || !t.valid() {
				return nil // the term ended: nothing ran in it
			}
			c.log.Log(ctx, retryLevel(attempt), "claim failed; the task waits for it", "election", t.ref.Election, "token", t.ref.Token, "err", err, "attempt", attempt)
			if !backoff.Sleep(ctx, backoff.Wait(attempt, t.gen.ttl/3)) {
				return nil
			}
		}
	}
}

// retryLevel is the level of the log of a failed attempt that is tried
// again: Debug for the first two (a blip, a restart of the server), Warn
// for the third and every tenth after, so that a lasting failure is seen
// without a line per attempt.
func retryLevel(attempt int) slog.Level {
	if attempt == 3 || attempt > 3 && attempt%10 == 0 {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// recovered calls fn, turning a panic into a [*PanicError].
func recovered(ctx context.Context, t *Term, fn func(context.Context, *Term) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn(ctx, t)
}

// giveUpRelease leaves a lease that could not be released within about a
// TTL to go with the session: Close ends it next; a session not renewed
// since the release began (the offset until was its deadline then) ends at
// that deadline; a session renewed since would keep the lease held with no
// task behind it, so it is ended now, locally. On the server it is only
// closed once the deadline it had reached has passed (see
// generation.closeNotBefore): the runs of its other terms were promised
// their leases until then, and a run that ignores its cancellation may
// still be working.
func (t *LeaderTask) giveUpRelease(g *generation, lease backend.Lease, until int64, err error, attempts int) {
	log := t.c.log.With("election", t.ref.Election, "token", lease.Token(), "err", err, "attempts", attempts)
	switch {
	case t.c.ctx.Err() != nil:
		log.Error("releasing a lease failed for a TTL; it goes with the session, which Close ends next (or which expires by itself)")
	case g.deadline.Load() <= until:
		log.Error("releasing a lease failed for a TTL; it goes with the session, which is not renewed and expires by itself")
	default:
		log.Error("releasing a lease failed for a TTL; ending the session so that the lease goes with it, at the session's deadline")
		g.closeNotBefore.Store(g.deadline.Load())
		g.end(RevokeSessionLost, fmt.Errorf("simba: lease %q (token %d) could not be released: %w", t.ref.Election, lease.Token(), err))
	}
}

// invoke runs fn once for term, as the attempt ri describes (its ctx
// carries ri: see RunInfoFrom), turning a panic into a [*PanicError] and
// an error reporting exit code 0 (see exitCodeOf) into nil, and logs,
// records and publishes the outcome. A run whose ctx its schedule
// cancelled (cancelledRun) is cancelled, not failed.
func (c *Client) invoke(ctx context.Context, term *Term, fn func(context.Context, *Term) error, ri *RunInfo) (result Result, err error) {
	start := time.Now()
	run := term.status.started(start, string(ri.Source), ri.Attempt, ri.Args)
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
		exit := exitCodeOf(err)
		if exit != nil && *exit == 0 {
			err = nil // a command's success: a run that returned nil, its exit status recorded
		}
		result = ResultSucceeded
		yield := errors.Is(err, ErrYield)
		switch {
		case err == nil, yield && !failedYield(err):
		case term.valid() && !cancelledRun(ctx):
			result = ResultFailed
		default:
			result = ResultCancelled
		}
		d := time.Since(start)
		switch {
		case result == ResultFailed && yield:
			c.log.Warn("run failed: giving the lease up", "election", term.ref.Election, "token", term.ref.Token, "err", err, "duration", d)
		case result == ResultFailed:
			c.log.Error("run failed", "election", term.ref.Election, "token", term.ref.Token, "err", err, "duration", d, "attempt", ri.Attempt)
		default:
			c.log.Debug("run completed", "election", term.ref.Election, "token", term.ref.Token, "result", result, "err", err, "duration", d)
		}
		c.metrics.ran(term.ref, result, d)
		term.status.ended(run, start.Add(d), result, err, exit)
		c.events.publish(WorkCompleted{TermRef: term.ref, Result: result, Err: err, Start: start, Duration: d,
			Attempt: ri.Attempt, Source: term.status.source(ri.Source)})
	}()
	term.watchdogOn()
	defer term.watchdogOff()
	return 0, fn(withRunInfo(ctx, ri, term), term)
}
