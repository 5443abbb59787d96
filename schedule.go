package simba

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/simba-go/simba/internal/records"
)

// Schedule says when a scheduled election runs its function within a term.
// Build one with [FixedDelay], [FixedRate] or [Cron], then refine it with
// [Schedule.WithInitialDelay] and [Schedule.WithMisfire]. The zero Schedule
// is invalid.
//
// Every timing counts from the start of the term: a new leader starts its
// own schedule, it does not continue its predecessor's.
//
//	| constructor     | what the period measures                                  |
//	|-----------------|-----------------------------------------------------------|
//	| FixedDelay(d)   | from the end of one run to the start of the next          |
//	| FixedRate(p)    | between consecutive planned starts (missed ones skipped)  |
//	| Cron(expr)      | the cron expression's activation times                    |
type Schedule struct {
	kind    scheduleKind
	period  time.Duration
	initial time.Duration
	expr    string
	cron    cron.Schedule
	misfire MisfirePolicy
	err     error

	// The policies of schedule_policy.go.
	retry         RetryPolicy
	timeout       time.Duration
	overlap       OverlapPolicy
	maxConcurrent int
	catchUp       time.Duration
	pauseAfter    int
}

type scheduleKind int

const (
	fixedDelay scheduleKind = iota + 1
	fixedRate
	cronKind
)

// MisfirePolicy says what a schedule does when planned starts passed while a
// run was still going (an overrun).
type MisfirePolicy int

const (
	// MisfireSkip, the default, skips the missed starts: the next run is at
	// the next planned start, no catch-up runs are bunched.
	MisfireSkip MisfirePolicy = iota
	// MisfireRunOnce runs one catch-up run as soon as the overrun ends, then
	// goes on with the planned starts. It applies across fail-over too: the
	// holder keeps its next planned start in the election's status record,
	// and a new term that finds that start passed (missed by the holders
	// before it) runs once at once, before its own initial delay and planned
	// starts. Without status records
	// ([WithStatus](false), or a backend without [backend.Records]) it
	// applies within a term only.
	MisfireRunOnce
)

// String returns "skip" or "run-once".
func (p MisfirePolicy) String() string {
	switch p {
	case MisfireSkip:
		return "skip"
	case MisfireRunOnce:
		return "run-once"
	}
	return fmt.Sprintf("MisfirePolicy(%d)", int(p))
}

// FixedDelay runs the function, then waits delay after the end of each run
// before the next one.
func FixedDelay(delay time.Duration) Schedule {
	s := Schedule{kind: fixedDelay, period: delay}
	if delay <= 0 {
		s.err = fmt.Errorf("%w: fixed delay must be positive, got %v", ErrInvalidSchedule, delay)
	}
	return s
}

// FixedRate runs the function at planned starts period apart, counted from
// the start of the term (plus the initial delay). A run that overruns one or
// more planned starts makes the schedule skip them: the next run is at the
// next planned start after the overrun (see [MisfireRunOnce] for the
// alternative). Runs never overlap.
func FixedRate(period time.Duration) Schedule {
	s := Schedule{kind: fixedRate, period: period}
	if period <= 0 {
		s.err = fmt.Errorf("%w: fixed rate must be positive, got %v", ErrInvalidSchedule, period)
	}
	return s
}

// cronParser accepts 5 fields or 6 with leading seconds, descriptors such as
// @hourly and @every 5m, and a CRON_TZ= or TZ= time zone prefix.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron runs the function at the activation times of a cron expression:
// five fields (minute hour day-of-month month day-of-week), or six with a
// leading seconds field, descriptors such as "@hourly" or "@every 5m", and an
// optional time zone prefix "CRON_TZ=Asia/Shanghai " (default: the local
// time zone). Missed activations follow the misfire policy, as for
// [FixedRate]. A malformed expression makes the schedule invalid.
func Cron(expr string) Schedule {
	s := Schedule{kind: cronKind, expr: expr}
	sched, err := parseCron(expr)
	if err != nil {
		s.err = err
	}
	s.cron = sched
	return s
}

func parseCron(expr string) (sched cron.Schedule, err error) {
	defer func() {
		// The parser panics on a few malformed inputs; bad input is an
		// error here, never a panic.
		if v := recover(); v != nil {
			sched, err = nil, fmt.Errorf("%w: cron expression %q: %v", ErrInvalidSchedule, expr, v)
		}
	}()
	sched, err = cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: cron expression %q: %v", ErrInvalidSchedule, expr, err)
	}
	if err := checkEvery(expr); err != nil {
		return nil, err
	}
	if sched.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("%w: cron expression %q never fires", ErrInvalidSchedule, expr)
	}
	return sched, nil
}

// checkEvery refuses "@every d" with a d the parser would silently change:
// it raises anything under a second to one second and drops fractions of a
// second.
func checkEvery(expr string) error {
	fields := strings.Fields(expr)
	if len(fields) > 0 && (strings.HasPrefix(fields[0], "CRON_TZ=") || strings.HasPrefix(fields[0], "TZ=")) {
		fields = fields[1:]
	}
	if len(fields) != 2 || fields[0] != "@every" {
		return nil
	}
	d, err := time.ParseDuration(fields[1])
	if err != nil || d < time.Second || d%time.Second != 0 {
		return fmt.Errorf("%w: cron expression %q: @every needs a whole number of seconds, at least 1s (use FixedRate for finer periods)", ErrInvalidSchedule, expr)
	}
	return nil
}

// WithInitialDelay returns s with a delay before the first run of every
// term, counted from the term's start (default 0).
func (s Schedule) WithInitialDelay(d time.Duration) Schedule {
	if d < 0 && s.err == nil {
		s.err = fmt.Errorf("%w: initial delay must not be negative, got %v", ErrInvalidSchedule, d)
	}
	s.initial = d
	return s
}

// WithMisfire returns s with the given misfire policy (default
// [MisfireSkip]). A [FixedDelay] schedule cannot overrun; the policy
// matters to it only across fail-over (see [MisfireRunOnce]).
func (s Schedule) WithMisfire(p MisfirePolicy) Schedule {
	if (p < MisfireSkip || p > MisfireRunOnce) && s.err == nil {
		s.err = fmt.Errorf("%w: unknown misfire policy %d", ErrInvalidSchedule, int(p))
	}
	s.misfire = p
	return s
}

// Err reports why s cannot run, or nil.
func (s Schedule) Err() error {
	if s.kind == 0 {
		return fmt.Errorf("%w: zero Schedule; use FixedDelay, FixedRate or Cron", ErrInvalidSchedule)
	}
	if s.err != nil {
		return s.err
	}
	return s.checkPolicies()
}

// String describes s.
func (s Schedule) String() string {
	var b string
	switch s.kind {
	case fixedDelay:
		b = fmt.Sprintf("fixed delay %v", s.period)
	case fixedRate:
		b = fmt.Sprintf("fixed rate %v", s.period)
	case cronKind:
		b = fmt.Sprintf("cron %q", s.expr)
	default:
		return "invalid schedule"
	}
	if s.initial > 0 {
		b += fmt.Sprintf(", initial delay %v", s.initial)
	}
	if s.misfire != MisfireSkip {
		b += ", misfire " + s.misfire.String()
	}
	if s.overlap != 0 {
		b += ", overlap " + s.overlap.String()
	}
	if s.maxConcurrent != 0 {
		b += fmt.Sprintf(", at most %d at once", s.maxConcurrent)
	}
	if s.timeout > 0 {
		b += fmt.Sprintf(", timeout %v", s.timeout)
	}
	if s.retry.Attempts > 1 {
		b += fmt.Sprintf(", %d attempts", s.retry.Attempts)
	}
	if s.catchUp > 0 {
		b += fmt.Sprintf(", catch-up window %v", s.catchUp)
	}
	if s.pauseAfter > 0 {
		b += fmt.Sprintf(", pause after %d failures", s.pauseAfter)
	}
	return b
}

// maxCountedMisses bounds the work of counting missed cron activations.
const maxCountedMisses = 1 << 10

// run is the loop of one term: it runs fn on schedule until the term ends,
// the ctx is cancelled, or a run yields (then it returns that run's error).
//
// Besides the planned starts it runs once at once when the previous holder
// missed a planned start while nobody held the lease and the policy is
// MisfireRunOnce, and once as soon as it can when an operator triggers the
// election.
func (s Schedule) run(ctx context.Context, term *Term, c *Client, fn func(context.Context, *Term) error) error {
	select {
	case <-term.ready:
	case <-ctx.Done():
		return nil
	}
	if !term.status.awaitOpened(ctx) {
		return nil
	}
	source := term.status.firstSource()
	if term.status.missedStart() && s.misfire == MisfireRunOnce {
		c.log.Info("the previous holder missed a planned start; running once now", "election", term.ref.Election)
		if stop, err := s.runOnce(ctx, term, c, fn, records.SourceMisfire); stop {
			return err
		}
		source = records.SourceNormal
	}
	first := time.Now().Add(s.initial)
	if s.kind == cronKind {
		first = s.cron.Next(first.Add(-time.Nanosecond))
	}
	term.status.planned(first)
	if !s.wait(ctx, term, c, time.Now().Add(s.initial), fn) {
		return nil
	}
	anchor := time.Now()
	planned := anchor // the planned start of the next run
	if s.kind == cronKind {
		planned = s.cron.Next(anchor.Add(-time.Nanosecond))
	}
	catchUp := false
	for {
		term.status.planned(planned)
		if !catchUp && !s.wait(ctx, term, c, planned, fn) {
			return nil
		}
		if stop, err := s.runOnce(ctx, term, c, fn, source); stop {
			return err
		}
		source = records.SourceNormal
		end := time.Now()
		next, missed := s.next(anchor, planned, end)
		catchUp = missed > 0 && s.misfire == MisfireRunOnce
		if missed > 0 {
			c.log.Info("schedule overran planned starts", "election", term.ref.Election, "missed", missed, "catch_up", catchUp)
			c.metrics.misfired(term.ref, missed)
			c.events.publish(Misfired{TermRef: term.ref, Missed: missed, CatchUp: catchUp, At: end})
		}
		if catchUp {
			// One run at once, standing for the latest missed start.
			next = s.latestBefore(anchor, planned, end)
			source = records.SourceMisfire
		}
		planned = next
	}
}

// runOnce runs fn once if the term is still valid. It reports whether the
// loop must stop: the term is over, or the run yielded (then err is the
// run's error).
func (s Schedule) runOnce(ctx context.Context, term *Term, c *Client, fn func(context.Context, *Term) error, source string) (stop bool, err error) {
	if term.EnsureValid() != nil {
		return true, nil
	}
	if err := c.invoke(ctx, term, fn, source); errors.Is(err, ErrYield) {
		return true, err
	}
	return ctx.Err() != nil, nil
}

// wait sleeps until the instant until (a zero instant: for ever), running
// fn at once, in between, each time an operator triggers the election. It
// reports false when ctx ends first.
func (s Schedule) wait(ctx context.Context, term *Term, c *Client, until time.Time, fn func(context.Context, *Term) error) bool {
	var timeout <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		timeout = t.C
	}
	for {
		changed := c.ops.changes()
		if v, ok := c.ops.triggered(term.ref.Election); ok {
			c.log.Info("triggered by an operator; running once now", "election", term.ref.Election)
			c.ops.consume(term.gen, records.TriggerPrefix+term.ref.Election, v)
			if stop, _ := s.runOnce(ctx, term, c, fn, records.SourceTrigger); stop {
				return false
			}
			continue
		}
		if !until.IsZero() && !time.Now().Before(until) {
			return ctx.Err() == nil
		}
		select {
		case <-timeout:
			return true
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// next returns the planned start after the run planned at `planned` that
// ended at end, and how many planned starts passed during the run.
func (s Schedule) next(anchor, planned, end time.Time) (time.Time, int) {
	switch s.kind {
	case fixedDelay:
		return end.Add(s.period), 0
	case fixedRate:
		k := planned.Sub(anchor)/s.period + 1 // index of the following planned start
		following := anchor.Add(k * s.period)
		if !following.Before(end) {
			return following, 0
		}
		// First planned start at or after end.
		j := (end.Sub(anchor) + s.period - 1) / s.period
		return anchor.Add(j * s.period), int(j - k)
	default:
		following := s.cron.Next(planned)
		missed := 0
		for following.Before(end) && missed < maxCountedMisses {
			missed++
			following = s.cron.Next(following)
		}
		if following.Before(end) {
			following = s.cron.Next(end.Add(-time.Nanosecond))
		}
		return following, missed
	}
}

// latestBefore returns the last planned start before end, after planned.
func (s Schedule) latestBefore(anchor, planned, end time.Time) time.Time {
	switch s.kind {
	case fixedRate:
		j := (end.Sub(anchor) - 1) / s.period
		return anchor.Add(j * s.period)
	case cronKind:
		last := planned
		for i, t := 0, s.cron.Next(planned); t.Before(end) && i < maxCountedMisses; i, t = i+1, s.cron.Next(t) {
			last = t
		}
		return last
	}
	return end
}
