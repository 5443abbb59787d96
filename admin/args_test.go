package admin

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/simba-go/simba/internal/records"
)

func TestParseArgs(t *testing.T) {
	many := make([]string, MaxArgs+1)
	for i := range many {
		many[i] = fmt.Sprintf("k%d=v", i)
	}
	big := make([]string, 9) // 9 values of 1000 bytes: more than 8 KiB in all
	for i := range big {
		big[i] = fmt.Sprintf("k%d=%s", i, strings.Repeat("x", 1000))
	}
	for _, tc := range []struct {
		name  string
		pairs []string
		want  map[string]string
		err   string // a part of the error; "" for none
	}{
		{"none", nil, nil, ""},
		{"pairs", []string{"day=2025-03-04", "dry_run=", "q=a=b", "x.y-z=two words"},
			map[string]string{"day": "2025-03-04", "dry_run": "", "q": "a=b", "x.y-z": "two words"}, ""},
		{"no =", []string{"day"}, nil, `"day" is not key=value (no '=')`},
		{"empty key", []string{"=1"}, nil, `key "": a key is a letter or _`},
		{"key starting with a digit", []string{"1x=1"}, nil, `key "1x": a key is a letter or _, then at most 63 letters, digits, _, . or -`},
		{"key with a space", []string{"a b=1"}, nil, `key "a b"`},
		{"key too long", []string{strings.Repeat("k", 65) + "=1"}, nil, `key "` + strings.Repeat("k", 64) + `"…`},
		{"twice", []string{"a=1", "b=2", "a=3"}, nil, `key "a" given twice`},
		{"too many", many, nil, "33 arguments, at most 32"},
		{"value too long", []string{"a=" + strings.Repeat("x", MaxArgValue+1)}, nil, "the value of a is 1025 bytes, at most 1024"},
		{"not UTF-8", []string{"a=\xff"}, nil, "the value of a is not valid UTF-8"},
		{"too much in all", big, nil, "9018 bytes of keys and values in all, at most 8192"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseArgs(tc.pairs)
			if tc.err == "" {
				if err != nil || !maps.Equal(got, tc.want) || (tc.want == nil) != (got == nil) {
					t.Errorf("ParseArgs(%q) = %v, %v; want %v", tc.pairs, got, err, tc.want)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidArgs) || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "simba/admin: invalid trigger arguments: ") {
				t.Errorf("ParseArgs: error %v, want one wrapping ErrInvalidArgs with %q", err, tc.err)
			}
			if got != nil {
				t.Errorf("ParseArgs returned %v with its error", got)
			}
		})
	}
}

// TestCheckArgsBounds: each bound is allowed, and one more is not.
func TestCheckArgsBounds(t *testing.T) {
	n := func(count, size int) map[string]string {
		m := map[string]string{}
		for i := range count {
			m[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", size)
		}
		return m
	}
	for _, tc := range []struct {
		name string
		args map[string]string
		ok   bool
	}{
		{"nil", nil, true},
		{"32 arguments", n(32, 1), true},
		{"33 arguments", n(33, 1), false},
		{"a value of 1 KiB", map[string]string{"a": strings.Repeat("v", 1024)}, true},
		{"a value of 1 KiB and 1 byte", map[string]string{"a": strings.Repeat("v", 1025)}, false},
		{"a key of 64 bytes", map[string]string{"_" + strings.Repeat("k", 63): "v"}, true},
		{"a key of 65 bytes", map[string]string{"_" + strings.Repeat("k", 64): "v"}, false},
		// 8 keys of 3 bytes and values of 1021 bytes: 8192 bytes in all.
		{"8 KiB in all", n(8, 1021), true},
		{"8 KiB and 1 byte in all", func() map[string]string { m := n(8, 1021); m["k00"] += "v"; return m }(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckArgs(tc.args)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidArgs)) {
				t.Errorf("CheckArgs: %v, want ok %v", err, tc.ok)
			}
		})
	}
}

func TestFormatArgs(t *testing.T) {
	args := map[string]string{"z": "last", "day": "2025-03-04", "note": `two "words"`, "empty": "", "nl": "a\nb", "eq": "a=b"}
	want := `day=2025-03-04 empty="" eq=a=b nl="a\nb" note="two \"words\"" z=last`
	if got := FormatArgs(args); got != want {
		t.Errorf("FormatArgs = %s, want %s", got, want)
	}
	if got := FormatArgs(nil); got != "" {
		t.Errorf("FormatArgs(nil) = %q", got)
	}
}

// TestTriggerWithArgs: the arguments are written in the trigger's record,
// read back with it, and named in its audit entry; bad arguments are
// refused with nothing written.
func TestTriggerWithArgs(t *testing.T) {
	f := newFixture(t)
	a := f.openView(WithOperator("alice"))
	ctx := t.Context()
	args := map[string]string{"day": "2025-03-04", "mode": "full run"}
	if err := a.TriggerWith(ctx, "report", "rerun a day", args); err != nil {
		t.Fatal(err)
	}
	args["day"] = "changed after the call"
	var rec records.Op
	r, err := f.rec.GetRecord(ctx, records.TriggerPrefix+"report")
	if err != nil {
		t.Fatal(err)
	}
	if err := records.Decode(r.Value, &rec); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"day": "2025-03-04", "mode": "full run"}
	if !maps.Equal(rec.Args, want) || rec.Reason != "rerun a day" || rec.By != "alice" {
		t.Errorf("trigger record %+v, want args %v", rec, want)
	}
	ops, err := a.Ops(ctx)
	if err != nil {
		t.Fatal(err)
	}
	op := ops.Triggers["report"]
	if !maps.Equal(op.Args, want) {
		t.Errorf("Ops.Triggers[report] = %+v, want args %v", op, want)
	}
	if d := DescribeOp(op); !strings.HasSuffix(d, `: rerun a day with arguments day=2025-03-04 mode="full run"`) {
		t.Errorf("DescribeOp = %q", d)
	}

	// The same arguments again change nothing; others replace them.
	if err := a.TriggerWith(ctx, "report", "again", want); err != nil {
		t.Fatal(err)
	}
	if err := a.TriggerWith(ctx, "billing.1", "partition", map[string]string{"n": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Trigger(ctx, "report", "no args"); err != nil {
		t.Fatal(err)
	}
	entries, _, err := a.Audit(ctx, AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 {
		t.Fatalf("audit %+v, want 4 entries", entries)
	}
	for i, w := range []struct {
		target  string
		changed bool
		change  string
	}{
		{"report", true, `trigger requested; one requested by alice since `},
		{"billing.1", true, "trigger requested with arguments n=1"},
		{"report", false, `trigger requested with arguments day=2025-03-04 mode="full run"; one requested by alice since `},
		{"report", true, `trigger requested with arguments day=2025-03-04 mode="full run"`},
	} {
		e := entries[i]
		if e.Op != "trigger" || e.Target != w.target || e.Changed != w.changed || !strings.HasPrefix(e.Change, w.change) {
			t.Errorf("entry %d = %+v, want a trigger of %s, changed %v, change %q…", i, e, w.target, w.changed, w.change)
		}
	}
	if r, err := f.rec.GetRecord(ctx, records.TriggerPrefix+"report"); err != nil || strings.Contains(string(r.Value), `"args"`) {
		t.Errorf("after Trigger without arguments the record is %s (%v), want no arguments", r.Value, err)
	}

	// Bad arguments: refused, nothing written, no audit entry.
	before := f.state()
	for _, bad := range []map[string]string{{"1x": "v"}, {"a": strings.Repeat("v", MaxArgValue+1)}} {
		err := a.TriggerWith(ctx, "report", "bad", bad)
		if !errors.Is(err, ErrInvalidArgs) {
			t.Errorf("TriggerWith(%.20v): %v, want ErrInvalidArgs", bad, err)
		}
	}
	if after := f.state(); after != before {
		t.Errorf("a refused trigger changed the backend:\nbefore %s\nafter  %s", before, after)
	}
}

// TestDisableAndEnableAPartition: a partition's lease is disabled and
// enabled by its own name, alone; a disable a job wrote when it paused
// itself shows as paused, and Enable resumes it.
func TestDisableAndEnableAPartition(t *testing.T) {
	f := newFixture(t)
	a := f.openView(WithOperator("alice"))
	ctx := t.Context()
	if err := a.Disable(ctx, "billing.1", "one partition"); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Elections {
		switch e.Name {
		case "billing.1":
			if !e.Disabled || e.Disable == nil || e.Disable.Reason != "one partition" || e.Disable.Paused {
				t.Errorf("billing.1: %+v, want disabled by alice", e)
			}
		case "billing.0":
			if e.Disabled {
				t.Errorf("billing.0 disabled with billing.1: %+v", e)
			}
		}
	}
	if g := snap.Groups[0]; g.Name != "billing" || g.Disabled {
		t.Errorf("group %+v, want billing not disabled", g)
	}
	if err := a.Enable(ctx, "billing.1", "back"); err != nil {
		t.Fatal(err)
	}
	if ops, err := a.Ops(ctx); err != nil || ops.Disabled["billing.1"] {
		t.Errorf("after Enable(billing.1): %+v, %v", ops.Disabled, err)
	}

	// What a partition that paused itself writes.
	f.put("ops/disabled/billing.0", `{"by":"node-1","at":"2025-03-04T16:02:00Z","reason":"5 failed runs in a row","paused":true}`)
	els, err := a.Elections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range els {
		if e.Name != "billing.0" {
			continue
		}
		if !e.Disabled || e.Disable == nil || !e.Disable.Paused {
			t.Fatalf("billing.0: %+v, want paused", e)
		}
		if d, want := DescribeOp(*e.Disable), "paused after failures, by node-1 since 2025-03-04 16:02:00 UTC: 5 failed runs in a row"; d != want {
			t.Errorf("DescribeOp = %q, want %q", d, want)
		}
	}
	if err := a.Enable(ctx, "billing.0", "fixed"); err != nil {
		t.Fatal(err)
	}
	// An operator's disable of what paused itself changes it.
	f.put("ops/disabled/report", `{"by":"node-1","reason":"3 failed runs in a row","paused":true}`)
	if err := a.Disable(ctx, "report", "keep it off"); err != nil {
		t.Fatal(err)
	}
	ops, err := a.Ops(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ops.Disabled["billing.0"] || ops.Disables["report"].Paused || ops.Disables["report"].By != "alice" {
		t.Errorf("ops %+v", ops.Disables)
	}
	entries, _, err := a.Audit(ctx, AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []struct {
		op, target string
		changed    bool
		change     string
	}{
		{"disable", "report", true, "disabled by an operator; was paused after failures, by node-1: 3 failed runs in a row"},
		{"enable", "billing.0", true, "enabled: resumed; was paused after failures, by node-1 since 2025-03-04 16:02:00 UTC: 5 failed runs in a row"},
		{"enable", "billing.1", true, "enabled; was disabled by alice since "},
		{"disable", "billing.1", true, "disabled; was enabled"},
	} {
		if i >= len(entries) {
			t.Fatalf("audit %+v", entries)
		}
		e := entries[i]
		if e.Op != w.op || e.Target != w.target || e.Changed != w.changed || !strings.HasPrefix(e.Change, w.change) {
			t.Errorf("entry %d = %+v, want %s of %s, change %q…", i, e, w.op, w.target, w.change)
		}
	}
}

// TestHistoryOfRetriesTriggersAndSkips: a retry's attempt, a triggered
// run's arguments and an entry of skipped starts read back as written.
func TestHistoryOfRetriesTriggersAndSkips(t *testing.T) {
	f := newFixture(t)
	f.put("history/report/03", `{"seq":3,"result":"failed","error":"boom","source":"normal","attempt":1}`)
	f.put("history/report/04", `{"seq":4,"result":"succeeded","source":"normal","attempt":2}`)
	f.put("history/report/05", `{"seq":5,"result":"succeeded","source":"trigger","attempt":1,"args":{"day":"2025-03-04"}}`)
	f.put("history/report/06", `{"seq":6,"result":"skipped","source":"normal","error":"overlap","skipped":3,"start":"2025-03-04T16:00:00Z","end":"2025-03-04T16:00:02Z"}`)
	f.put("status/report", `{"lease":"report","partition":-1,"historySeq":6,"succeeded":4,"failed":1,"failStreak":0,"skippedRuns":3}`)
	a := f.open()
	runs, err := a.History(t.Context(), "report")
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 6 {
		t.Fatalf("runs %+v, want 6", runs)
	}
	if runs[0].Attempt != 0 || runs[2].Attempt != 1 || runs[3].Attempt != 2 {
		t.Errorf("attempts %d %d %d, want 0 (an old record), 1, 2", runs[0].Attempt, runs[2].Attempt, runs[3].Attempt)
	}
	if !maps.Equal(runs[4].Args, map[string]string{"day": "2025-03-04"}) || runs[3].Args != nil {
		t.Errorf("args %v and %v", runs[4].Args, runs[3].Args)
	}
	if s := runs[5]; s.Result != "skipped" || s.Skipped != 3 || s.Error != "overlap" || s.End.Sub(s.Start).Seconds() != 2 {
		t.Errorf("skipped entry %+v", s)
	}
	st, err := a.Status(t.Context(), "report")
	if err != nil {
		t.Fatal(err)
	}
	if st.SkippedRuns != 3 {
		t.Errorf("status %+v, want 3 skipped runs", st)
	}
}
