package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/jobstest"
	"github.com/simba-go/simba/jobs"
)

// holderNode returns the node holding lease on the memory server, or "".
func holderNode(b *memory.Backend, lease string) string {
	s, _, ok := b.Holder(lease)
	if !ok {
		return ""
	}
	return s[:strings.LastIndex(s, "-")] // session ids are "<node>-<n>"
}

// The jobs are started at once, without waiting for the client's session,
// and run only once it is ready, as every task of the client does.
func TestJobsRunOnlyOnceTheSessionIsReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		n := b.Node("a")
		n.Partition() // the backend cannot be reached at start
		rec := jobstest.NewRecorder(10 * time.Millisecond)
		var log logBuffer
		r := jobstest.StartRunner(t, "a", n, rec, jobstest.LoadConfig(t), jobs.WithLogger(log.logger()))

		synctest.Wait()
		if !strings.Contains(log.String(), "jobs started") {
			t.Errorf("the jobs were not started at once:\n%s", log.String())
		}
		time.Sleep(20 * time.Second)
		if runs := rec.Runs(); len(runs) != 0 || len(b.History()) != 0 {
			t.Fatalf("ran before the session was ready: %d runs, %d grants", len(runs), len(b.History()))
		}

		healed := time.Now()
		n.Heal()
		time.Sleep(2 * time.Second)
		ran := rec.RanSince(healed)
		for _, lease := range jobstest.Leases {
			if len(ran[lease]) != 1 {
				t.Errorf("%s ran on %v after the heal, want on a alone", lease, ran[lease])
			}
		}
		// The sharding-item parameters reached the handler.
		params := map[string]string{}
		for _, run := range rec.Runs() {
			params[run.Lease] = run.Param
		}
		want := map[string]string{"report": "", "billing.0": "Beijing", "billing.1": "Shanghai", "billing.2": "Guangzhou", "billing.3": "Shenzhen"}
		for lease, p := range want {
			if params[lease] != p {
				t.Errorf("%s ran with parameter %q, want %q", lease, params[lease], p)
			}
		}
		r.Stop(t)
		r.Client.Close()
		rec.CheckOneAtATime(t)
	})
}

func TestRunStoppedBeforeTheSessionRunsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		n := b.Node("a")
		n.Partition()
		rec := jobstest.NewRecorder(0)
		r := jobstest.StartRunner(t, "a", n, rec, jobstest.LoadConfig(t))
		time.Sleep(5 * time.Second)
		r.Stop(t)
		n.Heal()
		time.Sleep(5 * time.Second)
		if len(rec.Runs()) != 0 || len(b.History()) != 0 {
			t.Errorf("Run stopped before the session was ready ran jobs: %d runs, %d grants", len(rec.Runs()), len(b.History()))
		}
		// Nothing of Run's is left on the client: the jobs may be started by hand.
		task, err := r.Client.Election("report").RunWhileLeader(noopTerm)
		if err != nil {
			t.Fatal(err)
		}
		task.Close()
		r.Client.Close()
	})
}

func TestRunHandsEveryJobOffBeforeReturning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		// Runs last long enough that a stop finds them running.
		rec := jobstest.NewRecorder(150 * time.Millisecond)
		cfg := jobstest.LoadConfig(t)
		a := jobstest.StartRunner(t, "a", b.Node("a"), rec, cfg)
		time.Sleep(time.Second)
		c := jobstest.StartRunner(t, "c", b.Node("c"), rec, cfg)
		time.Sleep(3 * time.Second)

		// a leads report (it started first) and some partitions.
		if holderNode(b, "report") != "a" {
			t.Fatalf("report held by %q, want a", holderNode(b, "report"))
		}
		a.Cancel()
		err := <-a.Done
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		// At the instant Run returns, a holds nothing and runs nothing.
		for _, lease := range jobstest.Leases {
			if holderNode(b, lease) == "a" {
				t.Errorf("%s still held by a when Run returned", lease)
			}
		}
		if n := rec.Active("a"); n != 0 {
			t.Errorf("%d handlers still running on a when Run returned", n)
		}
		for _, run := range rec.Runs() {
			if run.Node == "a" && run.End.After(a.Ended) {
				t.Errorf("run of %s on a ended after Run returned", run.Lease)
			}
		}
		// c takes every job over at once, not after a TTL: a released its
		// leases.
		time.Sleep(jobstest.TTL / 3)
		for _, lease := range jobstest.Leases {
			if holderNode(b, lease) != "c" {
				t.Errorf("%s held by %q %v after a's Run returned, want c", lease, holderNode(b, lease), jobstest.TTL/3)
			}
		}
		for _, g := range b.History() {
			if g.Node == "a" && g.Reason != "released" {
				t.Errorf("a's holding of %s ended %q, want released", g.Name, g.Reason)
			}
		}
		// The client closes after Run: nothing of the jobs is left on it.
		if err := a.Client.Close(); err != nil {
			t.Error(err)
		}
		c.Stop(t)
		c.Client.Close()
		rec.CheckOneAtATime(t)
	})
}

func TestRunDisableSwitch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		disabled bool   // in the configuration
		env      string // SIMBA_SCHEDULING_ENABLED, "-" for unset
		runs     bool
		by       string
	}{
		{"enabled by default", false, "-", true, "configuration scheduling.enabled=true"},
		{"disabled in the configuration", true, "-", false, "configuration scheduling.enabled=false"},
		{"disabled by the environment", false, "false", false, "environment SIMBA_SCHEDULING_ENABLED=false"},
		{"the environment wins over the configuration", true, "true", true, "environment SIMBA_SCHEDULING_ENABLED=true"},
		{"0 is false", false, "0", false, "environment SIMBA_SCHEDULING_ENABLED=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				env := map[string]string{}
				if tc.env != "-" {
					env[jobs.EnabledEnv] = tc.env
				}
				cfg := jobstest.LoadConfig(t)
				cfg.Disabled = tc.disabled
				rec := jobstest.NewRecorder(0)
				var log logBuffer
				r := jobstest.StartRunner(t, "a", b, rec, cfg, jobs.WithLogger(log.logger()), jobs.WithLookupEnv(jobstest.LookupIn(env)))
				time.Sleep(5 * time.Second)
				if got := len(rec.Runs()) > 0; got != tc.runs {
					t.Errorf("jobs ran: %v, want %v", got, tc.runs)
				}
				if !tc.runs && (len(b.History()) != 0 || b.Stats().Join != 0) {
					t.Errorf("disabled, yet %d leases were granted and %d groups joined", len(b.History()), b.Stats().Join)
				}
				if !tc.runs && !strings.Contains(log.String(), "scheduling disabled") || !tc.runs && !strings.Contains(log.String(), tc.by) {
					t.Errorf("log does not say scheduling is disabled by %s:\n%s", tc.by, log.String())
				}
				select {
				case err := <-r.Done:
					t.Fatalf("Run returned before its ctx ended: %v", err)
				default:
				}
				r.Stop(t)
				r.Client.Close()
			})
		})
	}
}

func TestRunRefusesABadSwitch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client, _ := simba.New(b)
		defer client.Close()
		reg := jobstest.NewRecorder(0).Registry("a")
		err := jobs.Run(context.Background(), client, reg, jobstest.LoadConfig(t),
			jobs.WithLookupEnv(jobstest.LookupIn(map[string]string{jobs.EnabledEnv: "no thanks"})))
		checkProblems(t, err, problem{"", "", "", jobs.EnabledEnv, jobs.ErrInvalidValue, `"no thanks" is not true or false`})
	})
}

func TestRunChecksEverythingBeforeStarting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client, _ := simba.New(b)
		defer client.Close()
		reg := jobstest.NewRecorder(0).Registry("a")
		cfg := jobstest.LoadConfig(t)
		cfg.Scheduled = append(cfg.Scheduled, jobs.ScheduledJob{Name: "audit", FixedDelay: time.Second})
		// ctx never ends: Run must return by itself.
		err := jobs.Run(context.Background(), client, reg, cfg)
		checkProblems(t, err,
			problem{"", sched, "audit", "name", jobs.ErrNoHandler, ""},
		)
		if s := b.Stats(); s.Acquire != 0 || s.Join != 0 {
			t.Errorf("a refused configuration started jobs: %+v", s)
		}
	})
}

func TestRunStopsTheStartedJobsWhenOneFailsToStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client := jobstest.NewClient(t, b, simba.WithTTL(jobstest.TTL))
		// Other code already runs the election "audit" on this client.
		other, err := client.Election("audit").RunWhileLeader(func(ctx context.Context, _ *simba.Term) error {
			<-ctx.Done()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		rec := jobstest.NewRecorder(0)
		reg := rec.Registry("a")
		reg.Scheduled("audit", noop)
		cfg := jobstest.LoadConfig(t)
		cfg.Scheduled = append(cfg.Scheduled, jobs.ScheduledJob{Name: "audit", FixedDelay: time.Second})

		err = jobs.Run(context.Background(), client, reg, cfg)
		if !errors.Is(err, simba.ErrAlreadyStarted) || !strings.Contains(err.Error(), `start scheduled job "audit"`) {
			t.Fatalf("Run: %v; want ErrAlreadyStarted naming the job", err)
		}
		// report was started first, and has handed off: it may be started
		// again, and its lease is free. billing never started.
		if s, _, ok := b.Holder("report"); ok {
			t.Errorf("report still held by %s", s)
		}
		again, err := client.Election("report").RunWhileLeader(noopTerm)
		if err != nil {
			t.Errorf("report cannot be started again: %v", err)
		} else {
			again.Close()
		}
		if n := b.Stats().Join; n != 0 {
			t.Errorf("billing joined its group %d times after the failure", n)
		}
		other.Close()
	})
}

func TestRunEndsWhenTheClientCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := jobstest.NewRecorder(10 * time.Millisecond)
		r := jobstest.StartRunner(t, "a", b, rec, jobstest.LoadConfig(t))
		time.Sleep(time.Second)
		r.Client.Close()
		err := <-r.Done
		if !errors.Is(err, simba.ErrClosed) {
			t.Errorf("Run after the client closed: %v, want ErrClosed", err)
		}
		r.Cancel()
	})
}

func TestRunRefusesBadArguments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client, _ := simba.New(b)
		defer client.Close()
		ctx := context.Background()
		for name, err := range map[string]error{
			"nil client":  jobs.Run(ctx, nil, jobs.NewRegistry(), jobs.Config{}),
			"nil option":  jobs.Run(ctx, client, jobs.NewRegistry(), jobs.Config{}, nil),
			"nil logger":  jobs.Run(ctx, client, jobs.NewRegistry(), jobs.Config{}, jobs.WithLogger(nil)),
			"nil lookup":  jobs.Run(ctx, client, jobs.NewRegistry(), jobs.Config{}, jobs.WithLookupEnv(nil)),
			"load option": func() error { _, err := jobs.Load(strings.NewReader(""), jobs.YAML, nil); return err }(),
			"bad format":  func() error { _, err := jobs.Load(strings.NewReader(""), jobs.Format(9)); return err }(),
		} {
			if !errors.Is(err, jobs.ErrInvalidValue) {
				t.Errorf("%s: %v, want ErrInvalidValue", name, err)
			}
		}
	})
}

// Task and group options reach the jobs: here an executor that counts the
// runs it starts, and the Balanced assignment.
func TestRunPassesTaskAndGroupOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		var executed chan struct{} = make(chan struct{}, 100)
		exec := func(f func()) {
			select {
			case executed <- struct{}{}:
			default:
			}
			go f()
		}
		rec := jobstest.NewRecorder(0)
		r := jobstest.StartRunner(t, "a", b, rec, jobstest.LoadConfig(t),
			jobs.WithTaskOptions(simba.WithExecutor(exec)),
			jobs.WithGroupOptions(simba.WithAssignment(simba.AssignBalanced)))
		time.Sleep(time.Second)
		if len(executed) != len(jobstest.Leases) {
			t.Errorf("executor ran %d terms, want %d (one per lease)", len(executed), len(jobstest.Leases))
		}
		r.Stop(t)
		r.Client.Close()
	})
}

func TestRunsACronJobAndWarnsOfAnUnusedHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := jobstest.NewRecorder(10 * time.Millisecond)
		cfg, err := jobs.Load(strings.NewReader(`
scheduled:
  - name: report
    cron: "CRON_TZ=Asia/Shanghai */2 * * * * *"   # every 2 seconds, with seconds and a time zone
    initial-delay: 1s
    misfire: run-once
partitioned:
  - group: billing
    partitions: 2
    fixed-rate: 1s
    sharding-item-parameters: 0=Beijing,1=Shanghai
`), jobs.YAML, jobstest.NoEnv)
		if err != nil {
			t.Fatal(err)
		}
		var log logBuffer
		r := jobstest.StartRunner(t, "a", b.Node("a"), rec, cfg, jobs.WithLogger(log.logger()))
		time.Sleep(10 * time.Second)
		ran := map[string]int{}
		for _, run := range rec.Runs() {
			ran[run.Lease]++
		}
		// Every 2 s over about 9 s after the initial delay: 4 or 5 runs.
		if ran["report"] < 4 || ran["report"] > 5 {
			t.Errorf("the cron job ran %d times in 10s, want 4 or 5 (every 2 s)", ran["report"])
		}
		if ran["billing.0"] < 9 || ran["billing.1"] < 9 {
			t.Errorf("the partitions ran %v, want about 10 times each", ran)
		}
		r.Stop(t)
		r.Client.Close()
		if !strings.Contains(log.String(), `schedule="cron \"CRON_TZ=Asia/Shanghai */2 * * * * *\", initial delay 1s, misfire run-once"`) {
			t.Errorf("the cron job's schedule is not in the log:\n%s", log.String())
		}
	})
}

func TestRunLogsTheWarningsAndStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client := jobstest.NewClient(t, b, simba.WithTTL(jobstest.TTL))
		reg := jobstest.NewRecorder(0).Registry("a")
		reg.Scheduled("spare", noop)
		var log logBuffer
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- jobs.Run(ctx, client, reg, jobstest.LoadConfig(t), jobstest.NoEnv, jobs.WithLogger(log.logger()))
		}()
		time.Sleep(time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run refused to start over an unused handler: %v", err)
		}
		out := log.String()
		if !strings.Contains(out, "level=WARN") || !strings.Contains(out, `handler \"spare\": handler not used by any job`) {
			t.Errorf("the unused handler is not logged at Warn:\n%s", out)
		}
		if !strings.Contains(out, "jobs started") {
			t.Errorf("the jobs did not start:\n%s", out)
		}
	})
}
