package main

import (
	"context"
	"maps"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/records"
)

// Trigger arguments, a retry's attempt, skipped starts and jobs that
// paused themselves, as the command takes and shows them (issue 42).

func TestTriggerWithArgs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		node := b.Node("a")
		a := startNode(t, node, "a", ttl, &recorder{})
		a.schedule(t, "nightly", simba.FixedRate(time.Hour))
		task, err := a.client.Group("billing", 2).Schedule(simba.FixedRate(time.Hour), func(context.Context, *simba.Term, int) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		defer task.Stop()
		time.Sleep(time.Second)
		// The node sees no operation, and carries out none (no virtual time
		// passes before it heals): the requests stay to be read.
		node.Partition()
		defer node.Heal()
		h := newHarness(t, b)

		r := decode[opResult](t, h.ok("trigger", "nightly", "--arg", "day=2025-03-04", "--arg", "note=two words", "--arg", "q=a=b", "--reason", "rerun a day", "--json"))
		want := map[string]string{"day": "2025-03-04", "note": "two words", "q": "a=b"}
		if !maps.Equal(r.Args, want) || r.Reason != "rerun a day" || r.Message != `triggered nightly with day=2025-03-04 note="two words" q=a=b: a runs it as soon as it can` {
			t.Errorf("trigger --json: %+v", r)
		}
		if op := readOp(t, b, records.TriggerPrefix+"nightly"); !maps.Equal(op.Args, want) || op.Reason != "rerun a day" {
			t.Errorf("the trigger recorded %+v, want args %v", op, want)
		}
		// Every partition of a group gets the arguments.
		if out := h.ok("trigger", "billing", "--arg", "n=1"); out != "triggered billing with n=1: 2 partitions, 2 held now\n" {
			t.Errorf("trigger billing: %q", out)
		}
		for _, lease := range []string{"billing.0", "billing.1"} {
			if op := readOp(t, b, records.TriggerPrefix+lease); !maps.Equal(op.Args, map[string]string{"n": "1"}) {
				t.Errorf("the trigger of %s recorded %+v, want n=1", lease, op)
			}
		}
		// The pending request shows them, and so does the audit trail.
		if out := h.ok("status", "nightly"); !regexp.MustCompile(`(?m)^pending +trigger, asked by .*: rerun a day; arguments day=2025-03-04 note="two words" q=a=b$`).MatchString(out) {
			t.Errorf("status nightly:\n%s", out)
		}
		if v := decode[leaseView](t, h.ok("status", "nightly", "--json")); v.TriggerPending == nil || !maps.Equal(v.TriggerPending.Args, want) {
			t.Errorf("status nightly --json: pending %+v", v.TriggerPending)
		}
		if out := h.ok("audit", "nightly", "-o", "wide"); !strings.Contains(out, `trigger requested with arguments day=2025-03-04 note="two words" q=a=b`) {
			t.Errorf("audit nightly:\n%s", out)
		}

		// Bad arguments: a usage error, nothing written.
		before := len(decode[[]auditView](t, h.ok("audit", "--json")))
		for _, tc := range []struct {
			args []string
			err  string
		}{
			{[]string{"--arg", "day"}, `--arg: invalid trigger arguments: "day" is not key=value (no '=')`},
			{[]string{"--arg", "1day=x"}, `--arg: invalid trigger arguments: key "1day": a key is a letter or _, then at most 63 letters, digits, _, . or -`},
			{[]string{"--arg", "=x"}, `--arg: invalid trigger arguments: key "": a key is`},
			{[]string{"--arg", "a=1", "--arg", "a=2"}, `--arg: invalid trigger arguments: key "a" given twice`},
			{[]string{"--arg", "a=" + strings.Repeat("x", 1025)}, "--arg: invalid trigger arguments: the value of a is 1025 bytes, at most 1024"},
		} {
			requireCode(t, h.run(append([]string{"trigger", "nightly"}, tc.args...)...), exitUsage, tc.err)
		}
		if after := len(decode[[]auditView](t, h.ok("audit", "--json"))); after != before {
			t.Errorf("refused triggers wrote %d audit entries", after-before)
		}
	})
}

func TestHistoryShowsAttemptsArgsAndSkippedStarts(t *testing.T) {
	b := memory.New()
	defer b.Close()
	at := func(s string) string { return "2026-03-01T16:00:" + s + "Z" }
	plantRecords(t, b.Node("writer"),
		"status/report", `{"lease":"report","partition":-1,"schedule":"fixed rate 1s","historySeq":4,"succeeded":2,"failed":1,"failStreak":0,"skippedRuns":3,"lastRun":{"seq":4,"result":"skipped","error":"overlap","skipped":3,"source":"normal","member":"a","token":7,"start":"`+at("05")+`","end":"`+at("07")+`"}}`,
		"history/report/01", `{"seq":1,"result":"failed","error":"boom","source":"normal","member":"a","token":7,"attempt":1,"start":"`+at("00")+`","end":"`+at("01")+`"}`,
		"history/report/02", `{"seq":2,"result":"succeeded","source":"normal","member":"a","token":7,"attempt":2,"start":"`+at("02")+`","end":"`+at("03")+`"}`,
		"history/report/03", `{"seq":3,"result":"succeeded","source":"trigger","member":"a","token":7,"attempt":1,"args":{"day":"2025-03-04","note":"two words"},"start":"`+at("03")+`","end":"`+at("04")+`"}`,
		"history/report/04", `{"seq":4,"result":"skipped","error":"overlap","skipped":3,"source":"normal","member":"a","token":7,"start":"`+at("05")+`","end":"`+at("07")+`"}`,
	)
	h := newHarness(t, b)
	out := h.ok("history", "report", "--utc")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i, want := range []string{
		`^SEQ +START +DURATION +RESULT +SOURCE +ARGS +MEMBER +TOKEN +ERROR$`,
		`^1 +2026-03-01 16:00:00.000 UTC +1s +failed +normal +- +a +7 +boom$`,
		`^2 +2026-03-01 16:00:02.000 UTC +1s +succeeded \(attempt 2\) +normal +- +a +7 +-$`,
		`^3 +2026-03-01 16:00:03.000 UTC +1s +succeeded +trigger +day=2025-03-04 note="two words" +a +7 +-$`,
		`^4 +2026-03-01 16:00:05.000 UTC +- +skipped 3 starts \(overlap\) +normal +- +a +7 +-$`,
	} {
		if i >= len(lines) || !regexp.MustCompile(want).MatchString(lines[i]) {
			t.Errorf("history line %d does not match %s:\n%s", i, want, out)
		}
	}
	if out := h.ok("history", "report", "--utc", "-o", "wide"); !regexp.MustCompile(`(?m)^4 +2026-03-01 16:00:05.000 UTC +2026-03-01 16:00:07.000 UTC +- +skipped 3 starts`).MatchString(out) {
		t.Errorf("history -o wide: the skipped entry lacks its last start:\n%s", out)
	}
	runs := runsOnly(decode[[]runView](t, h.ok("history", "report", "--json")))
	if len(runs) != 4 {
		t.Fatalf("history --json: %+v", runs)
	}
	if runs[1].Attempt != 2 || !maps.Equal(runs[2].Args, map[string]string{"day": "2025-03-04", "note": "two words"}) || runs[2].DurationSeconds == nil {
		t.Errorf("history --json: %+v, %+v", runs[1], runs[2])
	}
	if s := runs[3]; s.Result != "skipped" || s.Skipped != 3 || s.Error != "overlap" || s.DurationSeconds != nil {
		t.Errorf("history --json: skipped entry %+v", s)
	}
	// Without arguments in the runs shown, no ARGS column.
	if out := h.ok("history", "report", "--limit", "2"); !strings.Contains(out, "ARGS") {
		t.Errorf("history --limit 2 shows run 3 and its arguments:\n%s", out)
	}
	if out := h.ok("history", "report", "--limit", "1"); strings.Contains(out, "ARGS") {
		t.Errorf("history --limit 1 has an ARGS column without arguments:\n%s", out)
	}
	out = h.ok("status", "report")
	for _, want := range []string{"last run    #4 skipped 3 starts (overlap), started ", "runs        2 succeeded, 1 failed, 3 planned starts skipped\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("status report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\nerror ") {
		t.Errorf("status report shows the skip's reason as an error:\n%s", out)
	}
	if v := decode[leaseView](t, h.ok("status", "report", "--json")); v.SkippedRuns != 3 {
		t.Errorf("status report --json: %+v", v)
	}
	if jobs := decode[[]jobView](t, h.ok("jobs", "--json")); len(jobs) != 1 || jobs[0].SkippedRuns != 3 {
		t.Errorf("jobs --json: %+v", jobs)
	}
}

func TestPausedJobsShowAndResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		startCluster(t, b)
		// What a partition and a job that paused themselves write.
		plantRecords(t, b.Node("writer"),
			"ops/disabled/billing.3", `{"by":"a","at":"2026-03-01T16:00:00Z","reason":"3 failed runs in a row","paused":true}`,
			"ops/disabled/report", `{"by":"a","at":"2026-03-01T16:00:00Z","reason":"5 failed runs in a row","paused":true}`,
		)
		h := newHarness(t, b)
		out := h.ok("status", "billing.3", "--utc")
		for _, want := range []string{`(?m)^state +paused$`, `(?m)^paused +paused after failures, by a, since 2026-03-01 16:00:00.000 UTC, .*: 3 failed runs in a row$`} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("status billing.3 does not match %s:\n%s", want, out)
			}
		}
		v := decode[leaseView](t, h.ok("status", "billing.3", "--json"))
		if v.State != "disabled" || v.Disable == nil || !v.Disable.Paused || v.Disable.Reason != "3 failed runs in a row" {
			t.Errorf("status billing.3 --json: %+v (disable %+v)", v, v.Disable)
		}
		out = h.ok("groups", "billing")
		if !regexp.MustCompile(`(?m)^  3 +a +\S+ +\S+ +(held|vacant) \(paused\)$`).MatchString(out) || !strings.Contains(out, "  disabled: billing.3 (paused after failures, by a, since ") {
			t.Errorf("groups billing:\n%s", out)
		}
		if out := h.ok("jobs"); !regexp.MustCompile(`(?m)^report +election +fixed rate 1s +paused `).MatchString(out) {
			t.Errorf("jobs:\n%s", out)
		}
		if out := h.ok("status"); !strings.Contains(out, "report (paused after failures, by a, since ") {
			t.Errorf("status:\n%s", out)
		}
		if out := h.ok("disable", "report"); out != "report is already disabled: it paused itself after failures\n" {
			t.Errorf("disable of a paused job: %q", out)
		}

		if out := h.ok("enable", "billing.3", "--reason", "fixed the bug"); out != "resumed billing.3, which had paused itself after failures: nodes contend for it again\n" {
			t.Errorf("enable billing.3: %q", out)
		}
		entries := decode[[]auditView](t, h.ok("audit", "billing.3", "--json"))
		if len(entries) != 1 || entries[0].Op != "enable" || entries[0].Reason != "fixed the bug" || !strings.HasPrefix(entries[0].Change, "enabled: resumed; was paused after failures, by a since 2026-03-01 16:00:00 UTC: 3 failed runs in a row") {
			t.Errorf("audit billing.3: %+v", entries)
		}
		if o := decode[overview](t, h.ok("status", "--json")); len(o.Ops.Disables) != 1 || o.Ops.Disables[0].Name != "report" || !o.Ops.Disables[0].Paused {
			t.Errorf("after enable billing.3: disables %+v", o.Ops.Disables)
		}
		time.Sleep(time.Second)
		if v := decode[leaseView](t, h.ok("status", "billing.3", "--json")); v.State != "held" {
			t.Errorf("billing.3 after enable: %+v", v)
		}

		// A partition enabled while its group is disabled stays disabled.
		h.ok("disable", "billing.2", "--wait=false")
		h.ok("disable", "billing", "--wait=false")
		if out := h.ok("enable", "billing.2"); out != "enabled billing.2; its group billing is disabled still: nothing runs it until 'simba enable billing'\n" {
			t.Errorf("enable billing.2 with its group disabled: %q", out)
		}
	})
}
