package main

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
)

// TestExitCodesShown runs a job whose runs end as commands do (a plain
// error, exit 0, exit 3) and checks that history, status, jobs and
// elections show the exit status, in tables and in JSON and YAML.
func TestExitCodesShown(t *testing.T) {
	// A real exit status 3, from os/exec, before the bubble.
	exit3 := exec.Command("sh", "-c", "exit 3").Run()
	if code := (*exec.ExitError)(nil); !errors.As(exit3, &code) || code.ExitCode() != 3 {
		t.Fatalf("sh -c 'exit 3': %v, want an *exec.ExitError with status 3", exit3)
	}
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		a := startNode(t, b.Node("a"), "a", ttl, rec)
		var n atomic.Int32
		ends := []error{errors.New("no"), commandExit(0), exit3}
		task, err := a.client.Election("report").Schedule(simba.FixedRate(time.Second), func(ctx context.Context, term *simba.Term) error {
			i := int(n.Add(1)) - 1
			if i >= len(ends) {
				<-ctx.Done() // no more runs to check: hold until stopped
				return nil
			}
			return ends[i]
		})
		if err != nil {
			t.Fatal(err)
		}
		defer task.Stop()
		time.Sleep(2500 * time.Millisecond) // runs at 0s, 1s and 2s; the fourth at 3s
		h := newHarness(t, b)

		js := h.ok("history", "report", "--json")
		runs := runsOnly(decode[[]runView](t, js))
		if len(runs) != 3 {
			t.Fatalf("history: %d runs, want 3\n%s", len(runs), js)
		}
		if r := runs[0]; r.Result != "failed" || r.ExitCode != nil {
			t.Errorf("run 1 (a plain error): %+v, want failed without an exit code", r)
		}
		if r := runs[1]; r.Result != "succeeded" || r.ExitCode == nil || *r.ExitCode != 0 || r.Error != "" {
			t.Errorf("run 2 (exit status 0): %+v, want succeeded, exit code 0, no error", r)
		}
		if r := runs[2]; r.Result != "failed" || r.ExitCode == nil || *r.ExitCode != 3 || r.Error != "exit status 3" {
			t.Errorf("run 3 (exit 3): %+v, want failed, exit code 3", r)
		}
		if strings.Count(js, `"exitCode": 0`) != 1 || strings.Count(js, `"exitCode": 3`) != 1 || strings.Count(js, `"exitCode"`) != 2 {
			t.Errorf("history --json: want exitCode 0 and 3 as numbers, once each:\n%s", js)
		}
		if y := h.ok("history", "report", "-o", "yaml"); !strings.Contains(y, "exitCode: 3\n") || !strings.Contains(y, "exitCode: 0\n") {
			t.Errorf("history -o yaml lacks the exit codes:\n%s", y)
		}

		out := h.ok("history", "report")
		for _, re := range []string{
			`(?m)^1 +\S+ \S+ \S+ +\S+ +failed +normal +a +\d+ +no$`,
			`(?m)^2 +\S+ \S+ \S+ +\S+ +succeeded \(exit 0\) +normal +a +\d+ +-$`,
			`(?m)^3 +\S+ \S+ \S+ +\S+ +failed \(exit 3\) +normal +a +\d+ +exit status 3$`,
		} {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("history lacks %s:\n%s", re, out)
			}
		}
		if out := h.ok("history", "report", "-o", "wide"); !strings.Contains(out, " failed (exit 3) ") {
			t.Errorf("history -o wide lacks the exit status:\n%s", out)
		}

		v := decode[leaseView](t, h.ok("status", "report", "--json"))
		if v.LastRun == nil || v.LastRun.ExitCode == nil || *v.LastRun.ExitCode != 3 {
			t.Errorf("status --json: last run %+v, want exit code 3", v.LastRun)
		}
		out = h.ok("status", "report")
		if !regexp.MustCompile(`(?m)^last run +#3 failed \(exit 3\), started `).MatchString(out) {
			t.Errorf("status report lacks the last run's exit status:\n%s", out)
		}
		out = h.ok("jobs")
		if !regexp.MustCompile(`(?m)^report +election +fixed rate 1s +\S+ +.* failed \(exit 3\) \S+ ago +1 +2$`).MatchString(out) {
			t.Errorf("jobs lacks the last run's exit status:\n%s", out)
		}
		out = h.ok("elections")
		if !strings.Contains(out, "failed (exit 3) ") {
			t.Errorf("elections lacks the last run's exit status:\n%s", out)
		}
	})
}
