package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/zktest"
)

// The end-to-end tests build the simba command and the opsdemo example, and
// drive the command against a real etcd (a process of internal/etcdtest) and a real ZooKeeper
// while simba nodes run: in-process clients, and opsdemo processes where a
// node must crash.

// e2eTTL is the session TTL of the nodes: the least etcd grants.
const e2eTTL = time.Second

// binaries are the programs the end-to-end tests run.
type binaries struct{ simba, demo string }

// The binaries are built once for the package's tests, into a directory
// that TestMain removes after them: each build links a binary of 90 MB,
// which costs seconds of both cores.
var (
	buildOnce sync.Once
	built     binaries
	buildErr  error
	buildDir  string
)

// build returns the simba command and the opsdemo example, built on first
// use.
func build(t *testing.T) binaries {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "simba-test-bin-")
		if buildErr == nil {
			built, buildErr = buildInto(buildDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// removeBuilt removes what build built.
func removeBuilt() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// buildInto builds the simba command and the opsdemo example into dir.
func buildInto(dir string) (binaries, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return binaries{}, fmt.Errorf("no go command to build with: %v", err)
	}
	bins := binaries{simba: filepath.Join(dir, "simba"), demo: filepath.Join(dir, "opsdemo")}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, b := range []struct{ out, pkg string }{
		{bins.simba, "github.com/simba-go/simba/cmd/simba"},
		{bins.demo, "github.com/simba-go/simba/examples/opsdemo"},
	} {
		wg.Go(func() {
			out, err := exec.Command(goCmd, "build", "-o", b.out, b.pkg).CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
			}
		})
	}
	wg.Wait()
	return bins, errors.Join(errs...)
}

// cleanEnv is the test's environment without the variables that choose a
// backend.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains([]string{envEtcd, envZK, envPostgres, envMySQL, envPrefix, envKubernetes, envKubeconfig, envKubeContext, envKubeNamespace}, name) {
			env = append(env, kv)
		}
	}
	return env
}

// cluster is one backend, under a key prefix of the test's own.
type cluster struct {
	bins binaries
	kind string   // "etcd" or "zookeeper"
	args []string // the flags that name it, for simba and opsdemo
	// newBackend opens a backend on it for an in-process node.
	newBackend func() (backend.Backend, error)
	// putRaw, if set, writes a key under the cluster's prefix as it is,
	// past the backend's checks: as a foreign writer could (etcd only).
	putRaw func(t *testing.T, key, value string)
}

// backend opens a backend for an in-process node, closed when the test
// ends (after the node).
func (c *cluster) backend(t *testing.T) backend.Backend {
	t.Helper()
	b, err := c.newBackend()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// requireRecords skips the test when the backend has no records yet.
func (c *cluster) requireRecords(t *testing.T) {
	t.Helper()
	b := c.backend(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	a, err := admin.Open(ctx, b)
	if errors.Is(err, backend.ErrRecordsUnsupported) {
		t.Skipf("backend/%s does not implement backend.Records yet (admin.Open: %v): the simba command has nothing to show or operate", c.kind, err)
	}
	if err != nil {
		t.Fatalf("admin.Open: %v", err)
	}
	a.Close()
}

// status returns the status of an election, or false while the command
// fails (before its first holder has written it).
func (c *cluster) status(t *testing.T, name string) (leaseView, bool) {
	t.Helper()
	r := c.simba(t, "status", name, "--json")
	if r.code != 0 {
		return leaseView{}, false
	}
	return decode[leaseView](t, r.stdout), true
}

// simba runs the command with the cluster's flags after args.
func (c *cluster) simba(t *testing.T, args ...string) result {
	t.Helper()
	return runBinary(t, c.bins.simba, append(args, c.args...)...)
}

// ok runs the command and fails the test unless it exits 0.
func (c *cluster) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := c.simba(t, args...)
	if r.code != 0 {
		t.Fatalf("simba %s: %v", strings.Join(args, " "), r)
	}
	return r.stdout
}

func runBinary(t *testing.T, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return result{code: 0, stdout: out.String(), stderr: errb.String()}
	case errors.As(err, &exit):
		return result{code: exit.ExitCode(), stdout: out.String(), stderr: errb.String()}
	}
	t.Fatalf("%s %s: %v", bin, strings.Join(args, " "), err)
	return result{}
}

// eventually polls cond every 50ms until it holds, or fails the test
// after within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestEndToEnd(t *testing.T) {
	t.Parallel() // servers of its own; the command-line tests do not touch the process environment
	if testing.Short() {
		t.Skip("builds the command and runs real servers")
	}
	bins := build(t)
	t.Run("etcd", func(t *testing.T) {
		srv := etcdtest.Start(t)
		endpoints := srv.Endpoints()
		runScenarios(t, "etcd", func(t *testing.T) *cluster {
			prefix := fmt.Sprintf("/simba-e2e/%s-%08x/", regexp.MustCompile(`\W+`).ReplaceAllString(t.Name(), "_"), rand.Uint32())
			return &cluster{
				bins: bins, kind: "etcd",
				args: []string{"--etcd", strings.Join(endpoints, ","), "--prefix", prefix},
				newBackend: func() (backend.Backend, error) {
					return etcd.New(endpoints, etcd.WithPrefix(prefix))
				},
				putRaw: func(t *testing.T, key, value string) {
					if _, err := newEtcdClient(t, srv).Put(t.Context(), prefix+key, value); err != nil {
						t.Fatalf("putting %s: %v", key, err)
					}
				},
			}
		})
	})
	t.Run("zookeeper", func(t *testing.T) {
		addr := zktest.Addr(t)
		runScenarios(t, "zookeeper", func(t *testing.T) *cluster {
			root := fmt.Sprintf("/simba-test/cmd-%s-%08x", regexp.MustCompile(`\W+`).ReplaceAllString(t.Name(), "_"), rand.Uint32())
			conn := zktest.Connect(t, addr)
			t.Cleanup(func() { // after the nodes: records outlive sessions
				if err := zktest.DeleteTree(conn, root); err != nil {
					t.Errorf("deleting %s: %v", root, err)
				}
			})
			return &cluster{
				bins: bins, kind: "zookeeper",
				args: []string{"--zk", addr, "--prefix", root},
				newBackend: func() (backend.Backend, error) {
					return zookeeper.New([]string{addr}, zookeeper.WithRoot(root))
				},
			}
		})
	})
	t.Run("dev", func(t *testing.T) { testDev(t, bins) })
}

// scenario is one end-to-end test, run on each backend.
type scenario struct {
	name string
	run  func(*testing.T, *cluster)
}

// scenarios are the end-to-end tests, in the order they run.
var scenarios = []scenario{
	{"StatusShowsTheTrueHolderAndToken", testStatus},
	{"NoRunStartsOnceDisableReturns", testDisable},
	{"TriggerRunsOnce", testTrigger},
	{"ResignMovesTheTermWithAHigherToken", testResign},
	{"DrainEmptiesAMember", testDrain},
	{"HistoryRecordsAFailOver", testFailOver},
	{"Errors", testErrors},
	{"SkippedRecordsAreWarnedOf", testSkippedRecords},
	{"AuditTrailShowsWhoWhyAndWhen", testAudit},
}

// runScenarios runs every scenario on a cluster of its own from newCluster.
func runScenarios(t *testing.T, kind string, newCluster func(*testing.T) *cluster) {
	runSome(t, scenarios, newCluster)
}

// runSome runs each of list on a cluster of its own from newCluster.
func runSome(t *testing.T, list []scenario, newCluster func(*testing.T) *cluster) {
	for _, sc := range list {
		t.Run(sc.name, func(t *testing.T) {
			c := newCluster(t)
			c.requireRecords(t) // skips every scenario, not only the first
			sc.run(t, c)
		})
	}
}

func testStatus(t *testing.T, c *cluster) {
	rec := &recorder{}
	a := startNode(t, c.backend(t), "a", e2eTTL, rec)
	a.schedule(t, "report", simba.FixedRate(200*time.Millisecond))
	a.whileLeader(t, "ingest")
	eventually(t, 5*time.Second, "a leads report and ingest", func() bool {
		return len(rec.elected("report")) == 1 && len(rec.elected("ingest")) == 1
	})
	z := startNode(t, c.backend(t), "z", e2eTTL, rec)
	z.schedule(t, "report", simba.FixedRate(200*time.Millisecond))
	z.whileLeader(t, "ingest")
	token := rec.elected("report")[0].Token

	var v leaseView
	eventually(t, 5*time.Second, "status report shows a run", func() bool {
		v, _ = c.status(t, "report")
		return v.LastRun != nil && v.Succeeded > 0
	})
	if v.Holder == nil || v.Holder.Member != "a" || v.Holder.Token != token || v.Holder.Session != a.client.SessionID() {
		t.Errorf("holder %+v, want a with token %d and session %s", v.Holder, token, a.client.SessionID())
	}
	if v.State != "held" || v.Schedule != "fixed rate 200ms" || (v.NextPlanned != nil && !v.NextPlanned.After(v.LastRun.Start)) {
		t.Errorf("status %+v", v)
	}
	out := c.ok(t, "status", "report")
	if want := fmt.Sprintf("holder      a (token %d, session %s, since ", token, a.client.SessionID()); !strings.Contains(out, want) {
		t.Errorf("status report lacks %q:\n%s", want, out)
	}
	out = c.ok(t, "elections")
	ingest := rec.elected("ingest")[0].Token
	for _, re := range []string{
		`(?m)^ELECTION +STATE +HOLDER +TOKEN +SINCE +SCHEDULE +LAST RUN$`,
		fmt.Sprintf(`(?m)^ingest +held +a +%d +\S+ ago +- +running for \S+$`, ingest),
		fmt.Sprintf(`(?m)^report +held +a +%d +\S+ ago +fixed rate 200ms +(succeeded \S+ ago|running for \S+)$`, token),
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("elections does not match %s:\n%s", re, out)
		}
	}
	o := decode[overview](t, c.ok(t, "status", "--json"))
	if o.Elections != (electionCounts{Total: 2, Held: 2}) || o.Jobs.Total != 1 || o.Sessions != 1 {
		t.Errorf("overview %+v", o)
	}
	t.Logf("simba status:\n%s\nsimba elections:\n%s", c.ok(t, "status"), out)
}

// testDisable: simba disable waits until nothing of the name is held, and
// from its return no run of it starts on any node until simba enable,
// round after round, for a schedule and a leader task held by one of two
// nodes. (A node whose watch has not delivered the disable yet may win
// the lease afterwards; it reads the operations before its first run.)
func testDisable(t *testing.T, c *cluster) {
	rec := &recorder{}
	for _, id := range []string{"a", "z"} {
		n := startNode(t, c.backend(t), id, e2eTTL, rec)
		n.schedule(t, "report", simba.FixedRate(20*time.Millisecond))
		n.whileLeader(t, "ingest")
	}
	since := time.Now()
	for round := range 4 {
		eventually(t, 10*time.Second, "report runs and ingest is held", func() bool {
			return len(rec.runsOf("report", since)) >= 3 && len(rec.runsOf("ingest", since)) >= 1
		})
		var returned time.Time
		for _, name := range []string{"report", "ingest"} {
			out := c.ok(t, "disable", name, "--reason", "e2e", "--timeout", "20s")
			returned = time.Now()
			if !strings.Contains(out, "disabled "+name+": nothing of it is held") {
				t.Errorf("round %d: disable %s: %s", round, name, out)
			}
		}
		time.Sleep(e2eTTL)
		for _, name := range []string{"report", "ingest"} {
			if runs := rec.runsOf(name, returned); len(runs) > 0 {
				t.Errorf("round %d: runs of %s started after disable returned: %v", round, name, runs)
			}
		}
		v := decode[leaseView](t, c.ok(t, "status", "report", "--json"))
		if v.State != "disabled" || v.Held || v.Holder != nil {
			t.Errorf("round %d: status while disabled: %+v", round, v)
		}
		since = time.Now()
		c.ok(t, "enable", "report")
		c.ok(t, "enable", "ingest")
	}
}

func testTrigger(t *testing.T, c *cluster) {
	rec := &recorder{}
	a := startNode(t, c.backend(t), "a", e2eTTL, rec)
	a.schedule(t, "nightly", simba.FixedRate(time.Hour))
	start := time.Now()
	eventually(t, 5*time.Second, "the first run of nightly is recorded", func() bool {
		v, _ := c.status(t, "nightly")
		return v.Succeeded == 1
	})
	at := time.Now()
	r := decode[opResult](t, c.ok(t, "trigger", "nightly", "--wait", "--json"))
	if !r.Waited {
		t.Errorf("trigger: %+v", r)
	}
	eventually(t, 5*time.Second, "the triggered run", func() bool { return len(rec.runsOf("nightly", at)) > 0 })
	time.Sleep(500 * time.Millisecond)
	if runs := rec.runsOf("nightly", start); len(runs) != 2 {
		t.Errorf("runs %v, want the first and the triggered one", runs)
	}
	var runs []runView
	eventually(t, 5*time.Second, "history shows the triggered run", func() bool {
		runs = runsOnly(decode[[]runView](t, c.ok(t, "history", "nightly", "--json")))
		return len(runs) == 2 && runs[1].Result == "succeeded"
	})
	if runs[0].Source != "normal" || runs[1].Source != "trigger" || runs[1].Member != "a" {
		t.Errorf("history %+v", runs)
	}
}

func testResign(t *testing.T, c *cluster) {
	rec := &recorder{}
	startNode(t, c.backend(t), "a", e2eTTL, rec).whileLeader(t, "ingest")
	eventually(t, 5*time.Second, "a leads ingest", func() bool { return len(rec.elected("ingest")) == 1 })
	startNode(t, c.backend(t), "z", e2eTTL, rec).whileLeader(t, "ingest")
	first := rec.elected("ingest")[0].Token
	eventually(t, 5*time.Second, "status shows a", func() bool {
		v, _ := c.status(t, "ingest")
		return v.Holder != nil && v.Holder.Token == first
	})
	r := decode[opResult](t, c.ok(t, "resign", "ingest", "--wait", "--timeout", "10s", "--json"))
	terms := rec.elected("ingest")
	if len(terms) < 2 {
		t.Fatalf("terms after resign: %+v", terms)
	}
	second := terms[1].Token
	if !r.Waited || r.Token != first || r.Message != fmt.Sprintf("ingest resigned: z holds it now with token %d", second) {
		t.Errorf("resign: %+v", r)
	}
	if second <= first {
		t.Errorf("token %d after %d", second, first)
	}
	v := decode[leaseView](t, c.ok(t, "status", "ingest", "--json"))
	if v.Holder == nil || v.Holder.Member != "z" || v.Holder.Token != second {
		t.Errorf("holder %+v, want z with token %d", v.Holder, second)
	}
}

func testDrain(t *testing.T, c *cluster) {
	rec := &recorder{}
	ta := startNode(t, c.backend(t), "a", e2eTTL, rec).group(t, "billing", 8)
	startNode(t, c.backend(t), "z", e2eTTL, rec).group(t, "billing", 8)
	holds := func(g groupView, id string) int {
		for _, m := range g.Members {
			if m.ID == id {
				return len(m.Holds)
			}
		}
		return -1
	}
	var g groupView
	eventually(t, 10*time.Second, "a and z share the partitions", func() bool {
		r := c.simba(t, "groups", "billing", "--json")
		if r.code != 0 {
			return false
		}
		g = decode[groupView](t, r.stdout)
		return len(g.Members) == 2 && holds(g, "a") > 0 && holds(g, "a")+holds(g, "z") == 8
	})
	t.Logf("simba groups:\n%s", c.ok(t, "groups"))
	out := c.ok(t, "drain", "a", "--wait", "--timeout", "10s")
	if out != "drained a: it holds nothing\n" {
		t.Errorf("drain: %q", out)
	}
	if p := ta.Partitions(); len(p) != 0 {
		t.Errorf("a still holds %v", p)
	}
	eventually(t, 10*time.Second, "z holds every partition", func() bool {
		g = decode[groupView](t, c.ok(t, "groups", "billing", "--json"))
		return len(g.Members) == 1 && holds(g, "z") == 8
	})
	t.Logf("simba groups after the drain:\n%s", c.ok(t, "groups"))
	c.ok(t, "undrain", "a")
	eventually(t, 10*time.Second, "a takes partitions again", func() bool {
		g = decode[groupView](t, c.ok(t, "groups", "billing", "--json"))
		return holds(g, "a") > 0 && holds(g, "a")+holds(g, "z") == 8
	})
}

// demoNode is an opsdemo process.
type demoNode struct {
	id  string
	cmd *exec.Cmd
	out *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDemo starts an opsdemo process, killed when the test ends if it
// still runs.
func (c *cluster) startDemo(t *testing.T, id string, args ...string) *demoNode {
	t.Helper()
	args = append(append([]string{"-member", id, "-ttl", e2eTTL.String()}, args...), c.demoArgs()...)
	cmd := exec.Command(c.bins.demo, args...)
	cmd.Env = cleanEnv()
	n := &demoNode{id: id, cmd: cmd, out: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = n.out, n.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		t.Logf("opsdemo %s:\n%s", id, n.out)
	})
	return n
}

// demoArgs are the cluster's flags in opsdemo's single-dash spelling.
func (c *cluster) demoArgs() []string {
	out := make([]string, len(c.args))
	for i, a := range c.args {
		out[i] = strings.TrimPrefix(a, "-")
	}
	return out
}

func testFailOver(t *testing.T, c *cluster) {
	// a's run of report is in flight when it crashes; z's runs are short,
	// so that its first one is soon in the history. A TTL of 4s, not the
	// demo's 2s: the scenario follows one term of z's, which a session
	// lost to a renewal late on a loaded machine (seen in CI, on
	// ZooKeeper: lost 2.2s after its start) would replace.
	demo := []string{"-report", "100ms", "-billing", "1h", "-partitions", "2", "-ttl", "4s"}
	nodes := map[string]*demoNode{"a": c.startDemo(t, "a", append(demo, "-work", "1m")...)}
	var v leaseView
	eventually(t, 10*time.Second, "a runs report", func() bool {
		v, _ = c.status(t, "report")
		return v.Holder != nil && v.LastRun != nil && v.LastRun.Result == "running"
	})
	nodes["z"] = c.startDemo(t, "z", append(demo, "-work", "100ms")...)
	eventually(t, 10*time.Second, "z joins", func() bool {
		r := c.simba(t, "groups", "billing", "--json")
		return r.code == 0 && len(decode[groupView](t, r.stdout).Members) == 2
	})
	v = decode[leaseView](t, c.ok(t, "status", "report", "--json"))
	crashed := v.Holder
	if crashed == nil || crashed.Member != "a" || v.LastRun == nil || v.LastRun.Result != "running" || v.LastRun.Token != crashed.Token {
		t.Fatalf("status before the crash: %+v", v)
	}
	survivor := "z"
	if err := nodes[crashed.Member].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, survivor+" takes report over", func() bool {
		v = decode[leaseView](t, c.ok(t, "status", "report", "--json"))
		return v.Holder != nil && v.Holder.Member == survivor
	})
	if v.Holder.Token <= crashed.Token {
		t.Errorf("token %d after %d", v.Holder.Token, crashed.Token)
	}
	var runs []runView
	eventually(t, 10*time.Second, "history shows the run after the fail-over", func() bool {
		runs = decode[[]runView](t, c.ok(t, "history", "report", "--json", "--limit", "0"))
		for _, r := range runs {
			if r.Token == v.Holder.Token && r.Result != "running" && r.Result != "skipped" {
				return true
			}
		}
		return false
	})
	var last, next *runView
	for i := range runs {
		switch r := &runs[i]; {
		case r.Result == "skipped":
			// Planned starts not run (the fail-over's gap, starts a
			// loaded machine's holder woke too late for): no runs.
		case r.Token == crashed.Token:
			last = r
		case r.Token == v.Holder.Token && next == nil:
			next = r
		}
	}
	if last == nil || last.Result != "interrupted" || last.Member != crashed.Member {
		t.Errorf("the crashed holder's last run: %+v", last)
	}
	if next == nil || next.Source != "fail-over" || next.Member != survivor {
		t.Errorf("the first run after the fail-over: %+v", next)
	}
	// All the slots: runs every 100ms push the two rows out of the last
	// few by the time this reads them on a loaded machine.
	out := c.ok(t, "history", "report", "--limit", "0")
	if !regexp.MustCompile(`(?m) interrupted +normal +`+crashed.Member+` `).MatchString(out) ||
		!regexp.MustCompile(`(?m) fail-over +`+survivor+` `).MatchString(out) {
		t.Errorf("history:\n%s", out)
	}
	t.Logf("simba history report:\n%s", out)
	s := nodes[survivor]
	s.cmd.Process.Signal(syscall.SIGTERM)
	eventually(t, 10*time.Second, survivor+" stops gracefully", func() bool { return strings.Contains(s.out.String(), survivor+": stopped") })
}

func testErrors(t *testing.T, c *cluster) {
	rec := &recorder{}
	startNode(t, c.backend(t), "a", e2eTTL, rec).schedule(t, "report", simba.FixedRate(time.Hour))
	eventually(t, 5*time.Second, "report is recorded", func() bool {
		return c.simba(t, "status", "report").code == 0
	})
	for _, args := range [][]string{{"history", "nosuch"}, {"trigger", "nosuch"}} {
		r := c.simba(t, args...)
		if r.code != exitFailed || !strings.Contains(r.stderr, `no such job "nosuch" (known: report)`) {
			t.Errorf("simba %s: %v", strings.Join(args, " "), r)
		}
	}
	r := runBinary(t, c.bins.simba, "history")
	if r.code != exitUsage || !strings.Contains(r.stderr, "history: missing JOB") {
		t.Errorf("simba history: %v", r)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	flag := map[string]string{"etcd": "--etcd", "zookeeper": "--zk"}[c.kind]
	start := time.Now()
	r = runBinary(t, c.bins.simba, "status", flag, closed, "--timeout", "1s")
	took := time.Since(start)
	if r.code != exitUnreachable || !strings.Contains(r.stderr, c.kind+" at "+closed) {
		t.Errorf("simba status on a closed port: %v", r)
	}
	if took > 1500*time.Millisecond {
		t.Errorf("simba status on a closed port took %v with --timeout 1s", took)
	}
}

// testDev runs simba dev, uses it, and stops it with SIGINT.
func testDev(t *testing.T, bins binaries) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			args := []string{"dev", "--port", "0", "--json"}
			if keep {
				args = append(args, "--data", filepath.Join(t.TempDir(), "etcd"))
			}
			cmd := exec.Command(bins.simba, args...)
			cmd.Env = cleanEnv()
			out, errb := &syncBuffer{}, &syncBuffer{}
			cmd.Stdout, cmd.Stderr = out, errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer func() {
				cmd.Process.Kill()
				<-exited
			}()
			var info devInfo
			eventually(t, 30*time.Second, "simba dev prints its endpoint", func() bool {
				return strings.HasSuffix(out.String(), "}\n") && decodeInto(out.String(), &info) == nil
			})
			r := runBinary(t, bins.simba, "status", "--etcd", info.Endpoint)
			if r.code != 0 || !strings.Contains(r.stdout, "backend    etcd at "+info.Endpoint) {
				t.Errorf("simba status on simba dev: %v", r)
			}
			if info.Temporary == keep {
				t.Errorf("info %+v", info)
			}
			start := time.Now()
			cmd.Process.Signal(syscall.SIGINT)
			select {
			case err := <-exited:
				exited <- err
				if err != nil {
					t.Errorf("simba dev exited: %v\n%s", err, errb)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("simba dev still runs 15s after SIGINT")
			}
			t.Logf("simba dev stopped in %v", time.Since(start))
			// A clean stop says so, and nothing else: no error of etcd's
			// listeners closing ("use of closed network connection").
			if _, stop, _ := strings.Cut(errb.String(), "simba dev: stopping etcd\n"); stop != "simba dev: stopped\n" {
				t.Errorf("stderr after SIGINT is not just \"simba dev: stopped\":\n%s", errb)
			}
			_, err := os.Stat(filepath.Join(info.Data, "member"))
			if keep && err != nil {
				t.Errorf("the data directory is gone: %v", err)
			}
			if !keep && !os.IsNotExist(err) {
				t.Errorf("the temporary data directory is left: %v", err)
			}
		})
	}
}

func decodeInto(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// testSkippedRecords plants bad records beside those of a running node:
// the command shows what it can, warns of each record skipped, and exits
// with exitProblems, not exitUnreachable.
func testSkippedRecords(t *testing.T, c *cluster) {
	rec := &recorder{}
	a := startNode(t, c.backend(t), "a", e2eTTL, rec)
	a.schedule(t, "report", simba.FixedRate(200*time.Millisecond))
	a.group(t, "billing", 2)
	eventually(t, 10*time.Second, "report and billing are held and recorded", func() bool {
		o, ok := c.overview(t)
		return ok && o.Elections.Held == 1 && o.Groups.Held == 2
	})
	plantRecords(t, c.backend(t), garbage...)
	keys := garbageKeys
	if c.putRaw != nil {
		// A key the backend refuses to write, and a status whose value
		// (after the 8 bytes of token etcd keeps in front) is not JSON.
		c.putRaw(t, "rec/status/bad key", "\x00\x00\x00\x00\x00\x00\x00\x00{}")
		c.putRaw(t, "rec/status/raw", "not valid json at all")
		keys = append(slices.Clone(keys), "status/bad key", "status/raw")
		slices.Sort(keys)
	}

	r := c.simba(t, "status")
	if r.code != exitProblems {
		t.Fatalf("simba status: %v, want exit %d", r, exitProblems)
	}
	requireWarnings(t, r, keys)
	t.Logf("simba status:\n%s%s", r.stdout, r.stderr)
	for _, want := range []string{"elections  1: 1 held, 0 disabled\n", "groups     1: 1 member, 2 partitions (2 held,", fmt.Sprintf("problems   %d records could not be used", len(keys))} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("simba status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = c.simba(t, "status", "--json")
	if r.code != exitProblems {
		t.Fatalf("simba status --json: %v", r)
	}
	o := decode[overview](t, r.stdout)
	requireProblems(t, o.Problems, keys)
	if o.Elections.Total != 1 || o.Groups.Total != 1 {
		t.Errorf("overview %+v", o)
	}
	r = c.simba(t, "history", "report", "--json")
	if r.code != exitProblems || len(decode[[]runView](t, r.stdout)) == 0 {
		t.Errorf("simba history report --json: %v", r)
	}
	requireWarnings(t, r, []string{"history/report/77"})
}

// overview returns simba status --json, or false while it fails.
func (c *cluster) overview(t *testing.T) (overview, bool) {
	t.Helper()
	r := c.simba(t, "status", "--json")
	if r.code != exitOK {
		return overview{}, false
	}
	return decode[overview](t, r.stdout), true
}
