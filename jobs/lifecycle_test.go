package jobs_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/jobstest"
	"github.com/simba-go/simba/jobs"
)

// lifecycleJobs returns a scheduled job "report" and a partitioned job
// "billing" of two partitions, every run of which calls run.
func lifecycleJobs(run func(ctx context.Context, term *simba.Term) error) (*jobs.Registry, jobs.Config) {
	reg := jobs.NewRegistry()
	reg.ScheduledTerm("report", run)
	reg.Partitioned("billing", func(ctx context.Context, term *simba.Term, _ int) error { return run(ctx, term) })
	cfg := jobs.Config{
		Scheduled:   []jobs.ScheduledJob{{Name: "report", FixedDelay: 100 * time.Millisecond}},
		Partitioned: []jobs.PartitionedJob{{Group: "billing", Partitions: 2, FixedDelay: 100 * time.Millisecond}},
	}
	return reg, cfg
}

// stuckReport returns lifecycleJobs whose first run of report closes began,
// then ignores its ctx until release is closed.
func stuckReport() (reg *jobs.Registry, cfg jobs.Config, began, release chan struct{}) {
	began, release = make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	reg, cfg = lifecycleJobs(func(ctx context.Context, term *simba.Term) error {
		if term.Name() == "report" && once.CompareAndSwap(false, true) {
			close(began)
			<-release // ignores ctx
		}
		return nil
	})
	return reg, cfg, began, release
}

// lifecycleLeases are the leases of lifecycleJobs.
var lifecycleLeases = []string{"report", "billing.0", "billing.1"}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Start returns at once with the jobs running; Shutdown stops them and
// returns nil once every run has returned and every lease is released, at
// the moment Done is closed; the jobs' elections and groups may then be
// started again.
func TestStartAndShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client := jobstest.NewClient(t, b, simba.WithTTL(jobstest.TTL))
		var active, ran atomic.Int32
		reg, cfg := lifecycleJobs(func(ctx context.Context, _ *simba.Term) error {
			active.Add(1)
			defer active.Add(-1)
			ran.Add(1)
			time.Sleep(50 * time.Millisecond) // ignores ctx: the stop waits for it
			return nil
		})
		j, err := jobs.Start(client, reg, cfg, jobstest.NoEnv)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if ran.Load() == 0 {
			t.Fatal("no job ran within a second of Start")
		}
		if isClosed(j.Done()) {
			t.Fatal("Done closed before the jobs were stopped")
		}
		for active.Load() == 0 { // stop with runs in flight
			time.Sleep(10 * time.Millisecond)
		}
		doneAt := make(chan time.Time, 1)
		go func() {
			<-j.Done()
			doneAt <- time.Now()
		}()
		if err := j.Shutdown(t.Context()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		returned := time.Now()
		if at := <-doneAt; !at.Equal(returned) {
			t.Errorf("Done closed %v after Shutdown returned nil, want at the same moment", at.Sub(returned))
		}
		if n := active.Load(); n != 0 {
			t.Errorf("%d runs still running when Shutdown returned nil", n)
		}
		for _, lease := range lifecycleLeases {
			if s, _, ok := b.Holder(lease); ok {
				t.Errorf("%s still held by %s when Shutdown returned nil", lease, s)
			}
		}
		if err := j.Shutdown(t.Context()); err != nil {
			t.Errorf("a second Shutdown: %v", err)
		}
		if err := j.Close(); err != nil {
			t.Errorf("Close after Shutdown: %v", err)
		}
		again, err := client.Election("report").RunWhileLeader(noopTerm)
		if err != nil {
			t.Fatalf("report cannot be started again: %v", err)
		}
		again.Close()
	})
}

// From a run of the jobs' own handlers: Stop returns at once; Shutdown,
// given the run's ctx or a ctx derived from it, begins the stop and returns
// an error at once, since it cannot wait for the run that called it. Either
// way the jobs stop once the run has returned.
func TestStopFromOwnHandler(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(ctx context.Context, j *jobs.Jobs) error
	}{
		{"Stop", func(_ context.Context, j *jobs.Jobs) error { j.Stop(); return nil }},
		{"Shutdown", func(ctx context.Context, j *jobs.Jobs) error { return j.Shutdown(ctx) }},
		{"ShutdownDerivedCtx", func(ctx context.Context, j *jobs.Jobs) error {
			ctx, cancel := context.WithTimeout(ctx, time.Hour)
			defer cancel()
			return j.Shutdown(ctx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				client := jobstest.NewClient(t, b, simba.WithTTL(jobstest.TTL))
				var j *jobs.Jobs
				ready := make(chan struct{})
				type result struct {
					err  error
					took time.Duration
				}
				got := make(chan result, 1)
				var once atomic.Bool
				var returned atomic.Int32
				reg, cfg := lifecycleJobs(func(ctx context.Context, term *simba.Term) error {
					if term.Name() != "report" || !once.CompareAndSwap(false, true) {
						return nil
					}
					defer returned.Add(1)
					<-ready
					at := time.Now()
					err := tc.call(ctx, j)
					got <- result{err, time.Since(at)}
					return nil
				})
				var err error
				j, err = jobs.Start(client, reg, cfg, jobstest.NoEnv)
				if err != nil {
					t.Fatal(err)
				}
				close(ready)
				r := <-got
				if r.took != 0 {
					t.Errorf("%s from a handler returned after %v, want at once", tc.name, r.took)
				}
				switch {
				case tc.name == "Stop":
				case r.err == nil:
					t.Error("Shutdown from a handler returned nil, want an error saying it cannot wait for itself")
				default:
					t.Logf("Shutdown: %v", r.err)
					const want = "simba/jobs: shutdown called with the ctx of a run of the jobs' own handlers"
					if !strings.HasPrefix(r.err.Error(), want) {
						t.Errorf("Shutdown's error %q, want it to begin with %q", r.err, want)
					}
				}
				<-j.Done() // the stop began: it completes once the run returned
				if returned.Load() != 1 {
					t.Error("Done closed before the calling run returned")
				}
				for _, lease := range lifecycleLeases {
					if s, _, ok := b.Holder(lease); ok {
						t.Errorf("%s still held by %s once Done was closed", lease, s)
					}
				}
				if err := j.Shutdown(t.Context()); err != nil {
					t.Errorf("Shutdown from the test once Done: %v", err)
				}
			})
		})
	}
}

// With a run that ignores the cancellation of its ctx, Shutdown returns its
// ctx's error at the ctx's deadline, naming the job still stopping; the stop
// goes on in the background and completes once the run returns.
func TestShutdownBoundedByCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client := jobstest.NewClient(t, b, simba.WithTTL(jobstest.TTL))
		reg, cfg, began, release := stuckReport()
		j, err := jobs.Start(client, reg, cfg, jobstest.NoEnv)
		if err != nil {
			t.Fatal(err)
		}
		<-began
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		at := time.Now()
		err = j.Shutdown(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v, want the ctx's deadline", err)
		}
		t.Logf("Shutdown: %v", err)
		if d := time.Since(at); d != 100*time.Millisecond {
			t.Errorf("Shutdown returned after %v, want its ctx's 100ms", d)
		}
		const want = `simba/jobs: shutdown stopped waiting with scheduled job "report" still stopping; the stop goes on in the background`
		if got := err.Error(); !strings.HasPrefix(got, want) {
			t.Errorf("Shutdown's error %q, want it to begin with %q", got, want)
		}
		if isClosed(j.Done()) {
			t.Error("Done closed while a run was still running")
		}
		close(release)
		<-j.Done()
		if err := j.Shutdown(t.Context()); err != nil {
			t.Errorf("Shutdown once the run returned: %v", err)
		}
	})
}

// Run waits for the jobs to stop at most WithShutdownTimeout after its ctx
// ended, then returns the error of Shutdown; the stop goes on in the
// background.
func TestRunShutdownTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client := jobstest.NewClient(t, b, simba.WithTTL(jobstest.TTL))
		reg, cfg, began, release := stuckReport()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- jobs.Run(ctx, client, reg, cfg, jobstest.NoEnv, jobs.WithShutdownTimeout(time.Second))
		}()
		<-began
		at := time.Now()
		cancel()
		err := <-done
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `scheduled job "report" still stopping`) {
			t.Errorf("Run: %v, want the shutdown timeout's error naming report", err)
		}
		if d := time.Since(at); d != time.Second {
			t.Errorf("Run returned %v after its ctx ended, want the shutdown timeout, 1s", d)
		}
		close(release)
		if err := client.Close(); err != nil {
			t.Error(err)
		}
	})
}

// Disabled, Start starts nothing; the handle stops at once when stopped.
// Enabled, the handle's Done is closed when the client closes, which ends
// every job's task.
func TestStartDisabledAndClientClosed(t *testing.T) {
	for _, disabled := range []bool{true, false} {
		t.Run(map[bool]string{true: "Disabled", false: "ClientClosed"}[disabled], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				client := jobstest.NewClient(t, b, simba.WithTTL(jobstest.TTL))
				reg, cfg := lifecycleJobs(func(context.Context, *simba.Term) error { return nil })
				cfg.Disabled = disabled
				j, err := jobs.Start(client, reg, cfg, jobstest.NoEnv)
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				if isClosed(j.Done()) {
					t.Fatalf("disabled %v: Done closed before a stop", disabled)
				}
				if disabled {
					if len(b.History()) != 0 || b.Stats().Join != 0 {
						t.Errorf("disabled, yet %d leases were granted and %d groups joined", len(b.History()), b.Stats().Join)
					}
					if err := j.Shutdown(t.Context()); err != nil {
						t.Errorf("Shutdown: %v", err)
					}
					return
				}
				if err := client.Close(); err != nil {
					t.Fatal(err)
				}
				<-j.Done()
				if err := j.Shutdown(t.Context()); err != nil {
					t.Errorf("Shutdown once the client closed: %v", err)
				}
			})
		})
	}
}

func TestStartRefusesBadArguments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client := jobstest.NewClient(t, b)
		reg := jobs.NewRegistry()
		for name, opts := range map[string][]jobs.Option{
			"nil option":                {nil},
			"zero shutdown timeout":     {jobs.WithShutdownTimeout(0)},
			"negative shutdown timeout": {jobs.WithShutdownTimeout(-time.Second)},
		} {
			if j, err := jobs.Start(client, reg, jobs.Config{}, opts...); !errors.Is(err, jobs.ErrInvalidValue) || j != nil {
				t.Errorf("Start with %s: %v, %v; want nil and ErrInvalidValue", name, j, err)
			}
			if err := jobs.Run(t.Context(), client, reg, jobs.Config{}, opts...); !errors.Is(err, jobs.ErrInvalidValue) {
				t.Errorf("Run with %s: %v, want ErrInvalidValue", name, err)
			}
		}
		if j, err := jobs.Start(nil, reg, jobs.Config{}); !errors.Is(err, jobs.ErrInvalidValue) || j != nil {
			t.Errorf("Start with a nil client: %v, %v; want nil and ErrInvalidValue", j, err)
		}
	})
}
