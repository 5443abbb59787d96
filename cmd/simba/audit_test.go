package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
)

// The tests of the audit trail in the command: who disabled or drained
// what, why and since when in status, elections, groups and jobs; the
// operations in history; simba audit.

// runsOnly keeps the runs of simba history's JSON list, without the
// operations that follow them.
func runsOnly(entries []runView) []runView {
	return slices.DeleteFunc(entries, func(r runView) bool { return r.Kind != "run" })
}

// historyOps returns the operations of simba history's JSON list.
func historyOpsOf(t *testing.T, out string) []historyOp {
	t.Helper()
	var ops []historyOp
	for _, raw := range decode[[]json.RawMessage](t, out) {
		var e historyOp
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("history entry %s: %v", raw, err)
		}
		if e.Kind == "operation" {
			ops = append(ops, e)
		}
	}
	return ops
}

// requireInForce checks an operation in force as the JSON output shows it.
func requireInForce(t *testing.T, what string, got *opInForce, name, by string, since time.Time, reason string) {
	t.Helper()
	if got == nil || got.Name != name || got.By != by || !got.Since.Equal(since) || got.Reason != reason {
		t.Errorf("%s: %+v, want %s by %s since %v: %s", what, got, name, by, since, reason)
	}
}

func TestStatusShowsWhoDisabledAndDrainedWhatWhyAndSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		a := startNode(t, b.Node("a"), "a", ttl, rec)
		a.schedule(t, "report", simba.FixedRate(time.Second))
		a.whileLeader(t, "ingest")
		a.group(t, "billing", 4)
		startNode(t, b.Node("z"), "z", ttl, rec).group(t, "billing", 4)
		time.Sleep(2500 * time.Millisecond)
		h := newHarness(t, b)
		by := operator()
		q := regexp.QuoteMeta

		disabled := time.Now() // 00:00:02.500 UTC
		h.ok("disable", "report", "--reason", "migrating\nthe database", "--wait=false")
		time.Sleep(time.Minute)
		partition := time.Now() // 00:01:02.500 UTC
		h.ok("disable", "billing.1", "--reason", "bad shard", "--wait=false")
		drained := time.Now()
		h.ok("drain", "z", "--reason", "kernel upgrade", "--wait=false")
		time.Sleep(time.Minute)
		before := b.Stats().Open

		// The overview: one row each, with who, since when (and how
		// long ago) and why.
		out := h.ok("status", "--utc")
		for _, want := range []string{
			"disabled   billing.1 (by " + by + ", since 00:01:02.500 UTC, 1m0s ago: bad shard)\n" +
				"           report (by " + by + ", since 00:00:02.500 UTC, 2m0s ago: migrating the database)\n",
			"drained    z (by " + by + ", since 00:01:02.500 UTC, 1m0s ago: kernel upgrade)\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %q:\n%s", want, out)
			}
		}
		if out := h.ok("status", "-o", "wide", "--utc"); !strings.Contains(out, "report (by "+by+", since 2000-01-01 00:00:02.500 UTC, 2m0s ago: migrating the database)") {
			t.Errorf("status -o wide does not date the disable:\n%s", out)
		}
		o := decode[overview](t, h.ok("status", "--json"))
		if len(o.Ops.Disables) != 2 || len(o.Ops.Drains) != 1 || !slices.Equal(o.Ops.Disabled, []string{"billing.1", "report"}) || !slices.Equal(o.Ops.Drained, []string{"z"}) {
			t.Fatalf("status --json operations: %+v", o.Ops)
		}
		requireInForce(t, "status --json: disables[0]", &o.Ops.Disables[0], "billing.1", by, partition, "bad shard")
		requireInForce(t, "status --json: disables[1]", &o.Ops.Disables[1], "report", by, disabled, "migrating\nthe database")
		requireInForce(t, "status --json: drains[0]", &o.Ops.Drains[0], "z", by, drained, "kernel upgrade")
		var y overview
		if err := json.Unmarshal(mustJSON(t, yamlAsJSON(t, h.ok("status", "-o", "yaml"))), &y); err != nil || len(y.Ops.Disables) != 2 {
			t.Errorf("status -o yaml: %+v, %v", y.Ops, err)
		} else {
			requireInForce(t, "status -o yaml: disables[1]", &y.Ops.Disables[1], "report", by, disabled, "migrating\nthe database")
		}

		// One election, partition or group.
		out = h.ok("status", "report", "--utc")
		if !regexp.MustCompile(`(?m)^state +disabled\ndisabled +by ` + q(by) + `, since 00:00:02\.500 UTC, 2m0s ago: migrating the database$`).MatchString(out) {
			t.Errorf("status report:\n%s", out)
		}
		requireInForce(t, "status report --json", decode[leaseView](t, h.ok("status", "report", "--json")).Disable, "report", by, disabled, "migrating\nthe database")
		requireInForce(t, "status billing.1 --json", decode[leaseView](t, h.ok("status", "billing.1", "--json")).Disable, "billing.1", by, partition, "bad shard")
		if v := decode[leaseView](t, h.ok("status", "billing.2", "--json")); v.Disable != nil {
			t.Errorf("status billing.2: a disable of %+v", v.Disable)
		}
		out = h.ok("status", "billing", "--utc")
		if !regexp.MustCompile(`(?m)^  1 +a +- +- +vacant \(disabled\)$`).MatchString(out) ||
			!strings.Contains(out, "\n  disabled: billing.1 (by "+by+", since 00:01:02.500 UTC, 1m0s ago: bad shard)\n") {
			t.Errorf("status billing:\n%s", out)
		}
		g := decode[groupView](t, h.ok("groups", "billing", "--json"))
		requireInForce(t, "groups billing --json: partition 1", g.Partitions[1].Disable, "billing.1", by, partition, "bad shard")
		if g.Disable != nil || g.Partitions[0].Disable != nil {
			t.Errorf("groups billing --json: disables of the group %+v, of partition 0 %+v", g.Disable, g.Partitions[0].Disable)
		}

		// The lists: a marker, and the detail in -o wide.
		out = h.ok("elections", "--partitions", "-o", "wide", "--utc")
		if !regexp.MustCompile(`(?m)^billing\.1 +disabled .* by `+q(by)+`, since 2000-01-01 00:01:02\.500 UTC, 1m0s ago: bad shard$`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^report +disabled .* by `+q(by)+`, since 2000-01-01 00:00:02\.500 UTC, 2m0s ago: migrating the database$`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^ingest +held .* -$`).MatchString(out) {
			t.Errorf("elections --partitions -o wide:\n%s", out)
		}
		if out := h.ok("elections"); !regexp.MustCompile(`(?m)^report +disabled `).MatchString(out) {
			t.Errorf("elections:\n%s", out)
		}
		out = h.ok("jobs", "-o", "wide", "--utc")
		if !regexp.MustCompile(`(?m)^report +election .* by ` + q(by) + `, since 2000-01-01 00:00:02\.500 UTC, 2m0s ago: migrating the database$`).MatchString(out) {
			t.Errorf("jobs -o wide:\n%s", out)
		}
		jobs := decode[[]jobView](t, h.ok("jobs", "--json"))
		requireInForce(t, "jobs --json", jobs[0].Disable, "report", by, disabled, "migrating\nthe database")

		// A group's disable, as its partitions show it.
		time.Sleep(time.Minute)
		h.ok("disable", "billing", "--reason", "re-sharding", "--wait=false")
		group := time.Now()
		out = h.ok("status", "billing.2", "--utc")
		if !regexp.MustCompile(`(?m)^disabled +with its group billing, by ` + q(by) + `, since 00:03:02\.500 UTC, 0s ago: re-sharding$`).MatchString(out) {
			t.Errorf("status billing.2 with its group disabled:\n%s", out)
		}
		requireInForce(t, "status billing.2 --json", decode[leaseView](t, h.ok("status", "billing.2", "--json")).Disable, "billing", by, group, "re-sharding")
		out = h.ok("groups", "billing", "--utc")
		if !strings.Contains(out, "\n  disabled: billing (by "+by+", since 00:03:02.500 UTC, 0s ago: re-sharding)\n  disabled: billing.1 (by ") {
			t.Errorf("groups billing with the group disabled:\n%s", out)
		}
		requireInForce(t, "groups --json", decode[[]groupView](t, h.ok("groups", "--json"))[0].Disable, "billing", by, group, "re-sharding")

		// None of it opened a session: only the disable did.
		if n := b.Stats().Open - before; n != 1 {
			t.Errorf("%d sessions opened by the reads and one disable, want 1", n)
		}
	})
}

func TestAuditListsTheTrail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		startCluster(t, b) // a: ingest, report every second, billing of 4
		h := newHarness(t, b)
		by := operator()
		q := regexp.QuoteMeta
		if out := h.ok("audit"); out != "TIME  BY  OP  TARGET  CHANGED  REASON  WHAT\n(no operations in the audit trail)\n" {
			t.Errorf("audit of an empty trail:\n%s", out)
		}
		start := time.Now()
		for _, args := range [][]string{
			{"disable", "report", "--reason", "maintenance", "--wait=false"},
			{"drain", "a", "--reason", "kernel upgrade", "--wait=false"},
			{"disable", "billing.2", "--reason", "bad shard", "--wait=false"},
			{"enable", "report", "--reason", "done"},
			{"undrain", "a"},
		} {
			time.Sleep(time.Second)
			h.ok(args...)
		}
		// An operation through admin, as the console performs it, that
		// changes nothing.
		time.Sleep(time.Second)
		console, err := admin.Open(t.Context(), b.Node("console"), admin.WithOperator("alice (console)"))
		if err != nil {
			t.Fatal(err)
		}
		if err := console.Enable(t.Context(), "ingest", "just in case"); err != nil {
			t.Fatal(err)
		}
		console.Close()
		before := b.Stats().Open

		entries := decode[[]auditView](t, h.ok("audit", "--json"))
		type want struct {
			by, op, target, reason string
			changed                bool
			change                 string
		}
		wants := []want{
			{"alice (console)", "enable", "ingest", "just in case", false, "enable of what was not disabled: nothing changed"},
			{by, "undrain", "a", "", true, "undrained; was drained by " + by + " since 2000-01-01 00:00:04 UTC: kernel upgrade"},
			{by, "enable", "report", "done", true, "enabled; was disabled by " + by + " since 2000-01-01 00:00:03 UTC: maintenance"},
			{by, "disable", "billing.2", "bad shard", true, "disabled; was enabled"},
			{by, "drain", "a", "kernel upgrade", true, "drain of a, who held 5 leases"}, // report is disabled,
			{by, "disable", "report", "maintenance", true, "disabled; was enabled"},
		}
		if len(entries) != len(wants) {
			t.Fatalf("audit --json: %d entries, want %d: %+v", len(entries), len(wants), entries)
		}
		for i, w := range wants {
			e := entries[i]
			at := start.Add(time.Duration(len(wants)-i) * time.Second)
			if e.By != w.by || e.Op != w.op || e.Target != w.target || e.Reason != w.reason || e.Changed != w.changed || e.Change != w.change || !e.At.Equal(at) {
				t.Errorf("audit --json: entry %d %+v, want %+v at %v", i, e, w, at)
			}
		}

		// The table: times with their zone, who, op, target, changed,
		// reason and what; -o wide adds the token.
		out := h.ok("audit", "--utc")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 7 || !regexp.MustCompile(`^TIME +BY +OP +TARGET +CHANGED +REASON +WHAT$`).MatchString(lines[0]) ||
			!regexp.MustCompile(`^2000-01-01 00:00:08\.500 UTC +alice \(console\) +enable +ingest +no +just in case +enable of what was not disabled: nothing changed$`).MatchString(lines[1]) ||
			!regexp.MustCompile(`^2000-01-01 00:00:07\.500 UTC +`+q(by)+` +undrain +a +yes +- +undrained; was drained by `+q(by)+` since 2000-01-01 00:00:04 UTC: kernel upgrade$`).MatchString(lines[2]) ||
			!regexp.MustCompile(`^2000-01-01 00:00:03\.500 UTC +`+q(by)+` +disable +report +yes +maintenance +disabled; was enabled$`).MatchString(lines[6]) {
			t.Errorf("audit:\n%s", out)
		}
		if out := h.ok("audit", "-o", "wide", "--utc"); !regexp.MustCompile(`(?m)^TIME +BY +OP +TARGET +TOKEN +CHANGED +REASON +WHAT\n2000-01-01 00:00:08\.500 UTC +alice \(console\) +enable +ingest +- +no +`).MatchString(out) {
			t.Errorf("audit -o wide:\n%s", out)
		}
		var fromYAML []auditView
		if err := json.Unmarshal(mustJSON(t, yamlAsJSON(t, h.ok("audit", "-o", "yaml"))), &fromYAML); err != nil || !slices.Equal(fromYAML, entries) {
			t.Errorf("audit -o yaml: %+v (%v), want %+v", fromYAML, err, entries)
		}

		// NAME, --since and --limit select.
		targets := func(args ...string) []string {
			t.Helper()
			var out []string
			for _, e := range decode[[]auditView](t, h.ok(append([]string{"audit", "--json"}, args...)...)) {
				out = append(out, e.Op+" "+e.Target)
			}
			return out
		}
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"report"}, []string{"enable report", "disable report"}},
			{[]string{"billing"}, []string{"disable billing.2"}}, // a group's partitions
			{[]string{"a"}, []string{"undrain a", "drain a"}},
			{[]string{"nosuch"}, nil},
			{[]string{"--limit", "2"}, []string{"enable ingest", "undrain a"}},
			{[]string{"--since", "1500ms"}, []string{"enable ingest", "undrain a"}},
			{[]string{"--since", "2000-01-01T00:00:06Z"}, []string{"enable ingest", "undrain a", "enable report"}},
			{[]string{"--since", "1d", "--limit", "0"}, []string{"enable ingest", "undrain a", "enable report", "disable billing.2", "drain a", "disable report"}},
			{[]string{"report", "--limit", "1"}, []string{"enable report"}},
		} {
			if got := targets(tc.args...); !slices.Equal(got, tc.want) {
				t.Errorf("audit %s: %q, want %q", strings.Join(tc.args, " "), got, tc.want)
			}
		}
		if out := h.ok("audit", "nosuch", "--since", "1h", "--utc"); !strings.HasSuffix(out, "(no operations on nosuch in the audit trail since 1999-12-31 23:00:08.500 UTC)\n") {
			t.Errorf("audit of nothing:\n%s", out)
		}
		requireCode(t, h.run("audit", "--since", "yesterday"), exitUsage, `invalid value "yesterday" for flag -since: neither a duration (90m, 2h, 7d) nor a time`)
		requireCode(t, h.run("audit", "--since", "-1h"), exitUsage, "must not be negative")
		requireCode(t, h.run("audit", "--limit", "-1"), exitUsage, "--limit must not be negative")
		requireCode(t, h.run("audit", "a", "b"), exitUsage, "too many arguments")

		// history shows the operations on the job after its runs, marked;
		// its JSON list has them after the runs, of kind "operation".
		out = h.ok("history", "report", "--utc")
		if !regexp.MustCompile(`(?m)^SEQ +START .*\n(.*\n)+\noperations on report \(from the audit trail, oldest first\):\nTIME +BY +OP +TARGET +CHANGED +REASON +WHAT\n` +
			`2000-01-01 00:00:03\.500 UTC +` + q(by) + ` +disable +report +yes +maintenance +disabled; was enabled\n` +
			`2000-01-01 00:00:06\.500 UTC +` + q(by) + ` +enable +report +yes +done +enabled; was disabled by `).MatchString(out) {
			t.Errorf("history report:\n%s", out)
		}
		hist := h.ok("history", "report", "--json")
		runs := runsOnly(decode[[]runView](t, hist))
		ops := historyOpsOf(t, hist)
		if len(runs) == 0 || len(ops) != 2 || ops[0].Op != "disable" || ops[0].Reason != "maintenance" || ops[0].By != by || !ops[0].At.Equal(start.Add(time.Second)) || ops[1].Op != "enable" || ops[1].Reason != "done" {
			t.Errorf("history report --json: runs %+v, operations %+v", runs, ops)
		}
		if ops := historyOpsOf(t, h.ok("history", "billing", "--json")); len(ops) != 1 || ops[0].Target != "billing.2" {
			t.Errorf("history billing --json: operations %+v, want the disable of billing.2", ops)
		}
		if ops := historyOpsOf(t, h.ok("history", "billing.2", "--json")); len(ops) != 1 || ops[0].Target != "billing.2" {
			t.Errorf("history billing.2 --json: operations %+v, want its disable", ops)
		}
		// --limit: the runs shown, and the operations since the first of
		// them (report runs every second: in 5s, the last 2 runs begin
		// after the disable and the enable).
		time.Sleep(5 * time.Second)
		if out := h.ok("history", "report", "--limit", "2"); strings.Contains(out, "operations on report") {
			t.Errorf("history report --limit 2 shows operations older than its runs:\n%s", out)
		}
		if ops := historyOpsOf(t, h.ok("history", "report", "--limit", "0", "--json")); len(ops) != 2 {
			t.Errorf("history report --limit 0: %d operations, want 2", len(ops))
		}
		if out := h.ok("history", "ingest"); !strings.Contains(out, "operations on") {
			t.Errorf("history ingest does not show the console's enable:\n%s", out)
		}

		if n := b.Stats().Open - before; n != 0 {
			t.Errorf("the reads opened %d sessions", n)
		}

		// Entries that cannot be used are warned of, and the command exits
		// 4 with the others shown.
		plantRecords(t, b, "audit/nonsense", "{}", "audit/20000101T000000.000000000Z-abc", "not json")
		r := h.run("audit", "--json")
		if r.code != exitProblems || len(decode[[]auditView](t, r.stdout)) != len(wants) {
			t.Errorf("audit with unusable entries: %v", r)
		}
		requireWarnings(t, r, []string{"audit/20000101T000000.000000000Z-abc", "audit/nonsense"})
		if r := h.run("history", "report"); r.code != exitProblems || !strings.Contains(r.stdout, "operations on report") {
			t.Errorf("history with unusable audit entries: %v", r)
		}
	})
}

func TestAuditWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		startCluster(t, b)
		h, other := newHarness(t, b), newHarness(t, b)
		h.ok("disable", "report", "--reason", "first")
		// An operation between the second and third rounds.
		enabled := make(chan result, 1)
		time.AfterFunc(1500*time.Millisecond, func() { enabled <- other.run("enable", "report", "--reason", "second") })
		r := h.watchFor(2500*time.Millisecond, "audit", "--watch", "--interval", "1s", "-o", "json")
		if r := <-enabled; r.code != exitOK {
			t.Errorf("enable during the watch: %v", r)
		}
		if r.code != exitOK || r.stderr != "" {
			t.Errorf("an interrupted watch: %v", r)
		}
		docs := jsonDocuments(t, r.stdout)
		if len(docs) != 3 {
			t.Fatalf("%d documents in 2.5s at 1s intervals, want 3:\n%s", len(docs), r.stdout)
		}
		var first, last []auditView
		json.Unmarshal(docs[0], &first)
		json.Unmarshal(docs[2], &last)
		if len(first) != 1 || len(last) != 2 || last[0].Reason != "second" || last[1].Reason != "first" {
			t.Errorf("the rounds do not show the operation in between: first %+v, last %+v", first, last)
		}
		r = h.watchFor(1500*time.Millisecond, "audit", "report", "--watch", "--interval", "1s", "--utc")
		heading := regexp.MustCompile(`(?m)^every 1s: simba audit report  \(2000-01-01 00:00:\d\d\.\d{3} UTC\)\n\nTIME `)
		if n := len(heading.FindAllString(r.stdout, -1)); n != 2 {
			t.Errorf("%d headed tables in 1.5s, want 2:\n%s", n, r.stdout)
		}
	})
}

func TestAuditInHelpAndCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		startCluster(t, b)
		h := newHarness(t, b)
		h.ok("drain", "gone", "--force")
		if out := h.ok("help"); !strings.Contains(out, "\n  audit [NAME] ") || !strings.Contains(out, "history and audit take --watch") {
			t.Errorf("help does not list audit:\n%s", out)
		}
		out := h.ok("help", "audit")
		for _, want := range []string{"usage: simba audit [flags] [NAME]", "-since D", "-limit n", "-watch", "newest 1000 entries", "30 days"} {
			if !strings.Contains(out, want) {
				t.Errorf("help audit lacks %q:\n%s", want, out)
			}
		}
		complete := func(words ...string) []string {
			t.Helper()
			return strings.Fields(h.ok(append([]string{completeCommand, "--"}, words...)...))
		}
		if got := complete("au"); !slices.Equal(got, []string{"audit"}) {
			t.Errorf("completing au: %q", got)
		}
		if got, want := complete("audit", ""), []string{"a", "billing", "gone", "ingest", "report"}; !slices.Equal(got, want) {
			t.Errorf("completing audit's NAME: %q, want %q", got, want)
		}
		if got := complete("audit", "--s"); !slices.Equal(got, []string{"--since"}) {
			t.Errorf("completing audit --s: %q", got)
		}
	})
}

// testAudit is the end-to-end scenario of the audit trail: an operator
// disables, drains, enables and undrains with reasons; status, history
// and audit show who, why and when, as tables and as JSON.
func testAudit(t *testing.T, c *cluster) {
	rec := &recorder{}
	a := startNode(t, c.backend(t), "a", e2eTTL, rec)
	a.schedule(t, "report", simba.FixedRate(100*time.Millisecond))
	a.whileLeader(t, "ingest") // held still when report is disabled, to drain
	eventually(t, 10*time.Second, "report is held and has run", func() bool {
		v, ok := c.status(t, "report")
		return ok && v.Held && v.Succeeded > 0
	})
	by := operator()
	q := regexp.QuoteMeta
	start := time.Now()
	c.ok(t, "disable", "report", "--reason", "e2e maintenance")
	c.ok(t, "drain", "a", "--reason", "e2e kernel upgrade", "--wait", "--timeout", "10s")
	end := time.Now()

	o := decode[overview](t, c.ok(t, "status", "--json"))
	if len(o.Ops.Disables) != 1 || len(o.Ops.Drains) != 1 {
		t.Fatalf("status --json: operations %+v", o.Ops)
	}
	for _, tc := range []struct {
		op           opInForce
		name, reason string
	}{{o.Ops.Disables[0], "report", "e2e maintenance"}, {o.Ops.Drains[0], "a", "e2e kernel upgrade"}} {
		if tc.op.Name != tc.name || tc.op.By != by || tc.op.Reason != tc.reason || tc.op.Since.Before(start.Add(-time.Second)) || tc.op.Since.After(end.Add(time.Second)) {
			t.Errorf("status --json: %+v, want %s by %s between %v and %v: %s", tc.op, tc.name, by, start, end, tc.reason)
		}
	}
	out := c.ok(t, "status")
	if !regexp.MustCompile(`(?m)^disabled +report \(by `+q(by)+`, since (\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d\.\d{3} \S+, \S+ ago: e2e maintenance\)$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^drained +a \(by `+q(by)+`, since (\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d\.\d{3} \S+, \S+ ago: e2e kernel upgrade\)$`).MatchString(out) {
		t.Errorf("status:\n%s", out)
	}
	t.Logf("simba status:\n%s", out)
	out = c.ok(t, "status", "report")
	if !regexp.MustCompile(`(?m)^disabled +by ` + q(by) + `, since .*: e2e maintenance$`).MatchString(out) {
		t.Errorf("status report:\n%s", out)
	}
	if v := decode[leaseView](t, c.ok(t, "status", "report", "--json")); v.Disable == nil || v.Disable.By != by || v.Disable.Reason != "e2e maintenance" {
		t.Errorf("status report --json: disable %+v", v.Disable)
	}

	c.ok(t, "enable", "report", "--reason", "e2e done")
	c.ok(t, "undrain", "a", "--reason", "e2e upgraded")
	entries := decode[[]auditView](t, c.ok(t, "audit", "--json"))
	var got []string
	for _, e := range entries {
		got = append(got, e.Op+" "+e.Target+": "+e.Reason)
		if e.By != by || !e.Changed || e.At.Before(start.Add(-time.Second)) || e.At.After(time.Now().Add(time.Second)) {
			t.Errorf("audit --json: %+v, by %s since %v", e, by, start)
		}
	}
	if want := []string{"undrain a: e2e upgraded", "enable report: e2e done", "drain a: e2e kernel upgrade", "disable report: e2e maintenance"}; !slices.Equal(got, want) {
		t.Errorf("audit --json: %q, want %q", got, want)
	}
	out = c.ok(t, "audit")
	if !regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+ +` + q(by) + ` +disable +report +yes +e2e maintenance +disabled; was enabled$`).MatchString(out) {
		t.Errorf("audit:\n%s", out)
	}
	t.Logf("simba audit:\n%s", out)
	if got := decode[[]auditView](t, c.ok(t, "audit", "report", "--json")); len(got) != 2 {
		t.Errorf("audit report --json: %+v, want the disable and the enable", got)
	}

	hist := c.ok(t, "history", "report", "--json", "--limit", "0")
	ops := historyOpsOf(t, hist)
	if len(runsOnly(decode[[]runView](t, hist))) == 0 || len(ops) != 2 || ops[0].Op != "disable" || ops[0].Reason != "e2e maintenance" || ops[1].Op != "enable" || ops[1].By != by {
		t.Errorf("history report --json: operations %+v", ops)
	}
	out = c.ok(t, "history", "report", "--limit", "0")
	if !strings.Contains(out, "\noperations on report (from the audit trail, oldest first):\n") || !strings.Contains(out, "e2e done") {
		t.Errorf("history report:\n%s", out)
	}
}

// A user whose etcd role can only read the prefix reads the audit trail,
// and the history and status that show it: the reads open no session.
func TestAuditAsAReadOnlyEtcdUser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real etcd")
	}
	s := startSecuredEtcd(t)
	startNode(t, s.nodeBackend(t), "a", securedTTL, &recorder{}).schedule(t, "report", simba.FixedRate(time.Hour))
	// Generous timeouts: every command authenticates with a bcrypt on the
	// server, slow under the race detector on a loaded machine.
	app := append(s.tlsArgs(), "--user", "app:"+appPassword, "--timeout", "30s")
	viewer := append(s.tlsArgs(), "--user", "viewer:"+viewerPassword, "--timeout", "30s")
	eventually(t, time.Minute, "report is held", func() bool {
		r := runIn(t, nil, append([]string{"status", "report", "--json"}, app...)...)
		return r.code == exitOK && decode[leaseView](t, r.stdout).Held
	})
	if r := runIn(t, nil, append([]string{"disable", "report", "--reason", "read-only audit"}, app...)...); r.code != exitOK {
		t.Fatalf("disable as app: %v", r)
	}
	by := operator()
	r := runIn(t, nil, append([]string{"audit", "--json"}, viewer...)...)
	if r.code != exitOK {
		t.Fatalf("audit as the read-only viewer: %v", r)
	}
	if e := decode[[]auditView](t, r.stdout); len(e) != 1 || e[0].Op != "disable" || e[0].By != by || e[0].Reason != "read-only audit" {
		t.Errorf("audit as the read-only viewer: %+v", e)
	}
	r = runIn(t, nil, append([]string{"history", "report", "--json"}, viewer...)...)
	if ops := historyOpsOf(t, r.stdout); r.code != exitOK || len(ops) != 1 || ops[0].Reason != "read-only audit" {
		t.Errorf("history as the read-only viewer: %v", r)
	}
	r = runIn(t, nil, append([]string{"status", "report", "--json"}, viewer...)...)
	if r.code != exitOK {
		t.Fatalf("status as the read-only viewer: %v", r)
	}
	requireInForceBy(t, decode[leaseView](t, r.stdout).Disable, by, "read-only audit")
}

// requireInForceBy checks who and why of an operation in force.
func requireInForceBy(t *testing.T, op *opInForce, by, reason string) {
	t.Helper()
	if op == nil || op.By != by || op.Reason != reason || op.Since.IsZero() {
		t.Errorf("in force: %+v, want by %s: %s", op, by, reason)
	}
}
