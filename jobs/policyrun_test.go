package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/jobstest"
	"github.com/simba-go/simba/jobs"
)

// The policies of a jobs file, end to end: loaded from YAML, started with
// Start on the memory backend, and seen where an operator sees them (the
// history, the operations, a webhook). policy_test.go checks the mapping
// of keys to Configs; package simba checks each policy on its own.

// attempt is one call of a handler: when, in which term, and its RunInfo.
type attempt struct {
	at    time.Time
	token uint64
	term  time.Time // the term's start
	info  simba.RunInfo
	cause error // context.Cause of its ctx when it returned
}

// attempts records the calls of a handler that fails as fail says.
type attempts struct {
	mu   sync.Mutex
	list []attempt
	// fail returns the error of call n (from 1), and may block on ctx.
	fail func(ctx context.Context, n int) error
}

func (a *attempts) run(ctx context.Context, term *simba.Term) error {
	info, _ := simba.RunInfoFrom(ctx)
	a.mu.Lock()
	a.list = append(a.list, attempt{at: time.Now(), token: term.Token(), term: term.Start(), info: info})
	n := len(a.list)
	a.mu.Unlock()
	err := a.fail(ctx, n)
	a.mu.Lock()
	a.list[n-1].cause = context.Cause(ctx)
	a.mu.Unlock()
	return err
}

func (a *attempts) all() []attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.list)
}

// startFile loads yaml and starts its jobs on a fresh client of node a of
// b, with report's handler a.run and opts.
func startFile(t *testing.T, b *memory.Backend, yaml string, a *attempts, opts ...jobs.Option) *jobs.Jobs {
	t.Helper()
	cfg, err := jobs.Load(strings.NewReader(yaml), jobs.YAML, jobstest.NoEnv)
	if err != nil {
		t.Fatal(err)
	}
	client := jobstest.NewClient(t, b.Node("a"), simba.WithTTL(jobstest.TTL), simba.WithMemberID("a"))
	reg := jobs.NewRegistry()
	reg.ScheduledTerm("report", a.run)
	j, err := jobs.Start(client, reg, cfg, append([]jobs.Option{jobstest.NoEnv}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// openAdmin opens an admin on node "admin" of b, closed at the end.
func openAdmin(t *testing.T, b *memory.Backend) *admin.Admin {
	t.Helper()
	ad, err := admin.Open(t.Context(), b.Node("admin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ad.Close() })
	return ad
}

// retry: {attempts: 3, backoff: 1s} retries a failed run twice in its
// term, 1s then 2s after each failure (no jitter, the multiplier 2), and
// the history has one entry per attempt, numbered.
func TestFileRetryRecordsEachAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		a := &attempts{fail: func(_ context.Context, n int) error {
			if n <= 2 {
				return fmt.Errorf("flaky %d", n)
			}
			return nil
		}}
		j := startFile(t, b, `
scheduled:
  - name: report
    fixedRate: 1h
    retry: {attempts: 3, backoff: 1s}
`, a)
		time.Sleep(time.Minute)
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		got := a.all()
		if len(got) != 3 {
			t.Fatalf("%d attempts in the first minute, want 3: %+v", len(got), got)
		}
		origin, token := got[0].term, got[0].token
		want := []time.Duration{0, time.Second, 3 * time.Second}
		for i, at := range got {
			if at.token != token || at.info.Attempt != i+1 || !at.info.Planned.Equal(origin) || at.at.Sub(origin) != want[i] {
				t.Errorf("attempt %d: term %d, RunInfo %+v, at +%v; want term %d, attempt %d of the start at +0, at +%v",
					i+1, at.token, at.info, at.at.Sub(origin), token, i+1, want[i])
			}
		}

		hist, err := openAdmin(t, b).History(t.Context(), "report")
		if err != nil {
			t.Fatal(err)
		}
		wantResult := []string{"failed", "failed", "succeeded"}
		if len(hist) != 3 {
			t.Fatalf("history of %d entries, want 3: %+v", len(hist), hist)
		}
		for i, r := range hist {
			if r.Attempt != i+1 || r.Token != token || r.Member != "a" || r.Result != wantResult[i] ||
				!r.Start.Equal(origin.Add(want[i])) || !r.End.Equal(r.Start) || r.Source != "normal" {
				t.Errorf("history entry %d: %+v; want attempt %d of term %d by a, %s, at +%v", i+1, r, i+1, token, wantResult[i], want[i])
			}
		}
		if hist[0].Error != "flaky 1" || hist[1].Error != "flaky 2" || hist[2].Error != "" {
			t.Errorf("the entries' errors %q, %q, %q; want flaky 1, flaky 2, none", hist[0].Error, hist[1].Error, hist[2].Error)
		}
	})
}

// timeout: 2s ends the run's ctx at 2s with cause simba.ErrRunTimeout,
// and the run fails with it.
func TestFileTimeoutEndsTheRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		a := &attempts{fail: func(ctx context.Context, _ int) error {
			<-ctx.Done()
			return ctx.Err()
		}}
		var mu sync.Mutex
		var failures []simba.RunFailure
		j := startFile(t, b, `
scheduled:
  - name: report
    fixedRate: 1h
    timeout: 2s
`, a, jobs.WithTaskOptions(simba.WithFailureHandler(func(_ context.Context, f simba.RunFailure) {
			mu.Lock()
			defer mu.Unlock()
			failures = append(failures, f)
		})))
		time.Sleep(time.Minute)
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		got := a.all()
		if len(got) != 1 {
			t.Fatalf("%d runs in the first minute, want 1", len(got))
		}
		origin := got[0].term
		if !errors.Is(got[0].cause, simba.ErrRunTimeout) {
			t.Errorf("the run's ctx ended with cause %v, want ErrRunTimeout", got[0].cause)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(failures) != 1 {
			t.Fatalf("%d failed runs reported, want 1", len(failures))
		}
		f := failures[0]
		if !errors.Is(f.Err, simba.ErrRunTimeout) || !f.Start.Equal(origin) || f.Duration != 2*time.Second || f.Attempts != 1 {
			t.Errorf("failure %+v; want ErrRunTimeout after 2s, the term's start, 1 attempt", f)
		}
		hist, err := openAdmin(t, b).History(t.Context(), "report")
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) != 1 || hist[0].Result != "failed" || hist[0].End.Sub(hist[0].Start) != 2*time.Second || !strings.Contains(hist[0].Error, "timed out after 2s") {
			t.Errorf("history %+v; want one run failed after 2s, timed out", hist)
		}
	})
}

// pauseAfterFailures: 2 disables the job after its second failed run in
// a row, as an operator's disable marked Paused; nothing runs it then;
// Enable resumes it.
func TestFilePauseAfterFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		a := &attempts{fail: func(context.Context, int) error { return errors.New("down") }}
		startFile(t, b, `
scheduled:
  - name: report
    fixedRate: 10s
    pauseAfterFailures: 2
`, a)
		ad := openAdmin(t, b)
		time.Sleep(time.Minute)
		got := a.all()
		if len(got) != 2 {
			t.Fatalf("%d failed runs in a minute, want 2 and then a pause", len(got))
		}
		origin := got[0].term
		if d := got[1].at.Sub(origin); d != 10*time.Second {
			t.Errorf("the second run at +%v, want +10s", d)
		}
		ops, err := ad.Ops(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		op, ok := ops.Disables["report"]
		if !ok || !op.Paused || op.By != "a" || !op.At.Equal(got[1].at) || op.Reason != "paused after 2 failed runs in a row: down" {
			t.Fatalf("the disable of report: %+v (in force %v); want one by a, Paused, at the second failure, saying why", op, ok)
		}
		if s, _, held := b.Holder("report"); held {
			t.Errorf("report held by %s while paused", s)
		}
		time.Sleep(time.Hour)
		if n := len(a.all()); n != 2 {
			t.Fatalf("%d runs an hour after the pause, want 2", n)
		}

		enabled := time.Now()
		if err := ad.Enable(t.Context(), "report", "fixed"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		got = a.all()
		if len(got) != 3 || got[2].at.Before(enabled) || got[2].token <= got[1].token {
			t.Fatalf("after Enable: %d runs, want a third in a new term", len(got))
		}
		if ops, err := ad.Ops(t.Context()); err != nil || ops.Disabled["report"] {
			t.Errorf("report still disabled after Enable (%v)", err)
		}
	})
}

// notify.webhook posts one notice per failed run, once its retries are
// spent, saying which job, term and error. It runs in real time, as
// notify_test.go's tests do.
func TestFileWebhookOncePerFailedRun(t *testing.T) {
	srv := newHookServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	b := memory.New()
	defer b.Close()
	const failedRuns = 3
	// Runs of 2 attempts each fail; the run after the third, if it starts
	// before the jobs stop, blocks until then and is cancelled: no failure.
	a := &attempts{fail: func(ctx context.Context, n int) error {
		if n > 2*failedRuns {
			<-ctx.Done()
			return ctx.Err()
		}
		return fmt.Errorf("boom %d", n)
	}}
	var log logBuffer
	j := startFile(t, b, fmt.Sprintf(`
scheduled:
  - name: report
    fixedRate: 200ms
    retry: {attempts: 2, backoff: 50ms}
    notify:
      webhook:
        url: %s/hook
`, srv.URL), a, jobs.WithLogger(log.logger()))
	var notices []jobs.FailureNotice
	for range failedRuns {
		r := srv.next(t)
		var n jobs.FailureNotice
		if err := json.Unmarshal(r.body, &n); err != nil {
			t.Fatalf("body %s: %v", r.body, err)
		}
		notices = append(notices, n)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := j.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	srv.none(t)

	got := a.all()
	if len(got) != 2*failedRuns && len(got) != 2*failedRuns+1 {
		t.Fatalf("%d attempts, want %d: the failed runs', and maybe the cancelled one", len(got), 2*failedRuns)
	}
	slices.SortFunc(notices, func(x, y jobs.FailureNotice) int { return x.Failures - y.Failures })
	for i, n := range notices {
		last := got[2*i+1] // the run's second attempt
		want := jobs.FailureNotice{Job: "report", Lease: "report", Token: last.token, Member: "a", Source: "normal",
			Attempts: 2, Error: fmt.Sprintf("boom %d", 2*i+2), Failures: i + 1}
		n.Start, n.Duration, n.DurationMs = time.Time{}, "", 0
		if fmt.Sprint(n) != fmt.Sprint(want) {
			t.Errorf("notice %d: %+v\nwant %+v", i+1, n, want)
		}
		if notices[i].Start.After(got[2*i].at) || notices[i].DurationMs < 50 {
			t.Errorf("notice %d: start %v, %dms; want at most its first attempt's %v, and at least the 50ms backoff", i+1, notices[i].Start, notices[i].DurationMs, got[2*i].at)
		}
	}
	if strings.Contains(log.String(), "level=WARN") {
		t.Errorf("warnings:\n%s", log.String())
	}
}
