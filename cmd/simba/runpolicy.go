package main

import (
	"flag"
	"strings"
	"time"

	"github.com/simba-go/simba"
)

// The run policies of simba run --election and --group (issue 42): flags
// spelled as the keys of a jobs file (package jobs), set on the schedule
// with simba's own With… methods, whose checks (Schedule.Err) are the
// only checks of their values.

// schedulePolicyFlags are the flags of a schedule's policies: without a
// schedule, each is an error.
var schedulePolicyFlags = []string{"retry", "retry-backoff", "retry-max-backoff", "run-timeout", "overlap", "catch-up-window", "pause-after", "max-concurrent"}

// progressFlag is the flag of the progress watchdog, which applies to a
// command run once per term too.
const progressFlag = "progress-timeout"

// runPolicies are the run-policy flags of simba run.
type runPolicies struct {
	retry                         int
	retryBackoff, retryMaxBackoff time.Duration
	timeout                       time.Duration
	overlap                       string
	maxConcurrent                 int
	catchUp                       time.Duration
	pauseAfter                    int
	progress                      time.Duration
}

func (p *runPolicies) register(fs *flag.FlagSet) {
	fs.IntVar(&p.retry, "retry", 0, "with a schedule, run a failed run up to `N` times in all, the first included, within its term (jobs file: retry)")
	durationVar(fs, &p.retryBackoff, "retry-backoff", 0, "with --retry, wait this `duration` before the first retry, doubling for each later one (default 1s)")
	durationVar(fs, &p.retryMaxBackoff, "retry-max-backoff", 0, "with --retry, wait at most this `duration` before a retry (default 1m, or --retry-backoff when longer)")
	durationVar(fs, &p.timeout, "run-timeout", 0, "with a schedule, end each run after this `duration`, as the end of a term does, and count it failed (jobs file: timeout; --timeout is the backend's)")
	fs.StringVar(&p.overlap, "overlap", "", "with a schedule, what a planned start does while a run is still going (`mode`: skip, buffer-one, cancel-running or allow; default: per --misfire)")
	durationVar(fs, &p.catchUp, "catch-up-window", 0, "with a schedule, skip the planned starts missed by more than this `duration` (default: no limit)")
	fs.IntVar(&p.pauseAfter, "pause-after", 0, "with a schedule, pause the job after `N` failed runs in a row, as simba disable does, until simba enable (jobs file: pauseAfterFailures)")
	fs.IntVar(&p.maxConcurrent, "max-concurrent", 0, "with --overlap allow, at most `N` runs at once (default 2)")
	durationVar(fs, &p.progress, progressFlag, 0, "give the term up when the command writes no line (standard output or error) for this `duration` (default: no watchdog)")
}

// check refuses the flags that apply with another only: a retry's backoff
// without --retry. A schedule's policies without a schedule are refused
// with --initial-delay's (checkTiming); their values are the schedule's to
// check (apply). It checks the sign of --progress-timeout, which package
// simba checks only when the task starts.
func (p *runPolicies) check(explicit func(string) bool) error {
	for _, f := range []string{"retry-backoff", "retry-max-backoff"} {
		if explicit(f) && !explicit("retry") {
			return badRunf("--%s applies with --retry N only", f)
		}
	}
	if p.progress < 0 {
		return badRunf("--%s must not be negative, got %v", progressFlag, p.progress)
	}
	return nil
}

// apply returns s, a valid schedule, with the policies given, or the
// first that simba refuses (Schedule.Err), named by its flags.
// --max-concurrent comes last: simba checks it against the overlap policy.
func (p *runPolicies) apply(s simba.Schedule, explicit func(string) bool) (simba.Schedule, error) {
	var mode simba.OverlapPolicy
	if explicit("overlap") {
		var ok bool
		if mode, ok = overlapMode(p.overlap); !ok {
			return s, badRunf("--overlap %s: use skip, buffer-one, cancel-running or allow", p.overlap)
		}
	}
	var retryFlags []string
	for _, f := range []string{"retry", "retry-backoff", "retry-max-backoff"} {
		if explicit(f) {
			retryFlags = append(retryFlags, "--"+f)
		}
	}
	for _, st := range []struct {
		given bool
		flags string
		set   func(simba.Schedule) simba.Schedule
	}{
		{len(retryFlags) > 0, strings.Join(retryFlags, " and "), func(s simba.Schedule) simba.Schedule {
			return s.WithRetry(simba.RetryPolicy{Attempts: p.retry, Backoff: p.retryBackoff, MaxBackoff: p.retryMaxBackoff})
		}},
		{explicit("run-timeout"), "--run-timeout", func(s simba.Schedule) simba.Schedule { return s.WithTimeout(p.timeout) }},
		{explicit("overlap"), "--overlap", func(s simba.Schedule) simba.Schedule { return s.WithOverlap(mode) }},
		{explicit("catch-up-window"), "--catch-up-window", func(s simba.Schedule) simba.Schedule { return s.WithCatchUpWindow(p.catchUp) }},
		{explicit("pause-after"), "--pause-after", func(s simba.Schedule) simba.Schedule { return s.WithPauseAfter(p.pauseAfter) }},
		{explicit("max-concurrent"), "--max-concurrent", func(s simba.Schedule) simba.Schedule { return s.WithMaxConcurrent(p.maxConcurrent) }},
	} {
		if !st.given {
			continue
		}
		if s = st.set(s); s.Err() != nil {
			return s, badRunf("%s: %s", st.flags, message(s.Err().Error()))
		}
	}
	return s, nil
}

// overlapMode reads --overlap: an overlap policy as simba names it
// (OverlapPolicy.String).
func overlapMode(v string) (simba.OverlapPolicy, bool) {
	for p := simba.OverlapSkip; p <= simba.OverlapAllow; p++ {
		if v == p.String() {
			return p, true
		}
	}
	return 0, false
}

// taskOptions are the task options of the flags: the progress watchdog.
func (p *runPolicies) taskOptions() []simba.TaskOption {
	if p.progress > 0 {
		return []simba.TaskOption{simba.WithProgressWatchdog(p.progress)}
	}
	return nil
}
