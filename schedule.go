package simba

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule says when a scheduled election runs its function within a term,
// and what happens to each run. Build one with [FixedDelay], [FixedRate] or
// [Cron], then refine it with [Schedule.WithInitialDelay] and
// [Schedule.WithMisfire], and with the run policies: retries
// ([Schedule.WithRetry]), a timeout per run ([Schedule.WithTimeout]), what
// a start does while a run is still going ([Schedule.WithOverlap],
// [Schedule.WithMaxConcurrent]), how far back missed starts are caught up
// ([Schedule.WithCatchUpWindow]) and a pause after failed runs in a row
// ([Schedule.WithPauseAfter]). The zero Schedule is invalid.
//
// Every timing counts from the start of the term: a new leader starts its
// own schedule, it does not continue its predecessor's. It learns from the
// status records what its predecessor left (see [WithStatus]): the planned
// starts that passed with no one to run them, and the failures in a row.
//
// Each run is told why it runs ([RunInfoFrom]). Every planned start that
// does not run is reported, once per occasion, with its reason: a
// [Skipped] event, the counter simba.schedule.skipped, and an entry in the
// history (which keeps the last 50 entries, runs and skips together).
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
// alternative, and [OverlapPolicy] for the others). Runs never overlap but
// under [OverlapAllow].
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
