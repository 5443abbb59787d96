package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/jobs"
)

// The in-process tests of simba run: its bad input, and real children on
// the memory backend. run_e2e_test.go runs the built command on the real
// backends.

func TestRunBadInput(t *testing.T) {
	b := memory.New()
	defer b.Close()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	goJobs := filepath.Join(dir, "go-jobs.yaml")
	if err := os.WriteFile(goJobs, []byte("scheduled:\n  - name: report\n    fixedDelay: 1m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no mode", []string{"run", "--", "true"}, "give --election NAME, --group NAME --partitions N, or --jobs FILE"},
		{"two modes", []string{"run", "--election", "a", "--group", "b", "--partitions", "2", "--", "true"}, "exclude each other"},
		{"missing command", []string{"run", "--election", "a"}, "no command: give it after --"},
		{"missing command after --", []string{"run", "--election", "a", "--"}, "no command"},
		{"command not found", []string{"run", "--election", "a", "--", "no-such-command-anywhere"}, `cannot run no-such-command-anywhere: executable file not found in $PATH`},
		{"no such file", []string{"run", "--election", "a", "--", filepath.Join(dir, "missing")}, "cannot run " + filepath.Join(dir, "missing")},
		{"not executable", []string{"run", "--election", "a", "--", notExec}, "cannot run " + notExec},
		{"a directory", []string{"run", "--election", "a", "--", dir}, "cannot run " + dir},
		{"two schedules", []string{"run", "--election", "a", "--every", "1s", "--cron", "@hourly", "--", "true"}, "--every and --cron exclude each other"},
		{"bad cron", []string{"run", "--election", "a", "--cron", "61 * * * *", "--", "true"}, `cron expression "61 * * * *"`},
		{"zero delay", []string{"run", "--election", "a", "--every", "0s", "--", "true"}, "invalid schedule"},
		{"bad misfire", []string{"run", "--election", "a", "--every", "1s", "--misfire", "later", "--", "true"}, "--misfire later: use skip or run-once"},
		{"misfire without schedule", []string{"run", "--election", "a", "--misfire", "skip", "--", "true"}, "--misfire applies to a schedule"},
		{"initial delay without schedule", []string{"run", "--election", "a", "--initial-delay", "1s", "--", "true"}, "--initial-delay applies to a schedule"},
		{"once with a schedule", []string{"run", "--election", "a", "--once", "--every", "1s", "--", "true"}, "--once and --every exclude each other"},
		{"once with a group", []string{"run", "--group", "g", "--partitions", "2", "--once", "--", "true"}, "--once applies to --election only"},
		{"restart with a schedule", []string{"run", "--election", "a", "--every", "1s", "--restart", "always", "--", "true"}, "--restart applies without a schedule only"},
		{"bad restart", []string{"run", "--election", "a", "--restart", "sometimes", "--", "true"}, "--restart sometimes: use never, on-failure or always"},
		{"group without partitions", []string{"run", "--group", "g", "--", "true"}, "--group needs --partitions N"},
		{"partitions without group", []string{"run", "--election", "a", "--partitions", "2", "--", "true"}, "--partitions applies to --group only"},
		{"too many partitions", []string{"run", "--group", "g", "--partitions", "100000", "--", "true"}, "--partitions must be at most"},
		{"bad grace", []string{"run", "--election", "a", "--grace", "0s", "--", "true"}, "--grace must be positive"},
		{"bad ttl", []string{"run", "--election", "a", "--ttl", "1ms", "--", "true"}, "--ttl must be at least"},
		{"bad name", []string{"run", "--election", "no/slash", "--", "true"}, "invalid"},
		{"jobs with a command", []string{"run", "--jobs", goJobs, "--", "true"}, "--jobs takes no command"},
		{"jobs with a schedule", []string{"run", "--jobs", goJobs, "--every", "1s"}, "--every does not apply to --jobs"},
		{"jobs file missing", []string{"run", "--jobs", filepath.Join(dir, "none.yaml")}, "none.yaml"},
		{"jobs file without command jobs", []string{"run", "--jobs", goJobs}, "has no job with a command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, b)
			r := h.run(tc.args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d\n%v", r.code, exitUsage, r)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr lacks %q\n%v", tc.want, r)
			}
			if n := strings.Count(strings.TrimRight(r.stderr, "\n"), "\n"); n != 0 {
				t.Errorf("stderr has %d lines, want one\n%v", n+1, r)
			}
			if len(h.opened) > 0 {
				t.Errorf("the backend was opened (%v): bad input must be refused before any lease is taken", h.opened)
			}
		})
	}
}

// TestRunOnceGivesTheChildItsTerm runs a child with --once on the memory
// backend: its environment names the term, its deadline file is kept up to
// date as renewals succeed, its output is prefixed, and simba run exits
// with its status.
func TestRunOnceGivesTheChildItsTerm(t *testing.T) {
	b := memory.New()
	defer b.Close()
	h := newHarness(t, b)
	script := `echo "election=$SIMBA_ELECTION token=$SIMBA_TOKEN member=$SIMBA_MEMBER deadline=$SIMBA_DEADLINE"
first=$(cat "$SIMBA_DEADLINE_FILE"); sleep 1; second=$(cat "$SIMBA_DEADLINE_FILE")
echo "file=$first later=$second"
printf 'no newline at the end'
exit 7`
	start := time.Now()
	r := h.run("run", "--election", "nightly", "--once", "--ttl", "600ms", "--member", "node-1", "--prefix-output", "--", "sh", "-c", script)
	if r.code != 7 {
		t.Fatalf("exit %d, want the child's 7\n%v", r.code, r)
	}
	m := regexp.MustCompile(`(?m)^\[nightly token (\d+)\] election=nightly token=(\d+) member=node-1 deadline=(\S+)$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("the child's environment line is missing or not prefixed\n%v", r)
	}
	if m[1] != m[2] {
		t.Errorf("prefix token %s, SIMBA_TOKEN %s", m[1], m[2])
	}
	deadline, err := time.Parse(deadlineLayout, m[3])
	if err != nil || !strings.HasSuffix(m[3], "Z") || !strings.Contains(m[3], ".") {
		t.Fatalf("SIMBA_DEADLINE %q is not RFC 3339 in UTC with milliseconds: %v", m[3], err)
	}
	if deadline.Before(start) || deadline.After(time.Now().Add(600*time.Millisecond)) {
		t.Errorf("SIMBA_DEADLINE %v is not within a TTL of the run (started %v)", deadline, start)
	}
	m = regexp.MustCompile(`(?m)^\[nightly token \d+\] file=(\S+) later=(\S+)$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("the deadline file line is missing\n%v", r)
	}
	first, err1 := time.Parse(deadlineLayout, m[1])
	second, err2 := time.Parse(deadlineLayout, m[2])
	if err1 != nil || err2 != nil {
		t.Fatalf("the deadline file holds %q then %q: %v %v", m[1], m[2], err1, err2)
	}
	if !second.After(first) {
		t.Errorf("the deadline file did not move with the renewals over a second (TTL 600ms): %v then %v", first, second)
	}
	if !strings.Contains(r.stdout, "[nightly token "+tokenOf(t, r.stdout)+"] no newline at the end\n") {
		t.Errorf("an unfinished last line is not passed on with its prefix\n%v", r)
	}
	if !strings.Contains(r.stderr, "the command ended: exit status 7") {
		t.Errorf("stderr does not say how the command ended\n%v", r)
	}
	hist := h.ok("history", "nightly")
	if !regexp.MustCompile(`failed \(exit 7\) +normal +node-1`).MatchString(hist) {
		t.Errorf("the history does not show the failed run and its exit status:\n%s", hist)
	}
}

func tokenOf(t *testing.T, out string) string {
	t.Helper()
	m := regexp.MustCompile(`token=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no token in %q", out)
	}
	return m[1]
}

// TestRunStopsTheChildOnSIGTERM interrupts simba run (what SIGTERM does)
// while its child runs: the child gets SIGTERM, simba run hands off and
// exits 0, and the history records the run as cancelled.
func TestRunStopsTheChildOnSIGTERM(t *testing.T) {
	b := memory.New()
	defer b.Close()
	h := newHarness(t, b)
	marks := filepath.Join(t.TempDir(), "marks")
	script := `trap 'echo terminated >> "` + marks + `"; exit 0' TERM
echo "started $SIMBA_TOKEN" >> "` + marks + `"
while :; do sleep 0.05; done`
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() {
		done <- h.runContext(ctx, "run", "--election", "ingest", "--ttl", "600ms", "--", "sh", "-c", script)
	}()
	eventually(t, 10*time.Second, "the child starts", func() bool {
		data, _ := os.ReadFile(marks)
		return bytes.HasPrefix(data, []byte("started "))
	})
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("simba run did not return within 20s of SIGTERM")
	}
	if r.code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0 (hand-off)\n%v", r.code, r)
	}
	data, _ := os.ReadFile(marks)
	if !strings.Contains(string(data), "terminated") {
		t.Errorf("the child did not get SIGTERM: %q\n%v", data, r)
	}
	// The child trapped SIGTERM and exited 0: a success, even after its term.
	if hist := h.ok("history", "ingest"); !regexp.MustCompile(`succeeded \(exit 0\) +normal`).MatchString(hist) {
		t.Errorf("the history does not record the run as succeeded with exit status 0:\n%s", hist)
	}
}

func TestPrefixWriter(t *testing.T) {
	var out bytes.Buffer
	sink := &lineSink{}
	w := sink.prefixed(&out, "[x token 1] ")
	for _, s := range []string{"a", "b\nc", "\n", "\n", "d"} {
		w.Write([]byte(s))
	}
	long := strings.Repeat("z", maxLine+10)
	w.Write([]byte("\n" + long))
	w.Flush()
	w.Flush() // nothing left: writes nothing
	want := "[x token 1] ab\n[x token 1] c\n[x token 1] \n[x token 1] d\n[x token 1] " + strings.Repeat("z", maxLine) + "\n[x token 1] zzzzzzzzzz\n"
	if got := out.String(); got != want {
		t.Errorf("got %q\nwant %q", shorten(got), shorten(want))
	}
}

func shorten(s string) string {
	return regexp.MustCompile(`z{20,}`).ReplaceAllStringFunc(s, func(z string) string { return "z×" + strconv.Itoa(len(z)) })
}

// TestRunJobsFile runs the command jobs of a jobs file, a scheduled one
// and a partitioned one with sharding-item parameters, and leaves its Go
// job alone.
func TestRunJobsFile(t *testing.T) {
	b := memory.New()
	defer b.Close()
	h := newHarness(t, b)
	file := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(file, []byte(`scheduled:
  - name: report
    fixedDelay: 1m
  - name: nightly
    fixedRate: 100ms
    command: [sh, -c, 'echo "nightly $SIMBA_ELECTION $SIMBA_TOKEN"']
partitioned:
  - group: exports
    partitions: 2
    fixedRate: 100ms
    shardingItemParameters: 0=north,1=south
    command: [sh, -c, 'echo "export $SIMBA_GROUP $SIMBA_PARTITION $SIMBA_PARTITION_PARAM $SIMBA_ELECTION"']
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() { done <- h.runContext(ctx, "run", "--jobs", file, "--ttl", "600ms") }()
	var r result
	eventually(t, 20*time.Second, "every command job runs", func() bool {
		hist := h.run("history", "exports", "-o", "json")
		return strings.Count(hist.stdout, `"succeeded"`) >= 4 && strings.Contains(h.run("history", "nightly").stdout, "succeeded")
	})
	cancel()
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("simba run --jobs did not return within 20s of SIGTERM")
	}
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\n%v", r.code, r)
	}
	for _, want := range []string{"nightly nightly ", "export exports 0 north exports.0\n", "export exports 1 south exports.1\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q\n%v", want, r)
		}
	}
	if !strings.Contains(r.stderr, "not running report of "+file+": their handlers are Go code") {
		t.Errorf("stderr does not name the Go job it leaves alone\n%v", r)
	}
}

// FuzzPrefixWriter: whatever the child writes, in whatever pieces, comes
// out as whole lines, each after the prefix, holding what was written, in
// order, with no line longer than maxLine.
func FuzzPrefixWriter(f *testing.F) {
	f.Add([]byte("a\nb"), 1)
	f.Add([]byte("\n\n\n"), 2)
	f.Add([]byte("no newline"), 3)
	f.Add(bytes.Repeat([]byte("x"), maxLine+3), 1000)
	f.Fuzz(func(t *testing.T, data []byte, chunk int) {
		if chunk <= 0 {
			chunk = 1
		}
		var out bytes.Buffer
		w := (&lineSink{}).prefixed(&out, "> ")
		for rest := data; len(rest) > 0; {
			n := min(chunk, len(rest))
			if m, err := w.Write(rest[:n]); m != n || err != nil {
				t.Fatalf("Write = %d, %v; want %d, nil", m, err, n)
			}
			rest = rest[n:]
		}
		w.Flush()
		var got []byte
		for _, line := range bytes.SplitAfter(out.Bytes(), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			if !bytes.HasPrefix(line, []byte("> ")) || line[len(line)-1] != '\n' {
				t.Fatalf("line %q lacks the prefix or its newline", line)
			}
			body := line[2 : len(line)-1]
			if len(body) > maxLine {
				t.Fatalf("a line of %d bytes, more than %d", len(body), maxLine)
			}
			got = append(append(got, body...), '\n')
		}
		// What was written, with a newline after an unfinished last line and
		// after every maxLine bytes of one line.
		var want []byte
		for i, line := range bytes.Split(data, []byte("\n")) {
			last := i == bytes.Count(data, []byte("\n"))
			if last && len(line) == 0 {
				break
			}
			for len(line) > maxLine {
				want = append(append(want, line[:maxLine]...), '\n')
				line = line[maxLine:]
			}
			if last && len(line) == 0 {
				break
			}
			want = append(append(want, line...), '\n')
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("lines %q, want %q", shorten(string(got)), shorten(string(want)))
		}
	})
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		in    string
		width int
		want  string
	}{
		{"", 10, ""},
		{"one", 10, "one"},
		{"aa bb cc dd", 5, "aa bb\ncc dd"},
		{"a  lot   of\nspace", 20, "a lot of space"},
		{"averyveryverylongword x", 5, "averyveryverylongword\nx"},
	} {
		if got := wrap(tc.in, tc.width); got != tc.want {
			t.Errorf("wrap(%q, %d) = %q, want %q", tc.in, tc.width, got, tc.want)
		}
	}
}

// The child's variables of a run's RunInfo: a RunInfo built here, since
// package simba fills the ones of real runs.
func TestRunInfoEnv(t *testing.T) {
	if env, dropped := runInfoEnv(simba.RunInfo{}, false); env != nil || dropped != nil {
		t.Errorf("without a RunInfo: %q, %q; want nothing", env, dropped)
	}
	env, dropped := runInfoEnv(simba.RunInfo{Source: simba.SourceTrigger, Attempt: 2, Args: map[string]string{
		"region":  "eu-west",
		"dry-run": "true",
		"a.b":     "dot",   // SIMBA_ARG_A_B, after a-b in byte order: left out
		"a-b":     "dash",  // SIMBA_ARG_A_B
		"Größe":   "x=y z", // non-ASCII letters are _
		"":        "empty key",
		"nul":     "a\x00b",
		"_x1":     "",
	}}, true)
	want := []string{
		"SIMBA_RUN_SOURCE=trigger",
		"SIMBA_ATTEMPT=2",
		"SIMBA_ARG_GR__E=x=y z",
		"SIMBA_ARG__X1=",
		"SIMBA_ARG_A_B=dash",
		"SIMBA_ARG_DRY_RUN=true",
		"SIMBA_ARG_REGION=eu-west",
	}
	if !slices.Equal(env, want) {
		t.Errorf("env\n%q\nwant\n%q", env, want)
	}
	if !slices.Equal(dropped, []string{"nul"}) {
		t.Errorf("dropped %q, want the key whose value holds a NUL byte", dropped)
	}
	env, _ = runInfoEnv(simba.RunInfo{Source: simba.SourceNormal, Attempt: 1}, true)
	if want := []string{"SIMBA_RUN_SOURCE=normal", "SIMBA_ATTEMPT=1"}; !slices.Equal(env, want) {
		t.Errorf("env %q, want %q", env, want)
	}
}

// Each write that ends a line reports progress once; everything written
// is passed on.
func TestProgressWriter(t *testing.T) {
	var out bytes.Buffer
	n := 0
	w := &progressWriter{w: &out, progress: func() { n++ }}
	for _, s := range []string{"par", "tial", "\n", "a\nb\nc", "", "d\n"} {
		w.Write([]byte(s))
	}
	if n != 3 {
		t.Errorf("progress reported %d times, want 3 (once per write ending a line)", n)
	}
	if got := out.String(); got != "partial\na\nb\ncd\n" {
		t.Errorf("passed on %q", got)
	}
}

// summarize names what a reload changes as Jobs.Update matches jobs: by
// kind and name, with the notifier in force.
func TestSummarize(t *testing.T) {
	hook := &jobs.Notify{Webhook: &jobs.Webhook{URL: "https://example.com/a"}}
	old := jobs.Config{
		Notify: hook,
		Scheduled: []jobs.ScheduledJob{
			{Name: "keep", FixedDelay: time.Second, Command: []string{"true"}},
			{Name: "drop", FixedDelay: time.Second, Command: []string{"true"}},
			{Name: "retime", FixedDelay: time.Second, Command: []string{"true"}},
			{Name: "own-hook", FixedDelay: time.Second, Command: []string{"true"}, Notify: &jobs.Notify{}},
		},
		Partitioned: []jobs.PartitionedJob{{Group: "kind", Partitions: 2, FixedDelay: time.Second, Command: []string{"true"}}},
	}
	cfg := jobs.Config{
		Notify: &jobs.Notify{Webhook: &jobs.Webhook{URL: "https://example.com/b"}}, // changes the jobs without their own
		Scheduled: []jobs.ScheduledJob{
			{Name: "keep", FixedDelay: time.Second, Command: []string{"true"}},
			{Name: "retime", FixedDelay: 2 * time.Second, Command: []string{"true"}},
			{Name: "own-hook", FixedDelay: time.Second, Command: []string{"true"}, Notify: &jobs.Notify{}},
			{Name: "kind", FixedDelay: time.Second, Command: []string{"true"}},
			{Name: "new", FixedDelay: time.Second, Command: []string{"true"}},
		},
	}
	want := "added kind, new; changed keep, retime; removed drop, kind; 1 unchanged"
	if got := summarize(old, cfg).String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	off := old
	off.Disabled = true
	if got, want := summarize(old, off).String(), "added none; changed none; removed keep, drop, retime, own-hook, kind; 0 unchanged"; got != want {
		t.Errorf("disabled: got %s, want %s", got, want)
	}
}
