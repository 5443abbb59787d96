package simba

import (
	"context"
	"errors"
	"time"

	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/internal/records"
)

// errLoopEnded is the cause of the cancellation of the runs still going
// when a schedule's loop ends within its term (a run yielded): they are
// cancelled, not failed.
var errLoopEnded = errors.New("simba: the schedule's loop ended")

// cancelledRun reports whether a run's ctx was cancelled by its schedule
// (the next planned start under OverlapCancelRunning, or the end of the
// loop): an error it returns then is no failure.
func cancelledRun(ctx context.Context) bool {
	cause := context.Cause(ctx)
	return errors.Is(cause, ErrOverlapCancelled) || errors.Is(cause, errLoopEnded)
}

// run is the loop of one term (see scheduleLoop): it runs fn on schedule
// until the term ends, the ctx is cancelled, the schedule pauses, or a run
// yields (then it returns that run's error). It returns once every run it
// started has returned.
func (s Schedule) run(ctx context.Context, term *Term, c *Client, fn func(context.Context, *Term) error) error {
	select {
	case <-term.ready:
	case <-ctx.Done():
		return nil
	}
	if !term.status.awaitOpened(ctx) {
		return nil
	}
	l := &scheduleLoop{
		s: s, c: c, task: taskOf(ctx), term: term, ctx: ctx, fn: fn,
		policy: s.overlapPolicy(), limit: s.concurrency(),
		first:  RunSource(term.status.firstSource()),
		active: map[*scheduledRun]struct{}{},
	}
	if s.kind == fixedDelay {
		l.limit = 1 // measured from the end of a run: never two at once
	}
	l.ended = make(chan *scheduledRun, l.limit)
	l.streak = l.task.streakAtStart(term)
	l.task.recordStreak(term, l.streak) // a count started afresh shows at once
	return l.loop()
}

// scheduleLoop is one term's schedule. Its goroutine (the term's work)
// plans the starts and decides what each does; every run goes on a
// goroutine of its own, which reports its end on ended. Only the loop's
// goroutine touches the fields below ended.
type scheduleLoop struct {
	s      Schedule
	c      *Client
	task   *LeaderTask // nil outside a task (never in practice)
	term   *Term
	ctx    context.Context // the term's work ctx: ends with the term
	fn     func(context.Context, *Term) error
	policy OverlapPolicy
	limit  int // the most runs at once
	ended  chan *scheduledRun

	active  map[*scheduledRun]struct{} // the runs started and not ended
	first   RunSource                  // the source of the next planned run: the term's first, then normal
	streak  int                        // failed runs in a row
	written time.Time                  // the next planned start last recorded in the status
	yield   error                      // a run yielded: the loop ends with its error
	paused  bool                       // the schedule paused itself: the loop ends

	// The overrun going on: planned starts that came while runs were
	// going, until they end.
	missed   int        // starts not started at their time (skipped or buffered)
	overlap  span       // the starts skipped
	buffered *time.Time // OverlapBufferOne: the start kept for the end of the runs
	waiting  *time.Time // a start that waits for the runs going on to return (OverlapCancelRunning; FixedDelay behind a trigger)
}

// scheduledRun is one run of a schedule: a planned start (or a trigger)
// and its attempts. The run's goroutine fills in the outcome before it
// reports the end.
type scheduledRun struct {
	source  RunSource
	planned time.Time
	args    map[string]string
	cancel  context.CancelCauseFunc

	start, end time.Time
	attempts   int    // attempts made (0: none, the term had ended)
	result     Result // the last attempt's
	err        error  // the last attempt's
}

// loop runs the schedule until the term ends, a run yields or the
// schedule pauses, then waits for every run it started.
func (l *scheduleLoop) loop() error {
	now := time.Now()
	l.afterGap(now)
	anchor := now.Add(l.s.initial) // the first planned start; FixedRate's count from it
	if l.s.kind == cronKind {
		anchor = l.s.cron.Next(anchor.Add(-time.Nanosecond))
	}
	planned := anchor // the next planned start; zero while a FixedDelay run goes on
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for l.yield == nil && !l.paused {
		if !planned.Equal(l.written) && l.term.Valid() {
			// Zero while a FixedDelay run goes: its next start is not
			// known yet, and the run's own start is not missed if it is
			// interrupted. Not once the term has ended: a start the loop
			// passed then was not run (see finished).
			l.written = planned
			l.term.status.planned(planned)
		}
		changed := l.c.ops.changes()
		l.startWaiting(planned)
		var wake <-chan time.Time
		if !planned.IsZero() {
			timer.Reset(time.Until(planned))
			wake = timer.C
		}
		select {
		case <-l.ctx.Done():
			l.endOverrun(time.Now())
			return l.drain()
		case r := <-l.ended:
			if next := l.finished(r); !next.IsZero() {
				planned = next
			}
		case <-changed:
		case <-wake:
			planned = l.due(anchor, planned)
		}
		timer.Stop()
	}
	l.endOverrun(time.Now())
	for r := range l.active {
		r.cancel(errLoopEnded)
	}
	return l.drain()
}

// drain waits for the runs going on, and returns the error of a run that
// yielded, if one did.
func (l *scheduleLoop) drain() error {
	for len(l.active) > 0 {
		l.finished(<-l.ended)
	}
	l.endOverrun(time.Now())
	return l.yield
}

// afterGap reports the planned starts that passed before this term began,
// while no one ran the schedule (a fail-over, a disable, a pause: the
// previous holder's next planned start is in the status), and runs one at
// once for the latest under MisfireRunOnce, within the catch-up window.
func (l *scheduleLoop) afterGap(now time.Time) {
	from, ended, ok := l.term.status.gap()
	if !ok {
		return
	}
	reason := SkipMisfire
	switch ended {
	case RevokeDisabled.String():
		reason = SkipDisabled
	case RevokePaused.String():
		reason = SkipPaused
	}
	old, recent := l.window(from, from, now, now)
	l.c.skip(l.term, SkipCatchUpWindow, old)
	if recent.count == 0 {
		return
	}
	if l.s.misfire != MisfireRunOnce {
		l.c.skip(l.term, reason, recent)
		return
	}
	l.c.log.Info("the previous holder missed a planned start; running once now", "election", l.term.ref.Election)
	l.c.skip(l.term, reason, recent.butLast())
	l.start(recent.last, SourceMisfire, nil)
	l.first = SourceNormal
}

// window returns the planned starts in [from, until) of the plan anchored
// at anchor, split at now less the catch-up window: old were missed by
// more than the window, recent by less.
func (l *scheduleLoop) window(anchor, from, until, now time.Time) (old, recent span) {
	if l.s.catchUp <= 0 {
		return span{}, l.s.starts(anchor, from, until)
	}
	cut := now.Add(-l.s.catchUp)
	return l.s.starts(anchor, from, minTime(cut, until)), l.s.starts(anchor, maxTime(from, cut), until)
}

// due handles the planned start planned, when its time has come, and
// returns the next one. Starts that passed before the latest one (the loop
// woke late) are skipped as misfired; the latest is offered to the
// overlap policy.
func (l *scheduleLoop) due(anchor, planned time.Time) time.Time {
	now := time.Now()
	if l.s.kind == fixedDelay {
		l.offer(planned)
		return time.Time{} // set when the run ends
	}
	old, recent := l.window(anchor, planned, now.Add(time.Nanosecond), now)
	next := l.s.after(anchor, now)
	l.c.skip(l.term, SkipCatchUpWindow, old)
	if recent.count > 0 {
		l.c.skip(l.term, SkipMisfire, recent.butLast())
		l.offer(recent.last)
	}
	return next
}

// offer starts the run of planned start p, or applies the overlap policy
// when runs are going on.
func (l *scheduleLoop) offer(p time.Time) {
	idle := len(l.active) == 0 && l.waiting == nil && l.buffered == nil
	switch {
	case idle, l.policy == OverlapAllow && len(l.active) < l.limit:
		l.start(p, l.nextSource(), nil)
	case l.s.kind == fixedDelay:
		// Only a triggered run can be going: the start waits for it.
		l.waiting = &p
	case l.policy == OverlapBufferOne && l.buffered == nil:
		l.buffered = &p
		l.missed++
	case l.policy == OverlapCancelRunning && l.waiting == nil:
		l.waiting = &p
		for r := range l.active {
			r.cancel(ErrOverlapCancelled)
		}
	default:
		if l.policy != OverlapCancelRunning {
			l.missed++
		}
		l.overlap = l.overlap.add(p)
	}
}

// nextSource returns the source of the next planned run: the term's first
// ("fail-over" after one, else "normal"), then "normal".
func (l *scheduleLoop) nextSource() RunSource {
	src := l.first
	l.first = SourceNormal
	return src
}

// startWaiting starts what waits for the runs going on to end, once they
// have: a start behind a cancelled run, a buffered start, an operator's
// trigger (which starts at once only under OverlapAllow below the limit).
// A trigger waits for a planned start that is due (planned, not in the
// future): the planned run goes first, as at a term's start, where the
// first planned start and a trigger left pending by a disable meet.
func (l *scheduleLoop) startWaiting(planned time.Time) {
	if len(l.active) == 0 && l.waiting != nil {
		p := *l.waiting
		l.waiting = nil
		l.start(p, l.nextSource(), nil)
	}
	if len(l.active) == 0 && l.buffered != nil {
		p := *l.buffered
		l.buffered = nil
		l.first = SourceNormal
		l.start(p, SourceMisfire, nil)
	}
	if len(l.active) > 0 && (l.policy != OverlapAllow || len(l.active) >= l.limit || l.s.kind == fixedDelay) {
		return
	}
	if !planned.IsZero() && !time.Now().Before(planned) {
		return // the due start first: the loop's timer fires at once
	}
	lease := l.term.ref.Election
	v, args, ok := l.c.ops.triggered(lease)
	if !ok {
		return
	}
	l.c.log.Info("triggered by an operator; running once now", "election", lease)
	l.c.ops.consume(l.term.gen, records.TriggerPrefix+lease, v)
	l.start(time.Time{}, SourceTrigger, args)
}

// start starts a run on a goroutine of its own.
func (l *scheduleLoop) start(planned time.Time, source RunSource, args map[string]string) {
	ctx, cancel := context.WithCancelCause(l.ctx)
	r := &scheduledRun{source: source, planned: planned, args: args, cancel: cancel}
	l.active[r] = struct{}{}
	go func() {
		defer func() { l.ended <- r }()
		defer cancel(nil)
		l.attempts(ctx, r)
	}()
}

// attempts makes the attempts of run r: the first, and the retries its
// policy allows, each after its backoff, while the term lasts.
func (l *scheduleLoop) attempts(ctx context.Context, r *scheduledRun) {
	r.start = time.Now()
	defer func() { r.end = time.Now() }()
	for n := 1; ; n++ {
		if l.term.EnsureValid() != nil || ctx.Err() != nil {
			return
		}
		r.attempts = n
		r.result, r.err = l.attempt(ctx, r, n)
		if r.result != ResultFailed || !l.s.retry.retries(r.err, n) {
			return
		}
		d := l.s.retry.wait(n)
		l.c.log.Debug("run failed; retrying", "election", l.term.ref.Election, "token", l.term.ref.Token, "attempt", n, "wait", d)
		if !backoff.Sleep(ctx, d) {
			return // the term ended, or the run was cancelled
		}
		l.c.metrics.retried(l.term.ref)
	}
}

// attempt makes attempt n of run r, within the schedule's timeout.
func (l *scheduleLoop) attempt(ctx context.Context, r *scheduledRun, n int) (Result, error) {
	ri := &RunInfo{Source: r.source, Attempt: n, Planned: r.planned, Args: r.args}
	fn := l.fn
	if d := l.s.timeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, ErrRunTimeout)
		defer cancel()
		defer l.watchOverdue(time.Now(), d)()
		fn = timedOut(fn, d)
	}
	return l.c.invoke(ctx, l.term, fn, ri)
}

// watchOverdue reports the attempt started at start if it is still going
// overdueAfter past its timeout d: it ignores its ctx. It returns the stop
// of the watch.
func (l *scheduleLoop) watchOverdue(start time.Time, d time.Duration) (stop func()) {
	c, ref := l.c, l.term.ref
	c.wg.Add(1)
	t := time.AfterFunc(d+overdueAfter, func() {
		defer c.wg.Done()
		c.log.Warn("run still going after its timeout: it ignores the cancellation of its ctx", "election", ref.Election, "token", ref.Token, "timeout", d, "started", start)
		c.events.publish(RunOverdue{TermRef: ref, Start: start, Timeout: d, At: time.Now()})
	})
	return func() {
		if t.Stop() {
			c.wg.Done()
		}
	}
}

// finished takes the end of run r: its outcome is counted, and the overrun
// ends once fewer runs than the limit are going. For FixedDelay it returns
// the next planned start, counted from the end of the run.
func (l *scheduleLoop) finished(r *scheduledRun) (next time.Time) {
	delete(l.active, r)
	l.account(r)
	if r.attempts == 0 && !r.planned.IsZero() && (l.ctx.Err() != nil || !l.term.Valid()) &&
		(l.written.IsZero() || r.planned.Before(l.written)) {
		// The term ended at the instant of the run's start, before its
		// first attempt: the start was not run. The status's next planned
		// start goes back to it, so that the successor counts it among the
		// starts it reports missed.
		l.written = r.planned
		l.term.status.planned(r.planned)
	}
	if l.s.kind == fixedDelay && r.source != SourceTrigger {
		next = r.end.Add(l.s.period)
	}
	if len(l.active) < l.limit {
		l.endOverrun(r.end)
	}
	return next
}

// endOverrun reports the planned starts of the overrun that were not
// started at their time: Misfired (as before overlap policies) and
// Skipped for the ones skipped.
func (l *scheduleLoop) endOverrun(at time.Time) {
	if l.missed > 0 {
		catchUp := l.buffered != nil
		ref := l.term.ref
		l.c.log.Info("schedule overran planned starts", "election", ref.Election, "missed", l.missed, "catch_up", catchUp)
		l.c.metrics.misfired(ref, l.missed)
		l.c.events.publish(Misfired{TermRef: ref, Missed: l.missed, CatchUp: catchUp, At: at})
		l.missed = 0
	}
	l.c.skip(l.term, SkipOverlap, l.overlap)
	l.overlap = span{}
}

// account counts the outcome of run r: a yield ends the loop; a failure
// extends the streak of failures, calls the failure handler and may pause
// the schedule; a success ends the streak.
func (l *scheduleLoop) account(r *scheduledRun) {
	if errors.Is(r.err, ErrYield) && l.yield == nil {
		l.yield = r.err
	}
	streak := l.streak
	switch r.result {
	case ResultFailed:
		streak++
	case ResultSucceeded:
		streak = 0
	default:
		return // cancelled, or never attempted
	}
	if streak != l.streak {
		l.streak = streak
		l.task.recordStreak(l.term, streak)
	}
	if r.result != ResultFailed {
		return
	}
	l.c.notifyFailure(l.task, RunFailure{
		TermRef: l.term.ref, Member: l.c.memberID(l.term.gen), Source: r.source, Args: r.args,
		Start: r.start, Duration: r.end.Sub(r.start), Attempts: r.attempts, Err: r.err, Failures: streak,
	})
	if n := l.s.pauseAfter; n > 0 && streak >= n && !l.paused && l.ctx.Err() == nil {
		l.paused = true
		l.c.pause(l.task, l.term, streak, r.err)
	}
}

// span is a run of planned starts: count of them, from first to last;
// prev is the one before last (zero when count < 2).
type span struct {
	count             int
	first, last, prev time.Time
}

// add returns sp with one more start, t, after its last.
func (sp span) add(t time.Time) span {
	if sp.count == 0 {
		sp.first = t
	}
	if sp.count > 0 {
		sp.prev = sp.last
	}
	sp.last = t
	sp.count++
	return sp
}

// butLast returns sp without its last start.
func (sp span) butLast() span {
	if sp.count < 2 {
		return span{}
	}
	return span{count: sp.count - 1, first: sp.first, last: sp.prev}
}

// starts returns the planned starts in [from, until) of the plan whose
// first planned start is anchor: FixedRate's are anchor plus whole
// periods, Cron's the activations from anchor on (counted up to
// maxCountedMisses), FixedDelay's anchor alone.
func (s Schedule) starts(anchor, from, until time.Time) span {
	if from.Before(anchor) {
		from = anchor
	}
	if !from.Before(until) {
		return span{}
	}
	switch s.kind {
	case fixedRate:
		i := (from.Sub(anchor) + s.period - 1) / s.period // the first index at or after from
		j := (until.Sub(anchor) - 1) / s.period           // the last index before until
		if j < i {
			return span{}
		}
		sp := span{count: int(j - i + 1), first: anchor.Add(i * s.period), last: anchor.Add(j * s.period)}
		if sp.count > 1 {
			sp.prev = sp.last.Add(-s.period)
		}
		return sp
	case cronKind:
		t := anchor
		if t.Before(from) {
			t = s.cron.Next(from.Add(-time.Nanosecond))
		}
		var sp span
		for ; !t.IsZero() && t.Before(until) && sp.count < maxCountedMisses; t = s.cron.Next(t) {
			sp = sp.add(t)
		}
		return sp
	}
	if from.Equal(anchor) {
		return span{count: 1, first: anchor, last: anchor}
	}
	return span{}
}

// after returns the first planned start after t of the plan whose first
// planned start is anchor (FixedRate and Cron).
func (s Schedule) after(anchor, t time.Time) time.Time {
	if t.Before(anchor) {
		return anchor
	}
	if s.kind == fixedRate {
		return anchor.Add((t.Sub(anchor)/s.period + 1) * s.period)
	}
	return s.cron.Next(t)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
