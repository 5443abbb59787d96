package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/records"
)

// The tests of the CLI's conventions: output formats, times and their
// zones, --watch, completion, version, errors, and the operations'
// agreement on names, run in-process against the memory backend in
// virtual time (conventions_etcd_test.go has those that need a real
// server).

// startCluster starts a node holding an election "ingest", running a job
// "report" every second, and a member of group "billing" of 4 partitions,
// and lets it run for 2.5s.
func startCluster(t *testing.T, b *memory.Backend) {
	t.Helper()
	rec := &recorder{}
	a := startNode(t, b.Node("a"), "a", ttl, rec)
	a.schedule(t, "report", simba.FixedRate(time.Second))
	a.whileLeader(t, "ingest")
	a.group(t, "billing", 4)
	time.Sleep(2500 * time.Millisecond)
}

// yamlAsJSON decodes a YAML document into what decoding the same document
// as JSON gives: maps, slices, strings, float64s and bools.
func yamlAsJSON(t *testing.T, doc string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, doc)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("YAML %v has no JSON form: %v", v, err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOutputFormats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		startCluster(t, b)
		h := newHarness(t, b)
		for _, args := range [][]string{
			{"status"}, {"status", "report"}, {"elections", "--partitions"}, {"groups"}, {"groups", "billing"},
			{"jobs"}, {"history", "report"}, {"history", "billing"}, {"version"},
		} {
			name := strings.Join(args, " ")
			jsonOut := h.ok(append(args, "--json")...)
			if o := h.ok(append(args, "-o", "json")...); o != jsonOut {
				t.Errorf("simba %s: -o json differs from --json:\n%s\n%s", name, o, jsonOut)
			}
			if o := h.ok(append(args, "--output", "json", "--json")...); o != jsonOut {
				t.Errorf("simba %s: --output json --json differs from --json", name)
			}
			var fromJSON any
			if err := json.Unmarshal([]byte(jsonOut), &fromJSON); err != nil {
				t.Fatalf("simba %s --json: %v\n%s", name, err, jsonOut)
			}
			yamlOut := h.ok(append(args, "-o", "yaml")...)
			if got := yamlAsJSON(t, yamlOut); !reflect.DeepEqual(got, fromJSON) {
				t.Errorf("simba %s: -o yaml is not the JSON document:\n%s\n%s", name, yamlOut, jsonOut)
			}
			if strings.Contains(yamlOut, "{\"") || strings.Contains(yamlOut, "[{") {
				t.Errorf("simba %s -o yaml is in flow style:\n%s", name, yamlOut)
			}
			table, wide := h.ok(args...), h.ok(append(args, "-o", "wide")...)
			if table == "" || wide == "" {
				t.Errorf("simba %s printed no table", name)
			}
		}
		// YAML keeps the JSON field names and their order.
		y := h.ok("status", "report", "-o", "yaml")
		var keys []string
		for _, l := range strings.Split(y, "\n") {
			if k, _, ok := strings.Cut(l, ":"); ok && !strings.HasPrefix(l, " ") {
				keys = append(keys, k)
			}
		}
		if want := []string{"name", "state", "held", "disabled", "holder", "schedule", "nextPlanned", "lastRun", "succeeded", "failed", "updated"}; !slices.Equal(keys, want) {
			t.Errorf("status report -o yaml: keys %v, want %v:\n%s", keys, want, y)
		}
		if !regexp.MustCompile(`(?m)^  since: "?2000-01-01T00:00:00Z"?$`).MatchString(y) {
			t.Errorf("status report -o yaml: holder's since not RFC 3339:\n%s", y)
		}

		// -o wide adds columns.
		for _, tc := range []struct {
			args        []string
			table, wide *regexp.Regexp
		}{
			{[]string{"elections"},
				regexp.MustCompile(`^ELECTION +STATE +HOLDER +TOKEN +SINCE +SCHEDULE +LAST RUN\n`),
				regexp.MustCompile(`^ELECTION +STATE +HOLDER +TOKEN +SESSION +SINCE +SCHEDULE +NEXT START +LAST RUN +DISABLED\ningest +held +a +\d+ +a-\S+ +2000-01-01 00:00:00\.000 UTC +- +- +running for 2\.5s +-\n`)},
			{[]string{"jobs"},
				regexp.MustCompile(`^JOB +KIND +SCHEDULE +STATE +HOLDERS +NEXT START +LAST RUN +OK +FAILED\n`),
				regexp.MustCompile(`^JOB +KIND +SCHEDULE +STATE +HOLDERS +NEXT START +LAST RUN +LAST START +OK +FAILED +DISABLED\nreport +election +fixed rate 1s +scheduled +a \(token \d+\) +in 500ms \(2000-01-01 00:00:03\.000 UTC\) +succeeded 500ms ago +2000-01-01 00:00:02\.000 UTC +3 +0 +-\n`)},
			{[]string{"history", "report"},
				regexp.MustCompile(`^SEQ +START +DURATION +RESULT +SOURCE +MEMBER +TOKEN +ERROR\n1 +2000-01-01 00:00:00\.000 UTC +0s +succeeded`),
				regexp.MustCompile(`^SEQ +START +END +DURATION +RESULT +SOURCE +MEMBER +TOKEN +ERROR\n1 +2000-01-01 00:00:00\.000 UTC +2000-01-01 00:00:00\.000 UTC +0s +succeeded`)},
			{[]string{"groups", "billing"},
				regexp.MustCompile(`(?m)^  MEMBER +SESSION +OWNS +HOLDS +STATE\n(.|\n)*^  PARTITION +OWNER +HOLDER +TOKEN +STATE\n  0 +a +a +\d+ +held\n`),
				regexp.MustCompile(`(?m)^  MEMBER +SESSION +OWNS +HOLDS +STATE +PARTITIONS +ASSIGNMENT\n  a +a-\S+ +0 1 2 3 +0 1 2 3 +live +4 +rendezvous\n(.|\n)*^  PARTITION +LEASE +OWNER +HOLDER +TOKEN +STATE\n  0 +billing\.0 +a +a +\d+ +held\n`)},
		} {
			name := strings.Join(tc.args, " ")
			if out := h.ok(append(tc.args, "--utc")...); !tc.table.MatchString(out) {
				t.Errorf("simba %s:\n%s", name, out)
			}
			if out := h.ok(append(tc.args, "-o", "wide", "--utc")...); !tc.wide.MatchString(out) {
				t.Errorf("simba %s -o wide:\n%s", name, out)
			}
		}

		// Operations print their result in every format.
		var r opResult
		if err := yaml.Unmarshal([]byte(h.ok("disable", "report", "--reason", "maintenance", "-o", "yaml")), &r); err != nil {
			t.Fatal(err)
		}
		if want := `{"op":"disable","name":"report","changed":true,"waited":true,"message":"disabled report: nothing of it is held, and no node runs it until 'simba enable report'","reason":"maintenance"}`; string(mustJSON(t, r)) != want {
			t.Errorf("disable -o yaml decodes to %s, want %s", mustJSON(t, r), want)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDurationsInJSONAreSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		n := startNode(t, b.Node("a"), "a", ttl, rec)
		if _, err := n.client.Election("slow").Schedule(simba.FixedRate(2*time.Second), func(ctx context.Context, _ *simba.Term) error {
			time.Sleep(1500 * time.Millisecond)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2100 * time.Millisecond) // the first run ended, the second runs
		h := newHarness(t, b)
		inFlight := decode[map[string]any](t, h.ok("status", "slow", "--json"))["lastRun"].(map[string]any)
		if _, ok := inFlight["durationSeconds"]; ok || inFlight["result"] != "running" {
			t.Errorf("the run in flight: %v, want one running without a duration", inFlight)
		}
		time.Sleep(1500 * time.Millisecond)
		runs := decode[[]map[string]any](t, h.ok("history", "slow", "--json"))
		if len(runs) != 2 || runs[0]["durationSeconds"] != 1.5 || runs[1]["durationSeconds"] != 1.5 {
			t.Errorf("history: %v, want two runs with durationSeconds 1.5", runs)
		}
		v := decode[leaseView](t, h.ok("status", "slow", "--json"))
		if v.LastRun == nil || v.LastRun.DurationSeconds == nil || *v.LastRun.DurationSeconds != 1.5 {
			t.Errorf("status slow: last run %+v, want 1.5 seconds", v.LastRun)
		}
		jobs := decode[[]jobView](t, h.ok("jobs", "--json"))
		if len(jobs) != 1 || jobs[0].LastRun == nil || jobs[0].LastRun.DurationSeconds == nil || *jobs[0].LastRun.DurationSeconds != 1.5 {
			t.Errorf("jobs: %+v, want a last run of 1.5 seconds", jobs)
		}
	})
}

func TestTimesCarryTheirZone(t *testing.T) {
	at := time.Date(2026, 3, 1, 15, 2, 3, 120e6, time.UTC)
	cet := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		p          printer
		now        time.Time
		stamp, clk string
	}{
		{printer{loc: time.UTC}, at, "2026-03-01 15:02:03.120 UTC", "15:02:03.120 UTC"},
		{printer{loc: cet}, at, "2026-03-01 16:02:03.120 CET", "16:02:03.120 CET"},
		{printer{loc: time.FixedZone("", -3*3600)}, at, "2026-03-01 12:02:03.120 -0300", "12:02:03.120 -0300"},
		// Another day than now: the clock gives the date too.
		{printer{loc: cet}, at.Add(-24 * time.Hour), "2026-03-01 16:02:03.120 CET", "2026-03-01 16:02:03.120 CET"},
		{printer{loc: cet, wide: true}, at, "2026-03-01 16:02:03.120 CET", "2026-03-01 16:02:03.120 CET"},
	} {
		if got := tc.p.stamp(at); got != tc.stamp {
			t.Errorf("stamp in %v = %q, want %q", tc.p.loc, got, tc.stamp)
		}
		if got := tc.p.clock(at, tc.now); got != tc.clk {
			t.Errorf("clock in %v (wide %v, now %v) = %q, want %q", tc.p.loc, tc.p.wide, tc.now, got, tc.clk)
		}
	}
	if got := (printer{loc: time.UTC}).stamp(time.Time{}); got != "-" {
		t.Errorf("the zero time prints %q, want -", got)
	}

	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		startCluster(t, b)
		h := newHarness(t, b)
		// Every time of day or instant a table prints has its zone.
		instant := regexp.MustCompile(`\d\d:\d\d:\d\d(\.\d+)?`)
		zoned := regexp.MustCompile(`\d\d:\d\d:\d\d(\.\d+)? UTC`)
		for _, args := range [][]string{{"status", "report"}, {"elections", "-o", "wide"}, {"jobs", "-o", "wide"}, {"history", "report"}, {"history", "report", "-o", "wide"}, {"status", "report", "-o", "wide"}} {
			out := h.ok(append(args, "--utc")...)
			if n, z := len(instant.FindAllString(out, -1)), len(zoned.FindAllString(out, -1)); n == 0 || n != z {
				t.Errorf("simba %s: %d times, %d with their zone:\n%s", strings.Join(args, " "), n, z, out)
			}
		}
	})
}

// watchFor runs simba with args (a --watch) for d of virtual time, then
// interrupts it.
func (h *harness) watchFor(d time.Duration, args ...string) result {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(d, cancel)
	defer cancel()
	return h.runContext(ctx, args...)
}

// jsonDocuments splits a stream of JSON documents.
func jsonDocuments(t *testing.T, s string) []json.RawMessage {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	var docs []json.RawMessage
	for {
		var m json.RawMessage
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("not a stream of JSON documents: %v\n%s", err, s)
		}
		docs = append(docs, m)
	}
}

func TestWatchRedrawsEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		startCluster(t, b)
		h := newHarness(t, b)

		// JSON: one document per round, a round at once and then every
		// --interval, over one connection.
		r := h.watchFor(3500*time.Millisecond, "--watch", "jobs", "--interval", "1s", "-o", "json")
		if r.code != exitOK || r.stderr != "" {
			t.Errorf("an interrupted watch: %v", r)
		}
		docs := jsonDocuments(t, r.stdout)
		if len(docs) != 4 {
			t.Fatalf("%d documents in 3.5s at 1s intervals, want 4:\n%s", len(docs), r.stdout)
		}
		var first, last []jobView
		json.Unmarshal(docs[0], &first)
		json.Unmarshal(docs[3], &last)
		if len(first) != 1 || len(last) != 1 || last[0].Succeeded != first[0].Succeeded+3 {
			t.Errorf("the rounds do not show the runs in between: first %+v, last %+v", first, last)
		}
		if len(h.opened) != 1 {
			t.Errorf("the watch opened %d backends, want one for every round: %v", len(h.opened), h.opened)
		}

		// YAML: one document per round, each after "---".
		r = h.watchFor(1500*time.Millisecond, "status", "report", "--watch", "--interval", "1s", "-o", "yaml")
		if n := strings.Count(r.stdout, "---\nname: report\n"); n != 2 || !strings.HasPrefix(r.stdout, "---\n") {
			t.Errorf("%d YAML documents in 1.5s, want 2:\n%s", n, r.stdout)
		}

		// Tables: headed by the command and the time; the screen cleared
		// only on a terminal.
		r = h.watchFor(1500*time.Millisecond, "elections", "--watch", "--interval", "1s", "--utc")
		heading := regexp.MustCompile(`(?m)^every 1s: simba elections  \(2000-01-01 00:00:\d\d\.\d{3} UTC\)\n\nELECTION `)
		if n := len(heading.FindAllString(r.stdout, -1)); n != 2 || strings.Contains(r.stdout, clearScreen) {
			t.Errorf("%d headed tables in 1.5s (want 2), no clearing off a terminal:\n%q", n, r.stdout)
		}
		h.terminal = true
		r = h.watchFor(1500*time.Millisecond, "elections", "--watch", "--interval", "1s")
		if n := strings.Count(r.stdout, clearScreen+"every 1s: simba elections"); n != 2 {
			t.Errorf("%d screens cleared in 1.5s on a terminal, want 2:\n%q", n, r.stdout)
		}
		if r.code != exitOK {
			t.Errorf("an interrupted watch: %v", r)
		}
	})
}

func TestWatchKeepsWatchingThroughFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		startCluster(t, b)
		h := newHarness(t, b)
		// The backend of the first connection goes away after the first
		// round; the second connection finds it gone too, until 7s.
		start := time.Now()
		opened := 0
		h.prepare = func(n *memory.Node) {
			switch opened++; opened {
			case 1:
				time.AfterFunc(500*time.Millisecond, n.Partition)
			case 2:
				n.Partition()
				time.AfterFunc(start.Add(7*time.Second).Sub(time.Now()), n.Heal)
			}
		}
		r := h.watchFor(20*time.Second, "jobs", "--watch", "--interval", "1s", "--timeout", "1s", "-o", "json")
		if r.code != exitOK {
			t.Errorf("an interrupted watch: %v", r)
		}
		// Every failed round says why and when the next comes; the waits
		// grow from --interval, jittered within [d/2, d].
		again := regexp.MustCompile(`(?m)^simba: etcd at memory:2379: no answer within 1s while (.*) \(again in (.*)\)$`)
		fails := again.FindAllStringSubmatch(r.stderr, -1)
		if len(fails) < 2 {
			t.Fatalf("%d failed rounds reported, want 2 or more:\n%s", len(fails), r.stderr)
		}
		for i, f := range fails {
			wait, err := time.ParseDuration(f[2])
			d := time.Second << i
			if err != nil || wait < d/2 || wait > d {
				t.Errorf("failure %d: again in %q, want within [%v, %v]", i+1, f[2], d/2, d)
			}
		}
		if strings.Count(r.stderr, "\n") != len(fails) {
			t.Errorf("stderr has more than the failed rounds:\n%s", r.stderr)
		}
		// It came back, on a fresh connection, and went on.
		docs := jsonDocuments(t, r.stdout)
		if len(docs) < 8 {
			t.Errorf("%d rounds shown in 20s, want the first and those after the outage:\n%s", len(docs), r.stdout)
		}
		if len(h.opened) < 2 {
			t.Errorf("the watch did not connect afresh after a backend failure: opened %v", h.opened)
		}
		// A usage error ends it at once.
		r = h.watchFor(time.Hour, "status", "x", "--watch", "--etcd", "a:1", "--zk", "b:2")
		requireCode(t, r, exitUsage, "--etcd and --zk both given")
	})
}

func TestCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		startCluster(t, b)
		h := newHarness(t, b)
		h.ok("disable", "later", "--force")
		complete := func(words ...string) []string {
			t.Helper()
			out := h.ok(append([]string{completeCommand, "--"}, words...)...)
			return strings.Fields(out)
		}
		for _, tc := range []struct {
			words []string
			want  []string
		}{
			{[]string{""}, append(commandNames(), "help")},
			{[]string{"st"}, []string{"status"}},
			{[]string{"--prefix", "/x/", "gr"}, []string{"groups"}},
			{[]string{"help", "dr"}, []string{"drain"}},
			{[]string{"completion", ""}, []string{"bash", "zsh"}},
			{[]string{"status", "-o", ""}, outputs},
			{[]string{"status", "--output", "y"}, []string{"yaml"}},
			{[]string{"status", "--wa"}, []string{"--watch"}},
			{[]string{"disable", "--f"}, []string{"--force"}},
			{[]string{"--ti"}, []string{"--timeout"}},
			{[]string{"status", ""}, []string{"billing", "ingest", "report"}},
			{[]string{"status", "--utc", "r"}, []string{"report"}},
			{[]string{"history", ""}, []string{"report"}},
			{[]string{"trigger", "-o", "json", ""}, []string{"report"}},
			{[]string{"trigger", "--a"}, []string{"--arg"}},
			{[]string{"trigger", "--arg", ""}, nil}, // a key=value: nothing to offer
			{[]string{"trigger", "--arg", "day=1", "--arg=n=2", ""}, []string{"report"}},
			{[]string{"resign", "b"}, []string{"billing.0", "billing.1", "billing.2", "billing.3"}},
			{[]string{"groups", ""}, []string{"billing"}},
			{[]string{"enable", ""}, []string{"billing", "ingest", "later", "report"}},
			{[]string{"drain", ""}, []string{"a"}},
			{[]string{"status", "report", ""}, nil},
			{[]string{"elections", ""}, nil},
			{[]string{"frobnicate", ""}, nil},
		} {
			if got := complete(tc.words...); !slices.Equal(got, tc.want) {
				t.Errorf("completing %q: %q, want %q", tc.words, got, tc.want)
			}
		}
		// A backend that does not answer offers no names, within a second,
		// silently.
		h.prepare = (*memory.Node).Partition
		start := time.Now()
		r := h.run(completeCommand, "--", "status", "")
		if r.code != exitOK || r.stdout != "" || r.stderr != "" {
			t.Errorf("completing against a backend that does not answer: %v", r)
		}
		if d := time.Since(start); d > completeTimeout+closeGrace {
			t.Errorf("completing against a backend that does not answer took %v", d)
		}
		h.prepare = nil
		for _, shell := range []string{"bash", "zsh"} {
			if out := h.ok("completion", shell); !strings.Contains(out, completeCommand) || !strings.Contains(out, "_simba") {
				t.Errorf("completion %s:\n%s", shell, out)
			}
		}
	})
}

func TestEnableAndDisableAgreeAboutNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		startCluster(t, b)
		h := newHarness(t, b)
		unknown := `no such election, job or group "nosuch" (known: billing, ingest, report)`
		requireCode(t, h.run("disable", "nosuch"), exitFailed, unknown+"; pass --force to disable it before any node runs it")
		requireCode(t, h.run("enable", "nosuch"), exitFailed, unknown)
		if out := h.ok("enable", "nosuch", "--force"); out != "nosuch is not disabled\n" {
			t.Errorf("enable --force of an unknown name: %q", out)
		}
		if out := h.ok("enable", "report"); out != "report is not disabled\n" {
			t.Errorf("enable of a name not disabled: %q", out)
		}
		// A name disabled before any node runs it can be enabled, and
		// disabled again, without --force.
		h.ok("disable", "nosuch", "--force")
		if out := h.ok("disable", "nosuch"); out != "nosuch is already disabled\n" {
			t.Errorf("disable of a name disabled: %q", out)
		}
		if out := h.ok("enable", "nosuch"); out != "enabled nosuch: nodes contend for it again\n" {
			t.Errorf("enable of a name disabled with --force: %q", out)
		}
		// The same for members.
		requireCode(t, h.run("drain", "nobody"), exitFailed, `no such member "nobody" (known: a); pass --force to drain it before it starts`)
		requireCode(t, h.run("undrain", "nobody"), exitFailed, `no such member "nobody" (known: a)`)
		if out := h.ok("undrain", "nobody", "--force"); out != "nobody is not drained\n" {
			t.Errorf("undrain --force of an unknown member: %q", out)
		}

		// trigger says when a job is disabled, whole or in part.
		n := startNode(t, b.Node("n"), "n", ttl, &recorder{})
		if _, err := n.client.Group("batch", 2).Schedule(simba.FixedRate(time.Hour), func(context.Context, *simba.Term, int) error { return nil }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		h.ok("disable", "batch.1", "--wait")
		requireCode(t, h.run("trigger", "batch"), exitFailed, "partition batch.1 of batch is disabled: nothing runs it until 'simba enable batch.1'")
		if out := h.ok("trigger", "batch", "--force"); out != "triggered batch: 2 partitions, 1 held now; 1 disabled wait until enabled\n" {
			t.Errorf("trigger --force of a group partly disabled: %q", out)
		}
		h.ok("disable", "batch")
		requireCode(t, h.run("trigger", "batch"), exitFailed, "batch is disabled: nothing runs it until 'simba enable batch'; pass --force")
		requireCode(t, h.run("trigger", "batch.0"), exitFailed, "batch.0 is disabled with its group batch: nothing runs it until 'simba enable batch'; pass --force")
	})
}

func TestEveryOperationRecordsItsReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		node := b.Node("a")
		a := startNode(t, node, "a", ttl, &recorder{})
		a.schedule(t, "report", simba.FixedRate(time.Second))
		a.whileLeader(t, "ingest")
		time.Sleep(500 * time.Millisecond)
		// The node sees no operation, and carries out none (no virtual
		// time passes before it heals): the records stay to be read.
		node.Partition()
		defer node.Heal()
		h := newHarness(t, b)
		for _, args := range [][]string{
			{"disable", "ingest", "--wait=false"}, {"enable", "ingest"}, {"trigger", "report"}, {"resign", "report"},
			{"drain", "a", "--wait=false"}, {"undrain", "a"},
		} {
			reason := "because of " + args[0]
			r := decode[opResult](t, h.ok(append(args, "--reason", reason, "--json")...))
			if r.Reason != reason || !r.Changed {
				t.Errorf("simba %s: %+v, want reason %q", strings.Join(args, " "), r, reason)
			}
			if args[0] == "enable" || args[0] == "undrain" {
				continue // nothing stays recorded: the operation is cleared
			}
			key := map[string]string{
				"disable": records.DisabledPrefix, "trigger": records.TriggerPrefix,
				"resign": records.ResignPrefix, "drain": records.DrainPrefix,
			}[args[0]] + args[1]
			if op := readOp(t, b, key); op.Reason != reason || !strings.HasSuffix(op.By, "(simba command)") {
				t.Errorf("simba %s recorded %+v, want reason %q", strings.Join(args, " "), op, reason)
			}
		}
	})
}

// readOp reads an operation record as the backend keeps it.
func readOp(t *testing.T, b *memory.Backend, key string) admin.Op {
	t.Helper()
	s, err := b.Node("reader").Open(t.Context(), backend.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context())
	r, err := s.(backend.Records).GetRecord(t.Context(), key)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	var op admin.Op
	if err := records.Decode(r.Value, &op); err != nil {
		t.Fatalf("decoding %s: %v", key, err)
	}
	return op
}

func TestVersion(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/simba-go/simba", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-03-01T15:02:03Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	v := versionOf(bi)
	at := time.Date(2026, 3, 1, 15, 2, 3, 0, time.UTC)
	want := versionInfo{Module: "github.com/simba-go/simba", Version: "v1.4.0", Revision: "0123456789abcdef0123456789abcdef01234567", Time: &at, Modified: true, Go: "go1.26.0", Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("versionOf = %+v, want %+v", v, want)
	}
	var out strings.Builder
	printVersion(&out, printer{loc: time.UTC}, v)
	for _, line := range []string{"simba     v1.4.0\n", "revision  0123456789abcdef0123456789abcdef01234567, 2026-03-01 15:02:03.000 UTC, with local changes\n", "go        go1.26.0\n"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("version lacks %q:\n%s", line, out.String())
		}
	}
	if got := versionOf(&debug.BuildInfo{GoVersion: "go1.26.0"}).Version; got != "(devel)" {
		t.Errorf("version without a module version: %q", got)
	}

	// The test binary's own build information, through the command.
	h := newHarness(t, nil)
	got := decode[versionInfo](t, h.ok("version", "-o", "json"))
	if got.Go != runtime.Version() || got.Version == "" || got.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("simba version -o json: %+v", got)
	}
	if len(h.opened) > 0 {
		t.Errorf("version opened a backend: %v", h.opened)
	}
}

func TestMessagesHaveNoDoubledPrefixes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"simba/admin: simba/etcd: open: boom", "open: boom"},
		{"etcd at x: failed while disabling r: simba/admin: simba/etcd: simba/etcd: put: boom", "etcd at x: failed while disabling r: put: boom"},
		{"simba: no such job", "no such job"},
		{"no answer while opening a session (hint): simba/admin: opening a session: simba/etcd: open: context deadline exceeded", "no answer while opening a session (hint): open: context deadline exceeded"},
		{"key prefix \"simba/x\": bad", "key prefix \"simba/x\": bad"}, // not a package prefix
		{"a: opening a session", "a: opening a session"},               // the root cause stays
	} {
		if got := message(tc.in); got != tc.want {
			t.Errorf("message(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}

	// Representative failures, as the command prints them: one "simba: "
	// and no package prefix.
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		startCluster(t, b)
		h := newHarness(t, b)
		check := func(r result, code int, want string) {
			t.Helper()
			requireCode(t, r, code, want)
			if strings.Count(r.stderr, "simba") != strings.Count(r.stderr, "simba ")+strings.Count(r.stderr, "simba:") || strings.Contains(r.stderr, "simba/") || strings.Count(r.stderr, "simba:") != 1 {
				t.Errorf("a doubled or package prefix:\n%s", r.stderr)
			}
		}
		check(h.run("disable", "no/slash"), exitUsage, `simba: invalid name "no/slash": character '/' at byte 2`)
		check(h.run("status", "nosuch"), exitFailed, `simba: no such election, job or group "nosuch"`)
		h.wrap = func(b backend.Backend) backend.Backend { return failingPuts{b} }
		check(h.run("disable", "report"), exitUnreachable, "simba: etcd at memory:2379: failed while disabling report: put record: the disk is full")
		h.wrap = nil
		h.prepare = (*memory.Node).Partition
		check(h.run("jobs", "--timeout", "1s"), exitUnreachable, "simba: etcd at memory:2379: no answer within 1s while reading the elections, groups and operations")
	})
}

// failingPuts is a backend whose sessions fail every PutRecord as a
// backend of the module would, with its package prefix.
type failingPuts struct{ backend.Backend }

type failingPutSession struct{ fullSession }

func (f failingPuts) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	s, err := f.Backend.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return failingPutSession{s.(fullSession)}, nil
}

func (failingPutSession) PutRecord(context.Context, string, []byte, backend.Condition) (backend.Record, error) {
	return backend.Record{}, errors.New("simba/memory: simba/memory: put record: the disk is full")
}

func TestPrefixHintReadsOnlyWhenEmpty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHarness(t, b)
		// Nothing anywhere (the memory backend has no prefixes): one more
		// read, of the default prefix, and no hint.
		r := h.run("elections", "--prefix", "/x/")
		if r.code != exitOK || r.stderr != "" || len(h.opened) != 2 || h.opened[1].prefix != "" {
			t.Errorf("elections under an empty prefix, the default empty too: %v\nopened %v", r, h.opened)
		}
		// The default prefix itself, or no prefix: no more read.
		for _, args := range [][]string{{"elections", "--prefix", "/simba/"}, {"elections"}} {
			h.opened = nil
			h.ok(args...)
			if len(h.opened) != 1 {
				t.Errorf("simba %s opened %v, want one backend", strings.Join(args, " "), h.opened)
			}
		}
		// A prefix that holds something: no more read.
		startCluster(t, b)
		h.opened = nil
		h.ok("elections", "--prefix", "/x/")
		if len(h.opened) != 1 {
			t.Errorf("a prefix that holds something cost a read of the default: opened %v", h.opened)
		}
	})
}
