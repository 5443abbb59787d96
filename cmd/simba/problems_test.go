package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// plantRecords writes records as a foreign writer could leave them,
// through a session of its own on b.
func plantRecords(t testing.TB, b backend.Backend, kv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.Open(ctx, backend.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("opening a session to plant records: %v", err)
	}
	defer s.Close(ctx)
	for i := 0; i+1 < len(kv); i += 2 {
		if _, err := s.(backend.Records).PutRecord(ctx, kv[i], []byte(kv[i+1]), backend.Condition{}); err != nil {
			t.Fatalf("planting %s: %v", kv[i], err)
		}
	}
}

// garbage is one bad record of each kind: a status that is not JSON, a
// status naming an invalid group (that used to make simba status exit 3),
// a run that is not JSON, an operation that is not JSON, a key that names
// no operation, a huge key and a huge value.
var garbage = []string{
	"status/nightly", "garbage",
	"status/x.0", `{"lease":"x.0","group":"bad group","partition":0}`,
	"history/report/77", "{",
	"ops/disabled/report", "please",
	"ops/bogus/report", "{}",
	"status/" + strings.Repeat("k", 300), "{}",
	"status/huge", strings.Repeat("v", 60_000),
}

// garbageKeys are the keys of garbage but the run's, as the problems name
// them: the run is read by simba history only.
var garbageKeys = []string{"ops/bogus/report", "ops/disabled/report", "status/huge", "status/" + strings.Repeat("k", 150) + "…", "status/nightly", "status/x.0"}

// requireProblems checks that problems name exactly keys.
func requireProblems(t *testing.T, problems []admin.Problem, keys []string) {
	t.Helper()
	var got []string
	for _, p := range problems {
		got = append(got, p.Key)
	}
	if strings.Join(got, "\n") != strings.Join(keys, "\n") {
		t.Errorf("problems %q, want keys %q", got, keys)
	}
}

// requireWarnings checks that stderr warns of each key, in bounded lines.
func requireWarnings(t *testing.T, r result, keys []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	for _, key := range keys {
		if !strings.Contains(r.stderr, `simba: warning: skipped record "`+key+`": `) {
			t.Errorf("stderr does not warn of %q:\n%s", key, r.stderr)
		}
	}
	for _, l := range lines {
		if len(l) > 600 {
			t.Errorf("a warning of %d bytes: %.200s…", len(l), l)
		}
	}
}

func TestSkippedRecordsAreWarnedOf(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		a := startNode(t, b.Node("a"), "a", ttl, rec)
		a.schedule(t, "report", simba.FixedRate(time.Second))
		a.group(t, "billing", 2)
		time.Sleep(2500 * time.Millisecond)
		plantRecords(t, b.Node("writer"), garbage...)
		h := newHarness(t, b)

		r := h.run("status")
		requireCode(t, r, exitProblems, "")
		requireWarnings(t, r, garbageKeys)
		for _, want := range []string{"elections  1: 1 held, 0 disabled\n", "groups     1: 1 member, 2 partitions (2 held,", "problems   6 records could not be used and were skipped"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("status lacks %q:\n%s", want, r.stdout)
			}
		}
		if strings.Contains(r.stderr, "unreachable") || strings.Contains(r.stderr, "failed while") {
			t.Errorf("status blames the backend:\n%s", r.stderr)
		}

		r = h.run("status", "--json")
		requireCode(t, r, exitProblems, "")
		o := decode[overview](t, r.stdout)
		requireProblems(t, o.Problems, garbageKeys)
		// admin quotes the first 48 bytes of a bad value (admin.Problem).
		if p := o.Problems[2]; p.Key != "status/huge" || !strings.HasSuffix(p.Reason, `(value "`+strings.Repeat("v", 48)+`"…)`) {
			t.Errorf("problem %v: want the value cut short", p)
		}
		if o.Elections.Total != 1 || o.Groups.Total != 1 || len(o.Ops.Disabled) != 0 {
			t.Errorf("overview %+v", o)
		}

		r = h.run("status", "report", "--json")
		requireCode(t, r, exitProblems, "")
		v := decode[leaseWithProblems](t, r.stdout)
		if v.Name != "report" || v.Holder == nil || v.Holder.Member != "a" {
			t.Errorf("status report %+v", v)
		}
		requireProblems(t, v.Problems, garbageKeys)

		r = h.run("elections", "--json")
		requireCode(t, r, exitProblems, "")
		if views := decode[[]leaseView](t, r.stdout); len(views) != 1 || views[0].Name != "report" {
			t.Errorf("elections %+v", views)
		}
		requireWarnings(t, r, garbageKeys)

		r = h.run("groups", "billing", "--json")
		requireCode(t, r, exitProblems, "")
		if g := decode[groupWithProblems](t, r.stdout); g.Name != "billing" || len(g.Partitions) != 2 || len(g.Problems) != len(garbageKeys) {
			t.Errorf("group %+v", g)
		}

		r = h.run("history", "report")
		requireCode(t, r, exitProblems, "")
		if !strings.Contains(r.stdout, "succeeded") {
			t.Errorf("history:\n%s", r.stdout)
		}
		requireWarnings(t, r, append([]string{"history/report/77"}, garbageKeys...))

		r = h.run("jobs")
		requireCode(t, r, exitProblems, "")

		// An operation is done all the same: it warns, and exits 0.
		r = h.run("disable", "report")
		requireCode(t, r, exitOK, `simba: warning: skipped record "status/nightly": the value is not a status record (JSON)`)
		r = h.run("enable", "report")
		requireCode(t, r, exitOK, `simba: warning: skipped record "ops/bogus/report": not an operation simba knows`)

		// A name whose only record was skipped is not found, and the
		// warning says why.
		r = h.run("status", "nightly")
		requireCode(t, r, exitFailed, `no such election, job or group "nightly"`)
		requireWarnings(t, r, []string{"status/nightly"})
	})
}

// TestWarningsAreBounded checks that a great many bad records make a
// bounded number of warnings, while --json lists them all.
func TestWarningsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		var kv []string
		for i := range 50 {
			kv = append(kv, "status/bad-"+itoa(uint64(100+i)), "x")
		}
		plantRecords(t, b.Node("writer"), kv...)
		h := newHarness(t, b)
		r := h.run("status")
		requireCode(t, r, exitProblems, "simba: warning: 30 more records skipped ('simba status --json' lists them all)")
		if n := strings.Count(r.stderr, "\n"); n != maxWarnings+1 {
			t.Errorf("%d lines on stderr, want %d:\n%s", n, maxWarnings+1, r.stderr)
		}
		if o := decode[overview](t, h.run("status", "--json").stdout); len(o.Problems) != 50 {
			t.Errorf("%d problems in the JSON, want 50", len(o.Problems))
		}
	})
}

// TestNoProblemsNoChange checks that without bad records nothing changes:
// exit 0, nothing on stderr, an empty problems list in the overview and
// none in the other objects.
func TestNoProblemsNoChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		startNode(t, b.Node("a"), "a", ttl, rec).schedule(t, "report", simba.FixedRate(time.Second))
		time.Sleep(1500 * time.Millisecond)
		h := newHarness(t, b)
		for _, args := range [][]string{{"status"}, {"status", "--json"}, {"status", "report", "--json"}, {"history", "report"}} {
			r := h.run(args...)
			if r.code != exitOK || r.stderr != "" || strings.Contains(r.stdout, "problems") != (len(args) == 2 && args[1] == "--json") {
				t.Errorf("simba %s: %v", strings.Join(args, " "), r)
			}
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(h.ok("status", "--json")), &raw); err != nil || string(raw["problems"]) != "[]" {
			t.Errorf("overview problems %s (%v), want []", raw["problems"], err)
		}
	})
}
