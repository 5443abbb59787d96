package jobs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/internal/jobstest"
	"github.com/simba-go/simba/jobs"
)

func noop(context.Context)                                         {}
func noopTerm(context.Context, *simba.Term) error                  { return nil }
func noopPart(context.Context, *simba.Term, int) error             { return nil }
func noopParam(context.Context, *simba.Term, jobs.Partition) error { return nil }

func TestValidateMatchesHandlersAndJobs(t *testing.T) {
	cfg := func(s []jobs.ScheduledJob, p []jobs.PartitionedJob) jobs.Config {
		return jobs.Config{Scheduled: s, Partitioned: p}
	}
	every := func(name string) jobs.ScheduledJob { return jobs.ScheduledJob{Name: name, FixedDelay: time.Second} }
	group := func(name string) jobs.PartitionedJob {
		return jobs.PartitionedJob{Group: name, Partitions: 2, FixedRate: time.Second}
	}
	for _, tc := range []struct {
		name     string
		register func(*jobs.Registry)
		cfg      jobs.Config
		want     []problem
	}{
		{"all matched", func(r *jobs.Registry) {
			r.Scheduled("a", noop)
			r.ScheduledTerm("b", noopTerm)
			r.Partitioned("c", noopPart)
			r.PartitionedWithParam("d", noopParam)
		}, cfg([]jobs.ScheduledJob{every("a"), every("b"), {Name: "b2", Handler: "b", FixedRate: time.Second}},
			[]jobs.PartitionedJob{group("c"), group("d"), {Group: "d2", Handler: "d", Partitions: 1, FixedDelay: 1}}), nil},
		{"a job with no handler", func(r *jobs.Registry) {}, cfg([]jobs.ScheduledJob{every("report")}, []jobs.PartitionedJob{group("billing")}),
			[]problem{
				{"", sched, "report", "name", jobs.ErrNoHandler, `no handler registered as "report"`},
				{"", part, "billing", "group", jobs.ErrNoHandler, `no handler registered as "billing"`},
			}},
		{"an unknown handler", func(r *jobs.Registry) { r.Scheduled("report", noop) },
			cfg([]jobs.ScheduledJob{every("report"), {Name: "audit", Handler: "reprot", FixedDelay: 1}}, nil),
			[]problem{{"", sched, "audit", "handler", jobs.ErrNoHandler, `no handler registered as "reprot"`}}},
		{"a handler of the other kind", func(r *jobs.Registry) {
			r.Partitioned("report", noopPart)
			r.Scheduled("billing", noop)
		}, cfg([]jobs.ScheduledJob{every("report")}, []jobs.PartitionedJob{group("billing")}),
			[]problem{
				{"", sched, "report", "name", jobs.ErrNoHandler, `handler "report" is registered for partitioned jobs`},
				{"", part, "billing", "group", jobs.ErrNoHandler, `handler "billing" is registered for scheduled jobs`},
			}},
		{"registration problems", func(r *jobs.Registry) {
			r.Scheduled("report", noop)
			r.ScheduledTerm("report", noopTerm)
			r.Partitioned("", noopPart)
			r.PartitionedWithParam("billing", nil)
			r.Scheduled("nil", nil)
		}, cfg([]jobs.ScheduledJob{every("report")}, nil),
			[]problem{
				{"", "handler", "report", "", jobs.ErrDuplicateName, "registered twice (first for scheduled jobs)"},
				{"", "handler", "", "", jobs.ErrInvalidValue, "empty handler name"},
				{"", "handler", "billing", "", jobs.ErrInvalidValue, "nil function"},
				{"", "handler", "nil", "", jobs.ErrInvalidValue, "nil function"},
			}},
		{"config problems in code", func(r *jobs.Registry) {
			r.Scheduled("a", noop)
			r.Partitioned("g", noopPart)
		}, cfg([]jobs.ScheduledJob{
			{Name: "a", FixedDelay: time.Second, FixedRate: time.Second},
			{Name: "a", Handler: "a"},
			{Handler: "a", FixedRate: -time.Second, InitialDelay: -1},
			{Name: "g.0", Handler: "a", FixedDelay: 1},
		}, []jobs.PartitionedJob{
			{Group: "g", Partitions: 1, FixedDelay: time.Second, Params: map[int]string{0: "x", 1: "y", -1: "z"}},
			{Group: "h", Handler: "g"},
		}),
			[]problem{
				{"", sched, "a", "fixedDelay/fixedRate/cron", jobs.ErrTiming, "both"},
				{"", sched, "a", "name", jobs.ErrDuplicateName, "scheduled job #1"},
				{"", sched, "a", "fixedDelay/fixedRate/cron", jobs.ErrTiming, "neither"},
				{"", sched, "#3", "name", jobs.ErrInvalidValue, "missing"},
				{"", sched, "#3", "fixedRate", jobs.ErrDuration, "must be positive, got -1s"},
				{"", sched, "#3", "initialDelay", jobs.ErrDuration, "must not be negative, got -1ns"},
				{"", sched, "g.0", "name", jobs.ErrDuplicateName, `partition 0 of partitioned job "g"`},
				{"", part, "g", "shardingItemParameters", jobs.ErrInvalidValue, "partition -1 out of range [0, 1)"},
				{"", part, "g", "shardingItemParameters", jobs.ErrInvalidValue, "partition 1 out of range [0, 1)"},
				{"", part, "h", "partitions", jobs.ErrInvalidValue, "must be positive, got 0"},
				{"", part, "h", "fixedDelay/fixedRate/cron", jobs.ErrTiming, "neither"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := jobs.NewRegistry()
			tc.register(reg)
			err := jobs.Validate(reg, tc.cfg)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			checkProblems(t, err, tc.want...)
		})
	}
}

// A loaded configuration keeps its positions for the problems Validate finds.
func TestValidateReportsFilePositions(t *testing.T) {
	cfg, err := jobs.Load(strings.NewReader("scheduled:\n  - name: report\n    fixedDelay: 1m\n"), jobs.YAML, jobstest.NoEnv)
	if err != nil {
		t.Fatal(err)
	}
	err = jobs.Validate(jobs.NewRegistry(), cfg)
	checkProblems(t, err, problem{"line 2", sched, "report", "name", jobs.ErrNoHandler, ""})
	if want := `simba/jobs: line 2: scheduled job "report": name: no such handler: no handler registered as "report"`; err.Error() != want {
		t.Errorf("message\n%s\nwant\n%s", err, want)
	}

	// Once the job is changed in code, its old position is not claimed.
	cfg.Scheduled[0].Name = "other"
	checkProblems(t, jobs.Validate(jobs.NewRegistry(), cfg), problem{"", sched, "other", "name", jobs.ErrNoHandler, ""})
}

func TestConfigErrorListsEveryProblem(t *testing.T) {
	var reg jobs.Registry // the zero Registry works
	reg.Scheduled("x", noop)
	err := jobs.Validate(&reg, jobs.Config{Scheduled: []jobs.ScheduledJob{{Name: "report"}}})
	want := `simba/jobs: 2 problems in the job configuration:
	scheduled job "report": fixedDelay/fixedRate/cron: exactly one of fixedDelay, fixedRate and cron must be set: neither fixedDelay, fixedRate nor cron is set
	scheduled job "report": name: no such handler: no handler registered as "report"`
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}

func TestAHandlerWithNoJobIsAWarning(t *testing.T) {
	reg := jobs.NewRegistry()
	reg.Scheduled("report", noop)
	reg.Scheduled("cleanup", noop)
	reg.PartitionedWithParam("billing", noopParam)
	c := jobs.Config{Scheduled: []jobs.ScheduledJob{{Name: "report", FixedDelay: time.Second}}}
	if err := jobs.Validate(reg, c); err != nil {
		t.Fatalf("Validate refused a configuration whose only fault is an unused handler: %v", err)
	}
	checkProblems(t, &jobs.ConfigError{Errs: jobs.Warnings(reg, c)},
		problem{"", "handler", "cleanup", "", jobs.ErrUnusedHandler, `no scheduled job has the name "cleanup"`},
		problem{"", "handler", "billing", "", jobs.ErrUnusedHandler, `no partitioned job has the name "billing"`},
	)
	reg = jobs.NewRegistry()
	reg.Scheduled("report", noop)
	if w := jobs.Warnings(reg, c); w != nil {
		t.Errorf("Warnings of a registry whose handlers are all used: %v", w)
	}
	if w := jobs.Warnings(nil, c); w != nil {
		t.Errorf("Warnings of a nil registry: %v", w)
	}
}
