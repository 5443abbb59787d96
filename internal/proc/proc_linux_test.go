package proc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lines is an output sink that is not an *os.File (so os/exec copies into
// it through a pipe) and hands on every complete line.
type lines struct {
	mu   sync.Mutex
	buf  []byte
	all  strings.Builder
	ch   chan string
	once sync.Once
}

func newLines() *lines { return &lines{ch: make(chan string, 1000)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		l.ch <- string(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}

// next is the next line, within a generous bound.
func (l *lines) next(t *testing.T, what string) string {
	t.Helper()
	select {
	case s := <-l.ch:
		return s
	case <-time.After(20 * time.Second):
		t.Fatalf("no line (%s) within 20 s; output so far: %q", what, l.String())
		return ""
	}
}

// wait waits for the child to be reaped, within a generous bound.
func wait(t *testing.T, c *Child, what string) Exit {
	t.Helper()
	select {
	case <-c.Done():
		return c.Exit()
	case <-time.After(30 * time.Second):
		c.Kill()
		t.Fatalf("%s: the child did not end within 30 s", what)
		return Exit{}
	}
}

func start(t *testing.T, script string, out io.Writer) *Child {
	t.Helper()
	c, err := Start(Spec{Argv: []string{"sh", "-c", script}, Env: os.Environ(), Stdout: out, Stderr: out})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		select {
		case <-c.Done():
		default:
			c.Kill()
			<-c.Done()
		}
	})
	return c
}

func TestExitCode(t *testing.T) {
	c := start(t, "exit 3", nil)
	e := wait(t, c, "exit 3")
	if e != (Exit{Code: 3}) {
		t.Fatalf("exit = %+v, want exit status 3", e)
	}
	var ee *ExitError
	if err := e.Err(); !errors.As(err, &ee) || ee.ExitCode() != 3 || err.Error() != "exit status 3" {
		t.Fatalf("Err() = %v, want an *ExitError with ExitCode 3", err)
	}
	if e := wait(t, start(t, "exit 0", nil), "exit 0"); e.Err() != nil {
		t.Fatalf("exit 0: Err() = %v", e.Err())
	}
}

// TestSignals: a command ended by a signal is reported as ended by that
// signal (the shim raises it on itself), for SIGTERM from Terminate and for
// signals sent to the command alone, including one whose Go runtime default
// is not to die of it (SIGQUIT).
func TestSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGKILL, syscall.SIGUSR1, syscall.SIGSEGV} {
		t.Run(signalName(sig), func(t *testing.T) {
			out := newLines()
			c := start(t, "echo $$; exec sleep 1000", out)
			pid, _ := strconv.Atoi(out.next(t, "the command's pid"))
			if sig == syscall.SIGTERM {
				c.Terminate()
			} else if err := syscall.Kill(pid, sig); err != nil {
				t.Fatalf("kill %d: %v", pid, err)
			}
			e := wait(t, c, "signalled")
			if e != (Exit{Code: -1, Signal: sig}) {
				t.Fatalf("exit = %v (%+v), want killed by signal %s", e, e, signalName(sig))
			}
			var ee *ExitError
			if !errors.As(e.Err(), &ee) || ee.ExitCode() != -1 {
				t.Fatalf("Err() = %v, want an *ExitError with ExitCode -1", e.Err())
			}
		})
	}
}

func TestStopTrapped(t *testing.T) {
	out := newLines()
	c := start(t, `trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.1; done`, out)
	out.next(t, "ready")
	e := c.Stop(time.Now().Add(30 * time.Second))
	if e.Err() != nil {
		t.Fatalf("Stop = %v, want exit status 0 (the trap ran: it was not killed); output %q", e, out.String())
	}
	if !strings.Contains(out.String(), "bye") {
		t.Fatalf("output %q, want the trap's bye", out.String())
	}
}

// TestStopIgnoring: a command that ignores SIGTERM is killed at killAt, by
// the shim (well before Kill's own fallback two seconds later).
func TestStopIgnoring(t *testing.T) {
	out := newLines()
	c := start(t, `trap '' TERM; echo ready; while :; do sleep 1; done`, out)
	out.next(t, "ready")
	killAt := time.Now().Add(time.Second)
	e := c.Stop(killAt)
	returned := time.Now()
	if e != (Exit{Code: -1, Signal: syscall.SIGKILL}) {
		t.Fatalf("Stop = %v, want killed by SIGKILL", e)
	}
	if returned.Before(killAt) {
		t.Fatalf("Stop returned %v before killAt", killAt.Sub(returned))
	}
	if late := returned.Sub(killAt); late >= killBound {
		t.Fatalf("Stop returned %v after killAt: the shim did not kill the command, Kill's fallback did", late)
	}
	t.Logf("Stop returned %v after killAt", returned.Sub(killAt))
}

// TestKill: Kill ends a command that ignores SIGTERM, without a Terminate.
func TestKill(t *testing.T) {
	out := newLines()
	c := start(t, `trap '' TERM; echo ready; sleep 1000`, out)
	out.next(t, "ready")
	c.Kill()
	if e := wait(t, c, "after Kill"); e.Signal != syscall.SIGKILL {
		t.Fatalf("exit = %v, want killed by SIGKILL", e)
	}
}

// TestKillReportsTheKill kills a command that waits for a child of its
// own and exits 0 when it has gone: the status must be the kill, every
// time. Killed below it first, the command would see its child die and
// report exit 0 of its own (it did, 3 times in 200).
func TestKillReportsTheKill(t *testing.T) {
	for i := range 50 {
		out := newLines()
		c := start(t, `trap '' TERM; sleep 1000 & echo ready; wait; exit 0`, out)
		out.next(t, "ready")
		c.Kill()
		if e := wait(t, c, "after Kill"); e.Signal != syscall.SIGKILL {
			t.Fatalf("kill %d: exit = %v, want killed by SIGKILL", i+1, e)
		}
	}
}

// leaver starts four processes that stay behind: one in the group, one in a
// session of its own, one double-forked into a session of its own (its
// parent exits at once, so it is reparented), and one double-forked in the
// group; it prints "pid N" for each and for itself, then "ready", then runs
// tail (a command).
const leaver = `
sleep 1000 & echo "pid $!"
setsid sh -c 'echo "pid $$"; exec sleep 1000' &
(setsid sh -c 'echo "pid $$"; exec sleep 1000' &)
(sh -c 'echo "pid $$"; exec sleep 1000' &)
echo "pid $$"
`

// collect reads n "pid N" lines and then "ready" (in any order: the
// background processes print when they run).
func collect(t *testing.T, out *lines, n int) []proc {
	t.Helper()
	var ps []proc
	ready := false
	for len(ps) < n || !ready {
		s := out.next(t, fmt.Sprintf("pids (%d of %d so far)", len(ps), n))
		if s == "ready" {
			ready = true
			continue
		}
		f := strings.Fields(s)
		if len(f) != 2 || (f[0] != "pid" && f[0] != "shim") {
			t.Fatalf("unexpected line %q", s)
		}
		pid, _ := strconv.Atoi(f[1])
		p, ok := readStat(pid)
		if !ok || p.state == 'Z' {
			t.Fatalf("%s is not running when it says it is", s)
		}
		ps = append(ps, proc{pid, p.start})
	}
	return ps
}

type proc struct {
	pid   int
	start uint64
}

// alive is whether the process still exists (a zombie does not count: it
// has ended, and only its parent's wait is missing).
func (p proc) alive() bool {
	s, ok := readStat(p.pid)
	return ok && s.start == p.start && s.state != 'Z' && s.state != 'X'
}

func aliveOf(ps []proc) []int {
	var a []int
	for _, p := range ps {
		if p.alive() {
			a = append(a, p.pid)
		}
	}
	sort.Ints(a)
	return a
}

func TestNoGrandchildAfterStop(t *testing.T) {
	out := newLines()
	c := start(t, leaver+"echo ready; sleep 1000", out)
	ps := collect(t, out, 5)
	c.Stop(time.Now().Add(10 * time.Second))
	if a := aliveOf(ps); len(a) != 0 {
		t.Fatalf("after Stop, processes %v of %v still run", a, ps)
	}
}

func TestNoGrandchildAfterExit(t *testing.T) {
	dir := t.TempDir()
	out := newLines()
	c := start(t, leaver+`echo ready; while [ ! -e `+dir+`/go ]; do sleep 0.05; done; exit 7`, out)
	ps := collect(t, out, 5)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if e := wait(t, c, "exit by itself"); e != (Exit{Code: 7}) {
		t.Fatalf("exit = %v, want exit status 7 (the command's)", e)
	}
	if a := aliveOf(ps); len(a) != 0 {
		t.Fatalf("after the command exited, processes %v of %v still run", a, ps)
	}
}

// TestParentKilled: the simba run stand-in (this binary in the parent role)
// is killed with SIGKILL; its shim, the command and every grandchild end.
func TestParentKilled(t *testing.T) {
	out := newLines()
	parent := exec.Command("/proc/self/exe")
	parent.Env = append(os.Environ(), roleEnv+"=parent", "SIMBA_PROC_TEST_SCRIPT="+leaver+"echo ready; sleep 1000")
	parent.Stdout, parent.Stderr = out, out
	parent.WaitDelay = 10 * time.Second
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	ps := collect(t, out, 6) // the shim's too
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := parent.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("parent: %v, want killed", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a := aliveOf(ps); len(a) != 0; a = aliveOf(ps) {
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the parent was killed, processes %v of %v still run", a, ps)
		}
		time.Sleep(10 * time.Millisecond) // polling the processes, with a deadline
	}
}

func TestCannotRun(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(plain, []byte("echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(garbage, []byte("\x7fELF\x00\x01garbage"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv0 string
		err   error
	}{
		{"no-such-command-simba", exec.ErrNotFound},
		{filepath.Join(dir, "missing"), syscall.ENOENT},
		{dir, syscall.EISDIR},
		{plain, syscall.EACCES},
		{garbage, syscall.ENOEXEC}, // found by the shim's exec, not before
	} {
		t.Run(filepath.Base(tc.argv0), func(t *testing.T) {
			stderr := newLines()
			c, err := Start(Spec{Argv: []string{tc.argv0}, Stderr: stderr})
			var se *StartError
			if !errors.As(err, &se) || c != nil {
				t.Fatalf("Start = %v, %v; want a *StartError", c, err)
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.argv0) {
				t.Fatalf("Start: %v; want %v, naming %s", err, tc.err, tc.argv0)
			}
			if s := stderr.String(); s != "" {
				t.Fatalf("stderr %q, want nothing (the error is Start's)", s)
			}
			if kids := children(t); len(kids) != 0 {
				t.Fatalf("after the failed Start, this process has children %v", kids)
			}
		})
	}
	if err := Check(nil); err == nil {
		t.Fatal("Check(nil) = nil")
	}
}

// children are the live processes whose parent is this one.
func children(t *testing.T) []int {
	var kids []int
	for pid, p := range scanProcs() {
		if p.ppid == os.Getpid() && p.state != 'Z' {
			kids = append(kids, pid)
		}
	}
	return kids
}

func TestOutput(t *testing.T) {
	var stdout, stderr lines
	stdout.ch, stderr.ch = make(chan string, 10), make(chan string, 10)
	c, err := Start(Spec{Argv: []string{"sh", "-c", `echo "out $FOO"; echo err >&2; pwd`},
		Env: []string{"FOO=bar"}, Dir: "/", Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	if e := wait(t, c, "output"); e.Err() != nil {
		t.Fatal(e)
	}
	if stdout.String() != "out bar\n/\n" || stderr.String() != "err\n" {
		t.Fatalf("stdout %q, stderr %q; want %q, %q", stdout.String(), stderr.String(), "out bar\n/\n", "err\n")
	}
}

// TestEnvOnly: the command gets Spec.Env and nothing else (no trace of the
// shim's marker).
func TestEnvOnly(t *testing.T) {
	out := newLines()
	c, err := Start(Spec{Argv: []string{"/usr/bin/env"}, Env: []string{"A=1"}, Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, c, "env")
	if got := out.String(); got != "A=1\n" {
		t.Fatalf("env %q, want %q", got, "A=1\n")
	}
}

// TestConcurrent: several children at once share the forker; all end.
func TestConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Start(Spec{Argv: []string{"sh", "-c", fmt.Sprintf("exit %d", i)}})
			if err != nil {
				errs <- err
				return
			}
			select {
			case <-c.Done():
				if c.Exit().Code != i {
					errs <- fmt.Errorf("child %d: %v", i, c.Exit())
				}
			case <-time.After(30 * time.Second):
				c.Kill()
				errs <- fmt.Errorf("child %d did not end", i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestShimCost measures (and logs; it asserts nothing about time) how long
// the command takes to print its first line through the shim, against
// os/exec directly, and the shim's resident memory.
func TestShimCost(t *testing.T) {
	const n = 10
	var viaShim, direct []time.Duration
	for range n {
		out := newLines()
		t0 := time.Now()
		c := start(t, "echo hi", out)
		out.next(t, "hi")
		viaShim = append(viaShim, time.Since(t0))
		wait(t, c, "echo")

		cmd := exec.Command("sh", "-c", "echo hi")
		pr, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		t0 = time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(pr).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		direct = append(direct, time.Since(t0))
		_ = cmd.Wait()
	}
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	c := start(t, "sleep 1000", nil)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	var rss []string
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmRSS:") || strings.HasPrefix(l, "RssAnon:") || strings.HasPrefix(l, "RssFile:") {
			rss = append(rss, strings.Join(strings.Fields(l), " "))
		}
	}
	t.Logf("first output after Start: median %v through the shim, %v with os/exec alone (%d runs); shim %s (this test binary)",
		med(viaShim), med(direct), n, strings.Join(rss, ", "))
}

func TestGuarantee(t *testing.T) {
	if g := Guarantee(); !strings.Contains(g, "SIGKILL") || !strings.HasSuffix(g, ".") {
		t.Fatalf("Guarantee() = %q, want one sentence about SIGKILL", g)
	}
}

// TestCommandPid: the command's own pid, below the shim, in its group.
func TestCommandPid(t *testing.T) {
	out := newLines()
	c := start(t, `echo "pid $$"; echo ready; sleep 1000`, out)
	got := out.next(t, "the command's pid")
	out.next(t, "ready")
	if want := fmt.Sprintf("pid %d", c.CommandPid()); got != want {
		t.Errorf("the command says %q, CommandPid %d", got, c.CommandPid())
	}
	if c.CommandPid() == c.Pid() {
		t.Errorf("CommandPid %d is the shim's", c.CommandPid())
	}
	c.Kill()
	wait(t, c, "after Kill")
}

// TestShimShowsWhatItRuns: ps shows the shim as "simba run:" and the
// command's argv, a test flag only in a test binary (this one), and names
// it after its executable, not "exe". cmd/simba's
// TestRunShimShowsTheCommandInPs checks the production binary's argv.
func TestShimShowsWhatItRuns(t *testing.T) {
	argv := []string{"sh", "-c", "echo ready; sleep 1000"}
	if got, want := strings.Join(shimArgs(argv, false), " "), "simba run: sh -c echo ready; sleep 1000"; got != want {
		t.Errorf("a production binary's shim argv is %q, want %q", got, want)
	}
	if !isTestBinary() {
		t.Fatal("isTestBinary is false in a test binary: its shims would lack the guard")
	}
	out := newLines()
	c := start(t, "echo ready; sleep 1000", out)
	defer func() {
		c.Kill()
		wait(t, c, "after Kill")
	}()
	out.next(t, "ready")
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c.Pid()))
	if err != nil {
		t.Fatalf("the shim's cmdline: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	if want := shimArgs(argv, true); !slices.Equal(got, want) {
		t.Errorf("the shim's argv is %q, want %q", got, want)
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.Pid()))
	if err != nil {
		t.Fatalf("the shim's comm: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Base(exe)
	if len(want) > maxComm {
		want = want[:maxComm]
	}
	if got := strings.TrimSpace(string(comm)); got != want {
		t.Errorf("the shim is named %q in ps -e, want its executable's name %q", got, want)
	}
}
