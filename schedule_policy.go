package simba

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/fence"
)

// ErrRunTimeout is the cause of a run's ctx ending at its timeout
// ([Schedule.WithTimeout]): context.Cause(ctx) matches it, and a run that
// returns ctx.Err() after its timeout fails with an error matching both
// ErrRunTimeout and [context.DeadlineExceeded].
var ErrRunTimeout = errors.New("simba: run timed out")

// RetryPolicy says how a schedule retries a failed run: within the same
// term, after a jittered, capped exponential backoff, up to Attempts runs
// in all. A retry is a new attempt of the same planned run: the history
// keeps one entry per attempt, numbered, and [WorkCompleted.Attempt] says
// which one ended. A retry never crosses a term: each attempt is preceded
// by [Term.EnsureValid], and the retries end with the term.
//
// Never retried, whatever RetryIf says: an error wrapping [ErrYield], one
// matching [ErrTermExpired] (the term is over), a stale fence (an error
// matching fence.ErrStale of package fence, or backend.ErrConflict from
// [Term.PutRecord]: a newer term exists), and a run cancelled because its
// term ended. A run ended by its timeout ([Schedule.WithTimeout]) is
// retried like any failure.
//
// The zero RetryPolicy retries nothing.
type RetryPolicy struct {
	// Attempts is the most runs per planned start, the first included: 3
	// means the first run and up to two retries. 0 and 1 retry nothing.
	Attempts int
	// Backoff is the wait before the first retry (default 1s); each later
	// wait is Multiplier times the one before, up to MaxBackoff.
	Backoff time.Duration
	// MaxBackoff caps the wait (default 1 minute, or Backoff when that is
	// longer).
	MaxBackoff time.Duration
	// Multiplier is the growth of the wait (default 2; at least 1).
	Multiplier float64
	// Jitter is the fraction of each wait drawn at random, in [0, 1]
	// (default 0: none; 0.2 makes a wait of 10s one between 8s and 10s),
	// so that retries of many partitions do not fall together.
	Jitter float64
	// RetryIf, when set, decides which failures are retried (besides the
	// ones never retried, above); nil retries every other failure.
	RetryIf func(err error) bool
}

// OverlapPolicy says what a schedule does when a planned start comes while
// a run is still going (an overrun). Timelines below: FixedRate(10s), a run
// started at 0s that takes 25s.
//
//	| policy              | 10s                      | 20s                   | 25s (run ends)            |
//	|---------------------|--------------------------|-----------------------|---------------------------|
//	| OverlapSkip         | skipped (overlap)        | skipped (overlap)     | next run at 30s           |
//	| OverlapBufferOne    | buffered                 | skipped (overlap)     | buffered run at 25s       |
//	| OverlapCancelRunning| 0s run cancelled; the new run starts once it returned | … | …          |
//	| OverlapAllow (max 2)| second run starts at 10s | skipped (2 running)   | a run at 30s              |
//
// Skipped starts are reported (see [Skipped]), and so is an overrun's
// count of starts not run at their time ([Misfired]), when the runs end.
// A start that comes while another waits for a cancelled run
// (OverlapCancelRunning) is skipped. A run counts as going from its first
// attempt to the end of its last, retry waits included, and past its
// timeout until it returns. A [FixedDelay] schedule measures from the end
// of a run, so it never overlaps: its policy does not apply, and a planned
// start that comes during a triggered run waits for it. Operator triggers
// run after the runs going on have ended, whatever the policy, except
// under OverlapAllow, where a trigger starts at once below the limit.
//
// The zero OverlapPolicy follows the misfire policy, as schedules did
// before overlap policies existed: [MisfireSkip] skips (OverlapSkip),
// [MisfireRunOnce] buffers one (OverlapBufferOne).
type OverlapPolicy int

// Overlap policies.
const (
	// OverlapSkip skips every planned start that comes while a run is
	// going; the next run is at the next planned start after it ended.
	OverlapSkip OverlapPolicy = iota + 1
	// OverlapBufferOne keeps the first planned start that comes while a
	// run is going and runs it as soon as the run ends; later ones during
	// the same run are skipped.
	OverlapBufferOne
	// OverlapCancelRunning cancels the run going on (its ctx ends, with
	// cause [ErrOverlapCancelled]) and starts the new run once it has
	// returned: never two runs at once.
	OverlapCancelRunning
	// OverlapAllow starts the new run alongside the ones going on, up to
	// [Schedule.WithMaxConcurrent] runs at once (default 2); a start past
	// the limit is skipped.
	OverlapAllow
)

// ErrOverlapCancelled is the cause of a run's ctx ending because a newer
// planned start cancelled it ([OverlapCancelRunning]).
var ErrOverlapCancelled = errors.New("simba: run cancelled by the next planned start")

// String returns "skip", "buffer-one", "cancel-running", "allow", or "" for
// the zero policy.
func (p OverlapPolicy) String() string {
	switch p {
	case 0:
		return ""
	case OverlapSkip:
		return "skip"
	case OverlapBufferOne:
		return "buffer-one"
	case OverlapCancelRunning:
		return "cancel-running"
	case OverlapAllow:
		return "allow"
	}
	return fmt.Sprintf("OverlapPolicy(%d)", int(p))
}

// SkipReason says why a planned start was not run.
type SkipReason int

// Reasons for a skipped start.
const (
	// SkipOverlap: a run was still going, and the overlap policy skipped
	// the start.
	SkipOverlap SkipReason = iota + 1
	// SkipMisfire: the start passed while no run could begin (no node held
	// the lease, or the holder was held up), and the misfire policy skipped
	// it.
	SkipMisfire
	// SkipCatchUpWindow: the start was missed by more than the catch-up
	// window ([Schedule.WithCatchUpWindow]).
	SkipCatchUpWindow
	// SkipDisabled: the start passed while an operator had the job
	// disabled.
	SkipDisabled
	// SkipPaused: the start passed while the job was paused after failed
	// runs ([Schedule.WithPauseAfter]).
	SkipPaused
)

// String returns "overlap", "misfire", "catch-up window", "disabled" or
// "paused".
func (r SkipReason) String() string {
	switch r {
	case SkipOverlap:
		return "overlap"
	case SkipMisfire:
		return "misfire"
	case SkipCatchUpWindow:
		return "catch-up window"
	case SkipDisabled:
		return "disabled"
	case SkipPaused:
		return "paused"
	}
	return fmt.Sprintf("SkipReason(%d)", int(r))
}

// RunSource says why a run started.
type RunSource string

// Sources of runs, as the history records them.
const (
	SourceNormal   RunSource = "normal"    // a planned start
	SourceMisfire  RunSource = "misfire"   // a catch-up run for a missed or buffered start
	SourceTrigger  RunSource = "trigger"   // an operator's trigger
	SourceFailOver RunSource = "fail-over" // the first run after the previous holder ended without a hand-off
)

// RunInfo describes the run a task function was called for.
type RunInfo struct {
	// Source says why the run started.
	Source RunSource
	// Attempt is 1 for a planned run's first attempt, 2 for its first
	// retry, and so on (see [RetryPolicy]).
	Attempt int
	// Planned is the planned start the run stands for; zero for a
	// trigger and for RunWhileLeader.
	Planned time.Time
	// Args are the arguments of an operator's trigger (simba trigger NAME
	// --arg key=value), nil for other runs.
	Args map[string]string
}

type runInfoKey struct{}

// runInfoValue is what a run's ctx carries: its RunInfo, and for the run
// of a leader task, whose source ("normal" or "fail-over") is known once
// the previous holder's status is read, the term to ask.
type runInfoValue struct {
	info *RunInfo
	term *Term // set when info.Source is still to be learnt from the status
}

// RunInfoFrom returns the RunInfo of the run whose ctx (or a ctx derived
// from it) is given, and false for any other ctx. For the run of
// [Election.RunWhileLeader], whose Source depends on how the previous
// holder ended, it may wait for the term's first read of the status
// records (bounded: a few renewal periods at most).
func RunInfoFrom(ctx context.Context) (RunInfo, bool) {
	v, ok := ctx.Value(runInfoKey{}).(runInfoValue)
	if !ok {
		return RunInfo{}, false
	}
	out := *v.info
	out.Args = maps.Clone(v.info.Args)
	if out.Source == "" && v.term != nil {
		out.Source = v.term.status.source("")
	}
	return out, true
}

// withRunInfo returns ctx carrying ri, the RunInfo of a run of term.
func withRunInfo(ctx context.Context, ri *RunInfo, term *Term) context.Context {
	v := runInfoValue{info: ri}
	if ri.Source == "" {
		v.term = term
	}
	return context.WithValue(ctx, runInfoKey{}, v)
}

// Defaults of the policies.
const (
	defaultRetryBackoff    = time.Second
	defaultRetryMaxBackoff = time.Minute
	defaultRetryMultiplier = 2
	defaultMaxConcurrent   = 2
)

// WithRetry returns s with the retry policy p (default: no retries).
func (s Schedule) WithRetry(p RetryPolicy) Schedule {
	if s.err == nil {
		switch {
		case p.Attempts < 0:
			s.err = fmt.Errorf("%w: retry attempts must not be negative, got %d", ErrInvalidSchedule, p.Attempts)
		case p.Backoff < 0 || p.MaxBackoff < 0:
			s.err = fmt.Errorf("%w: retry backoff must not be negative, got %v and max %v", ErrInvalidSchedule, p.Backoff, p.MaxBackoff)
		case p.Multiplier != 0 && !(p.Multiplier >= 1):
			s.err = fmt.Errorf("%w: retry multiplier must be at least 1, got %v", ErrInvalidSchedule, p.Multiplier)
		case !(p.Jitter >= 0 && p.Jitter <= 1):
			s.err = fmt.Errorf("%w: retry jitter must be in [0, 1], got %v", ErrInvalidSchedule, p.Jitter)
		}
	}
	if p.Backoff == 0 {
		p.Backoff = defaultRetryBackoff
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = max(defaultRetryMaxBackoff, p.Backoff)
	}
	if p.Multiplier == 0 {
		p.Multiplier = defaultRetryMultiplier
	}
	s.retry = p
	return s
}

// WithTimeout returns s with a timeout per run (default 0: none): the
// run's ctx ends after d, with cause [ErrRunTimeout]. A run still going a
// second after its timeout ignored it: it is reported ([RunOverdue], a log
// at Warn) and counts as running for the overlap policy until it returns.
func (s Schedule) WithTimeout(d time.Duration) Schedule {
	if d < 0 && s.err == nil {
		s.err = fmt.Errorf("%w: run timeout must not be negative, got %v", ErrInvalidSchedule, d)
	}
	s.timeout = d
	return s
}

// WithOverlap returns s with the overlap policy p (default: per the
// misfire policy; see [OverlapPolicy]).
func (s Schedule) WithOverlap(p OverlapPolicy) Schedule {
	if (p < 0 || p > OverlapAllow) && s.err == nil {
		s.err = fmt.Errorf("%w: unknown overlap policy %d", ErrInvalidSchedule, int(p))
	}
	s.overlap = p
	return s
}

// WithMaxConcurrent returns s with at most n runs at once under
// [OverlapAllow] (default 2). It is an error with any other policy.
func (s Schedule) WithMaxConcurrent(n int) Schedule {
	if n < 1 && s.err == nil {
		s.err = fmt.Errorf("%w: max concurrent runs must be at least 1, got %d", ErrInvalidSchedule, n)
	}
	s.maxConcurrent = n
	return s
}

// WithCatchUpWindow returns s with a catch-up window (default 0: no
// limit): after a fail-over, a disable or a pause, or a holder held up,
// planned starts missed by more than d are skipped and reported
// ([SkipCatchUpWindow]); the ones missed by d or less follow the misfire
// policy.
//
// Across terms (the new holder finds its predecessor's next planned start
// passed, in the status records), [MisfireRunOnce] runs once at once for
// the latest start within the window and reports the others skipped;
// [MisfireSkip] reports them all skipped; the reason is [SkipDisabled] or
// [SkipPaused] when the previous term ended so, [SkipMisfire] otherwise. A
// [FixedDelay] schedule counts one missed start. Within a term, a loop
// that wakes past several planned starts (a process held up) runs the
// latest, if it is within the window, and reports the earlier ones
// skipped ([SkipMisfire]).
func (s Schedule) WithCatchUpWindow(d time.Duration) Schedule {
	if d < 0 && s.err == nil {
		s.err = fmt.Errorf("%w: catch-up window must not be negative, got %v", ErrInvalidSchedule, d)
	}
	s.catchUp = d
	return s
}

// WithPauseAfter returns s pausing after n failed runs in a row (default 0:
// never): the holder disables the job's lease through the same operation
// as `simba disable` (an audit entry says why, with the last error), its
// term ends ([RevokePaused]) and no node runs it until an operator enables
// it (`simba enable`). A run counts once, after its last attempt
// ([RetryPolicy]); a run cancelled because its term ended counts neither
// way. The count survives hand-offs where the backend keeps status records
// (Status.FailStreak), and lives in the task otherwise; a term that
// follows a disable or a pause counts afresh.
//
// The disable is written during the hand-off, before the lease is
// released. Where it cannot be written (a backend without
// [backend.Records], or the writes failed), the error is logged and the
// task stops on this client; other clients running the task go on.
func (s Schedule) WithPauseAfter(n int) Schedule {
	if n < 0 && s.err == nil {
		s.err = fmt.Errorf("%w: pause after failures must not be negative, got %d", ErrInvalidSchedule, n)
	}
	s.pauseAfter = n
	return s
}

// checkPolicies reports a combination of policies that cannot run.
func (s Schedule) checkPolicies() error {
	if s.maxConcurrent != 0 && s.overlap != OverlapAllow {
		return fmt.Errorf("%w: max concurrent runs %d needs the overlap policy allow, not %q", ErrInvalidSchedule, s.maxConcurrent, s.overlapPolicy())
	}
	return nil
}

// overlapPolicy is the policy in force: the one given, or the misfire
// policy's.
func (s Schedule) overlapPolicy() OverlapPolicy {
	switch {
	case s.overlap != 0:
		return s.overlap
	case s.misfire == MisfireRunOnce:
		return OverlapBufferOne
	}
	return OverlapSkip
}

// concurrency is the most runs at once.
func (s Schedule) concurrency() int {
	if s.overlapPolicy() != OverlapAllow {
		return 1
	}
	if s.maxConcurrent == 0 {
		return defaultMaxConcurrent
	}
	return s.maxConcurrent
}

// wait returns the wait before the retry that follows failed attempt n:
// Backoff times Multiplier to the power n-1, at most MaxBackoff, less a
// random part of up to Jitter of it.
func (p RetryPolicy) wait(n int) time.Duration {
	d := float64(p.Backoff) * math.Pow(p.Multiplier, float64(n-1))
	if !(d < float64(p.MaxBackoff)) { // also for an overflow to +Inf
		d = float64(p.MaxBackoff)
	}
	if p.Jitter > 0 {
		d -= rand.Float64() * p.Jitter * d
	}
	return time.Duration(d)
}

// retries reports whether a run whose attempt n failed with err is tried
// again: attempts are left, err is not one of those never retried, and
// RetryIf allows it. A RetryIf that panics allows nothing.
func (p RetryPolicy) retries(err error, n int) (retry bool) {
	if n >= p.Attempts || neverRetried(err) {
		return false
	}
	if p.RetryIf == nil {
		return true
	}
	defer func() {
		if recover() != nil {
			retry = false
		}
	}()
	return p.RetryIf(err)
}

// neverRetried reports the errors no RetryPolicy retries: a yield, the end
// of the term, a stale fence, a newer term's record.
func neverRetried(err error) bool {
	return errors.Is(err, ErrYield) || errors.Is(err, ErrTermExpired) ||
		errors.Is(err, fence.ErrStale) || errors.Is(err, backend.ErrConflict)
}

// overdueAfter is how long after its timeout a run still going is
// reported overdue.
const overdueAfter = time.Second

// runTimeoutError is the error of a run that returned an error after its
// timeout ended its ctx: it matches ErrRunTimeout, context.DeadlineExceeded
// and what the run returned.
type runTimeoutError struct {
	timeout time.Duration
	err     error
}

func (e *runTimeoutError) Error() string {
	return fmt.Sprintf("simba: run timed out after %v: %v", e.timeout, e.err)
}

func (e *runTimeoutError) Unwrap() []error {
	return []error{ErrRunTimeout, context.DeadlineExceeded, e.err}
}

// timedOut returns fn, its error wrapped in a *runTimeoutError when it
// returns one after its ctx ended at its timeout d.
func timedOut(fn func(context.Context, *Term) error, d time.Duration) func(context.Context, *Term) error {
	return func(ctx context.Context, t *Term) error {
		err := fn(ctx, t)
		if err != nil && errors.Is(context.Cause(ctx), ErrRunTimeout) &&
			!(errors.Is(err, ErrRunTimeout) && errors.Is(err, context.DeadlineExceeded)) {
			err = &runTimeoutError{timeout: d, err: err}
		}
		return err
	}
}
