package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The run policies of a jobs file through simba run --jobs, and as flags
// of simba run --election, end to end (issue 42): what the children are given (SIMBA_RUN_SOURCE, SIMBA_ATTEMPT,
// SIMBA_ARG_<KEY>) and the progress watchdog fed by their output. Scenarios
// of TestRunEndToEnd; child.sh logs the run's variables on its start line.

// writeJobs writes a jobs file of the scenario, the placeholder CHILD(mode
// ...) in yaml replaced by the JSON argv of child.sh in that mode, and
// returns its path.
func (rc *runCluster) writeJobs(t *testing.T, yaml string, children map[string][]string) string {
	t.Helper()
	for name, mode := range children {
		argv, err := json.Marshal(rc.child(mode...))
		if err != nil {
			t.Fatal(err)
		}
		yaml = strings.ReplaceAll(yaml, name, string(argv))
	}
	file := filepath.Join(rc.dir, "jobs.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// stopJobs ends the simba run --jobs processes with SIGTERM, all at once
// (none takes over the jobs of another), and waits for each to exit 0.
func stopJobs(t *testing.T, procs ...*runProc) {
	t.Helper()
	for _, p := range procs {
		p.signal(t, syscall.SIGTERM)
	}
	for _, p := range procs {
		if code := p.waitExit(t, 20*time.Second); code != 0 {
			t.Errorf("simba run --jobs %s exited %d on SIGTERM, want 0\n%s", p.name, code, p.output())
		}
	}
}

// A trigger's arguments reach the child, with its source and attempt.
func testRunJobsTriggerArgs(t *testing.T, rc *runCluster) {
	file := rc.writeJobs(t, `scheduled:
  - name: nightly
    fixedRate: 1h
    command: QUICK
`, map[string][]string{"QUICK": {"exit", "0"}})
	p := rc.startJobs(t, "jobs", file)
	first := rc.waitStart(t, 20*time.Second, "nightly", "jobs")
	if first.f["source"] != "normal" || first.f["attempt"] != "1" || first.f["args"] != "" {
		t.Errorf("the planned run's child: SIMBA_RUN_SOURCE %q, SIMBA_ATTEMPT %q, arguments %q; want normal, 1, none", first.f["source"], first.f["attempt"], first.f["args"])
	}
	rc.ok(t, "trigger", "nightly", "--arg", "day=2026-12-05")
	eventually(t, 20*time.Second, "the triggered run starts its child", func() bool { return len(rc.starts(t, "nightly")) >= 2 })
	starts := rc.starts(t, "nightly")
	got := starts[1]
	if len(starts) != 2 || got.token() != first.token() || fmt.Sprint(got.f["source"], " ", got.f["attempt"], " ", got.f["args"]) != "trigger 1 SIMBA_ARG_DAY=2026-12-05," {
		t.Errorf("children %v; want a second, of the same term, with SIMBA_RUN_SOURCE trigger, SIMBA_ATTEMPT 1, SIMBA_ARG_DAY 2026-12-05 and no other argument", starts)
	}
	stopJobs(t, p)
}

// A command that fails is run again per retry: the retry's child has
// SIMBA_ATTEMPT 2, in the same term, and the history numbers both.
func testRunJobsRetry(t *testing.T, rc *runCluster) {
	file := rc.writeJobs(t, `scheduled:
  - name: flaky
    fixedRate: 1h
    retry: {attempts: 2, backoff: 200ms}
    command: FAILONCE
`, map[string][]string{"FAILONCE": {"fail-once", "3"}})
	p := rc.startJobs(t, "jobs", file)
	checkRetriedOnce(t, rc, p, "flaky")
	stopJobs(t, p)
}

// The same retry through the flags of simba run --election: --retry 2.
func testRunRetryFlag(t *testing.T, rc *runCluster) {
	p := rc.start(t, "a", []string{"--election", "flaky", "--fixed-rate", "1h", "--retry", "2", "--retry-backoff", "200ms"}, rc.child("fail-once", "3")...)
	checkRetriedOnce(t, rc, p, "flaky")
	p.signal(t, syscall.SIGTERM)
	if code := p.waitExit(t, 20*time.Second); code != 0 {
		t.Errorf("simba run exited %d on SIGTERM, want 0\n%s", code, p.output())
	}
}

// checkRetriedOnce checks the runs of lease, whose child.sh fails once
// with exit status 3 and whose retry policy has 2 attempts: its first
// child fails, its second, SIMBA_ATTEMPT 2 in the same term, succeeds, and
// the history numbers both.
func checkRetriedOnce(t *testing.T, rc *runCluster, p *runProc, lease string) {
	t.Helper()
	eventually(t, 20*time.Second, lease+"'s command is run twice", func() bool {
		if p.hasExited() {
			t.Fatalf("simba run exited %d\n%s", p.code, p.output())
		}
		return len(rc.starts(t, lease)) >= 2
	})
	starts := rc.starts(t, lease)
	if len(starts) != 2 || starts[0].f["attempt"] != "1" || starts[1].f["attempt"] != "2" || starts[1].token() != starts[0].token() ||
		starts[0].f["source"] != "normal" || starts[1].f["source"] != "normal" {
		t.Errorf("children %v; want SIMBA_ATTEMPT 1 then 2 in one term, both of source normal", starts)
	}
	var runs []runEntry
	eventually(t, 20*time.Second, "the history has both attempts", func() bool {
		runs = rc.history(t, lease)
		return len(runs) == 2 && runs[1].Result != "running"
	})
	if runs[0].Attempt != 1 || !runs[0].exitedWith(3) || runs[0].Result != "failed" ||
		runs[1].Attempt != 2 || !runs[1].exitedWith(0) || runs[1].Result != "succeeded" {
		t.Errorf("history %v; want attempt 1 failed with exit status 3, attempt 2 succeeded", runs)
	}
}

// progressTimeout: each line a command writes is progress. A command that
// writes a line every 200ms keeps its term past its progressTimeout of 3s;
// one that writes nothing loses its term after 3s, and the other node
// takes it over. (3s, not 1s: the limit counts from the run's start, and a
// loaded machine's shell may take a second to start and write its first
// line.)
func testRunJobsProgress(t *testing.T, rc *runCluster) {
	file := rc.writeJobs(t, `scheduled:
  - name: chatty
    fixedRate: 1h
    progressTimeout: 3s
    command: TICK
  - name: silent
    fixedRate: 1h
    progressTimeout: 3s
    command: HOLD
`, map[string][]string{"TICK": {"tick", "20"}, "HOLD": {"hold"}})
	procs := map[string]*runProc{"a": rc.startJobs(t, "a", file), "b": rc.startJobs(t, "b", file)}
	stderr := func(member string) string {
		data, _ := os.ReadFile(procs[member].stderr)
		return string(data)
	}
	var silent logLine
	eventually(t, 20*time.Second, "silent's first child starts", func() bool {
		for _, p := range procs {
			if p.hasExited() {
				t.Fatalf("simba run --jobs %s exited %d\n%s", p.name, p.code, p.output())
			}
		}
		if s := rc.starts(t, "silent"); len(s) > 0 {
			silent = s[0]
			return true
		}
		return false
	})
	other := map[string]string{"a": "b", "b": "a"}[silent.member()]
	// The watchdog's limit is 3s; the wait bounds the hand-off, not its speed.
	eventually(t, 20*time.Second, "silent's term is given up and "+other+" takes it over", func() bool {
		for _, l := range rc.starts(t, "silent") {
			if l.member() == other && l.token() > silent.token() {
				return true
			}
		}
		return false
	})
	warn := fmt.Sprintf("simba run: warning: no progress within the watchdog's limit: giving the term up (election=silent token=%d limit=3s ", silent.token())
	if got := stderr(silent.member()); !strings.Contains(got, warn) {
		t.Errorf("simba run --jobs %s does not log %q:\n%s", silent.member(), warn, got)
	}

	// chatty's child writes for 4s: one child, one term, and a success.
	var runs []runEntry
	eventually(t, 20*time.Second, "chatty's child ends", func() bool {
		runs = rc.history(t, "chatty")
		return len(runs) > 0 && runs[0].Result != "running"
	})
	starts := rc.starts(t, "chatty")
	if len(starts) != 1 || len(runs) != 1 || !runs[0].exitedWith(0) || runs[0].Token != starts[0].token() {
		t.Errorf("chatty: children %v, history %v; want one child that exited 0 in its term", starts, runs)
	}
	for member := range procs {
		for _, line := range strings.Split(stderr(member), "\n") {
			if strings.Contains(line, "election=chatty") && strings.Contains(line, "no progress") {
				t.Errorf("simba run --jobs %s gave chatty's term up: %s", member, line)
			}
		}
	}
	stopJobs(t, procs["a"], procs["b"])
}
