package main

import (
	"context"
	"flag"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
)

// The run-policy flags of simba run --election and --group: the schedule
// they make, and their bad input. The end-to-end scenario RetryFlag of
// TestRunEndToEnd runs --retry through the built command.

// parseRun parses the flags of simba run (args without "run") as the CLI
// does, and returns them with the function that says which were given.
func parseRun(t *testing.T, args ...string) (*runFlags, func(string) bool) {
	t.Helper()
	var o runFlags
	fs := flag.NewFlagSet("simba run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	o.argv = pos
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	return &o, func(name string) bool { return explicit[name] }
}

func TestRunPolicyFlags(t *testing.T) {
	rate := simba.FixedRate(time.Minute)
	for _, tc := range []struct {
		name     string
		args     []string
		want     simba.Schedule
		progress time.Duration
	}{
		{"none", []string{"--fixed-rate", "1m"}, rate, 0},
		{"retry", []string{"--fixed-rate", "1m", "--retry", "3"}, rate.WithRetry(simba.RetryPolicy{Attempts: 3}), 0},
		{"retry with backoff", []string{"--fixed-rate", "1m", "--retry", "3", "--retry-backoff", "200ms", "--retry-max-backoff", "5s"},
			rate.WithRetry(simba.RetryPolicy{Attempts: 3, Backoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Second}), 0},
		{"timeout", []string{"--fixed-rate", "1m", "--run-timeout", "30s"}, rate.WithTimeout(30 * time.Second), 0},
		{"overlap", []string{"--fixed-rate", "1m", "--overlap", "cancel-running"}, rate.WithOverlap(simba.OverlapCancelRunning), 0},
		{"overlap buffer-one", []string{"--fixed-rate", "1m", "--overlap", "buffer-one"}, rate.WithOverlap(simba.OverlapBufferOne), 0},
		{"allow, at most 3", []string{"--fixed-rate", "1m", "--overlap", "allow", "--max-concurrent", "3"}, rate.WithOverlap(simba.OverlapAllow).WithMaxConcurrent(3), 0},
		{"catch-up and pause", []string{"--fixed-rate", "1m", "--catch-up-window", "10m", "--pause-after", "4"}, rate.WithCatchUpWindow(10 * time.Minute).WithPauseAfter(4), 0},
		{"progress", []string{"--fixed-rate", "1m", "--progress-timeout", "3s"}, rate, 3 * time.Second},
		{"all, on a cron with misfire", []string{"--cron", "@hourly", "--misfire", "run-once", "--retry", "2", "--run-timeout", "1m", "--overlap", "skip",
			"--catch-up-window", "2h", "--pause-after", "3", "--progress-timeout", "10s"},
			simba.Cron("@hourly").WithMisfire(simba.MisfireRunOnce).WithRetry(simba.RetryPolicy{Attempts: 2}).WithTimeout(time.Minute).
				WithOverlap(simba.OverlapSkip).WithCatchUpWindow(2 * time.Hour).WithPauseAfter(3), 10 * time.Second},
	} {
		for _, mode := range [][]string{{"--election", "e"}, {"--group", "g", "--partitions", "3"}} {
			t.Run(tc.name+"/"+mode[0][2:], func(t *testing.T) {
				o, explicit := parseRun(t, append(append(mode, tc.args...), "--", "true")...)
				s, err := o.check(explicit)
				if err != nil {
					t.Fatal(err)
				}
				if s == nil || !reflect.DeepEqual(*s, tc.want) {
					t.Errorf("schedule %v, want %v", s, tc.want)
				}
				if watchdog := len(o.pol.taskOptions()) == 1; o.pol.progress != tc.progress || watchdog != (tc.progress > 0) {
					t.Errorf("progress timeout %v, %d task options; want %v", o.pol.progress, len(o.pol.taskOptions()), tc.progress)
				}
			})
		}
	}
}

// --progress-timeout applies to a command run once per term too: no
// schedule, a watchdog.
func TestRunProgressTimeoutPerTerm(t *testing.T) {
	for _, args := range [][]string{
		{"--election", "e", "--progress-timeout", "2s", "--", "true"},
		{"--election", "e", "--once", "--progress-timeout", "2s", "--", "true"},
		{"--group", "g", "--partitions", "2", "--restart", "always", "--progress-timeout", "2s", "--", "true"},
	} {
		o, explicit := parseRun(t, args...)
		s, err := o.check(explicit)
		if err != nil || s != nil {
			t.Fatalf("%q: schedule %v, %v; want none, no error", args, s, err)
		}
		if o.pol.progress != 2*time.Second || len(o.pol.taskOptions()) != 1 {
			t.Errorf("%q: progress timeout %v, %d task options; want 2s and the watchdog", args, o.pol.progress, len(o.pol.taskOptions()))
		}
	}
}

// Bad run-policy flags are usage errors (exit 2, one line), refused
// before anything connects, as TestRunBadInput's.
func TestRunPolicyBadInput(t *testing.T) {
	b := memory.New()
	defer b.Close()
	jobsFile := t.TempDir() + "/jobs.yaml"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"retry without schedule", []string{"--election", "a", "--retry", "2"}, "--retry applies to a schedule (--every, --fixed-rate or --cron) only"},
		{"run-timeout with once", []string{"--election", "a", "--once", "--run-timeout", "1s"}, "--run-timeout applies to a schedule"},
		{"overlap in a group without schedule", []string{"--group", "g", "--partitions", "2", "--overlap", "skip"}, "--overlap applies to a schedule"},
		{"max-concurrent without schedule", []string{"--election", "a", "--max-concurrent", "2"}, "--max-concurrent applies to a schedule"},
		{"catch-up-window without schedule", []string{"--election", "a", "--catch-up-window", "1m"}, "--catch-up-window applies to a schedule"},
		{"pause-after without schedule", []string{"--election", "a", "--pause-after", "3"}, "--pause-after applies to a schedule"},
		{"retry-backoff without schedule", []string{"--election", "a", "--retry-backoff", "1s"}, "--retry-backoff applies to a schedule"},
		{"retry-backoff without retry", []string{"--election", "a", "--every", "1s", "--retry-backoff", "1s"}, "--retry-backoff applies with --retry N only"},
		{"retry-max-backoff without retry", []string{"--election", "a", "--every", "1s", "--retry-max-backoff", "1s"}, "--retry-max-backoff applies with --retry N only"},
		{"negative retry", []string{"--election", "a", "--every", "1s", "--retry", "-1"}, "--retry: invalid schedule: retry attempts must not be negative, got -1"},
		{"negative backoff", []string{"--election", "a", "--every", "1s", "--retry", "2", "--retry-backoff", "-1s"}, "--retry and --retry-backoff: invalid schedule: retry backoff must not be negative"},
		{"negative timeout", []string{"--election", "a", "--every", "1s", "--run-timeout", "-1s"}, "--run-timeout: invalid schedule: run timeout must not be negative, got -1s"},
		{"timeout without unit", []string{"--election", "a", "--every", "1s", "--run-timeout", "5"}, "missing unit: write 5s for seconds"},
		{"bad overlap", []string{"--election", "a", "--every", "1s", "--overlap", "later"}, "--overlap later: use skip, buffer-one, cancel-running or allow"},
		{"max-concurrent without allow", []string{"--election", "a", "--fixed-rate", "1s", "--max-concurrent", "3"}, `--max-concurrent: invalid schedule: max concurrent runs 3 needs the overlap policy allow, not "skip"`},
		{"max-concurrent 0", []string{"--election", "a", "--fixed-rate", "1s", "--overlap", "allow", "--max-concurrent", "0"}, "--max-concurrent: invalid schedule: max concurrent runs must be at least 1, got 0"},
		{"negative catch-up window", []string{"--group", "g", "--partitions", "2", "--every", "1s", "--catch-up-window", "-1m"}, "--catch-up-window: invalid schedule: catch-up window must not be negative"},
		{"negative pause-after", []string{"--election", "a", "--every", "1s", "--pause-after", "-2"}, "--pause-after: invalid schedule: pause after failures must not be negative, got -2"},
		{"negative progress timeout", []string{"--election", "a", "--progress-timeout", "-1s"}, "--progress-timeout must not be negative, got -1s"},
		{"retry with jobs", []string{"--jobs", jobsFile, "--retry", "2"}, "--retry does not apply to --jobs: the file gives each job its run policies"},
		{"progress timeout with jobs", []string{"--jobs", jobsFile, "--progress-timeout", "1s"}, "--progress-timeout does not apply to --jobs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run"}, tc.args...)
			if !slices.Contains(tc.args, "--jobs") {
				args = append(args, "--", "true")
			}
			h := newHarness(t, b)
			// Refused at once; bounded, so that input let through, which
			// runs until interrupted, fails the test rather than hangs it.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r := h.runContext(ctx, args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d\n%v", r.code, exitUsage, r)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr lacks %q\n%v", tc.want, r)
			}
			// A value the flag package refuses is followed by the usage line.
			if n := strings.Count(strings.TrimRight(r.stderr, "\n"), "\n"); n != 0 && !strings.Contains(r.stderr, "invalid value") {
				t.Errorf("stderr has %d lines, want one\n%v", n+1, r)
			}
			if len(h.opened) > 0 {
				t.Errorf("the backend was opened (%v): bad input must be refused before any lease is taken", h.opened)
			}
		})
	}
}
