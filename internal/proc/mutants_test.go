//go:build linux

package proc

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Tests written for the mutants that survived the package's tests in the
// mutation run of issue 44 (internal/mutate).

// TestKillRequestKillsBelowAnIgnoringCommand: Kill asks the shim to kill;
// the shim kills the command and every process below it, those in sessions
// of their own too, even when none of them dies of the request's signal
// (the command ignores SIGUSR1, and so does everything it starts).
//
// Kills the mutant internal/proc/shim_linux.go:168:4:call "startKilling()"
// → "" (the startKilling of `case <-kill:`: the shim ignores the kill
// request): Kill's fallback SIGKILL to the group ends the shim and the
// group after 2 s, and the two processes in sessions of their own live on;
// it fails with "after Kill, processes [31303 31305] of [...] still run".
// (The mutant listed as 171:4 is the startKilling of `case <-parentGone:`:
// see TestSpecEndOfFileKills.)
func TestKillRequestKillsBelowAnIgnoringCommand(t *testing.T) {
	c, ps := startIgnoring(t)
	c.Kill()
	if e := wait(t, c, "after Kill"); e != (Exit{Code: -1, Signal: syscall.SIGKILL}) {
		t.Errorf("exit = %v, want killed by SIGKILL", e)
	}
	if a := aliveOf(ps); len(a) != 0 {
		t.Fatalf("after Kill, processes %v of %v still run", a, ps)
	}
}

// TestFailedStartClosesItsPipes: a Start that fails to start the shim
// (here: its working directory does not exist) leaves no file descriptor
// open. The garbage collector is off meanwhile, so that no *os.File's
// finalizer closes a leaked one.
//
// Kills the mutant internal/proc/start_linux.go:150:3:call "specW.Close()"
// → "" (a failed start leaks the spec pipe's write end): fails with
// "20 failed starts left 20 more file descriptors open (from 11 to 31)".
func TestFailedStartClosesItsPipes(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	dir := filepath.Join(t.TempDir(), "missing")
	const n = 20
	fail := func() {
		t.Helper()
		_, err := Start(Spec{Argv: []string{"sh", "-c", "exit 0"}, Dir: dir})
		var se *StartError
		if !errors.As(err, &se) {
			t.Fatalf("Start in missing directory %s: error %v (%T), want a *StartError", dir, err, err)
		}
	}
	fail() // anything opened once and kept (the forker's thread, say) is opened now
	before := openFDs(t)
	for range n {
		fail()
	}
	after := openFDs(t)
	// A leak is one descriptor per start: n. Other goroutines may hold a
	// few more for a moment.
	if after-before >= n/2 {
		t.Fatalf("%d failed starts left %d more file descriptors open (from %d to %d)", n, after-before, before, after)
	}
	t.Logf("%d failed starts: file descriptors from %d to %d", n, before, after)
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("reading /proc/self/fd: %v", err)
	}
	return len(es)
}

// A line of /proc/PID/stat (Linux 6.x: 52 fields), with a comm that holds
// spaces and parentheses.
const statLine = "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 106 0 0 0 0 0 0 0 20 0 1 0 987654 8491008 256 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"

// TestParseStat: parseStat reads ppid, pgrp, state and starttime of a
// well-formed line, and refuses a line with any of them malformed.
//
// Kills the mutants internal/proc/shim_linux.go:303:32:|| and
// internal/proc/shim_linux.go:303:47:|| ("||" → "&&" in
// `err1 != nil || err2 != nil || err3 != nil || len(f[0]) != 1`; line 309
// since readStat's parsing became parseStat). With the first
// (`err2 != nil && err3 != nil`) a line whose starttime alone is not a
// number is accepted: fails with `parseStat("... 0 1 0 -1 8491008 ...") =
// {ppid:17 pgrp:4242 state:83 start:0}, true; want it refused`. With the
// second (`err3 != nil && len(f[0]) != 1`) so is one whose starttime or
// state alone is malformed: fails with `parseStat("... SS 17 4242 ...") =
// {ppid:17 pgrp:4242 state:83 start:987654}, true; want it refused`. Its
// seed of a starttime past 2^64-1 fails FuzzParseStat with both.
func TestParseStat(t *testing.T) {
	p, ok := parseStat([]byte(statLine))
	if want := (procStat{ppid: 17, pgrp: 4242, state: 'S', start: 987654}); !ok || p != want {
		t.Fatalf("parseStat(%q) = %+v, %v; want %+v, true", statLine, p, ok, want)
	}
	self, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := parseStat(self); !ok || p.ppid != os.Getppid() || p.pgrp != syscall.Getpgrp() {
		t.Fatalf("parseStat(%q) = %+v, %v; want ppid %d, pgrp %d", self, p, ok, os.Getppid(), syscall.Getpgrp())
	}
	field := func(n int, v string) string { // field n (3 is state) replaced by v
		i := strings.LastIndexByte(statLine, ')')
		f := strings.Fields(statLine[i+1:])
		f[n-3] = v
		return statLine[:i+1] + " " + strings.Join(f, " ") + "\n"
	}
	for _, bad := range []string{
		"",
		"4242 a S 17 4242", // no comm
		statLine[:strings.Index(statLine, " 987654")], // cut before starttime
		field(4, "x17"),     // ppid only (err1)
		field(5, "4242x"),   // pgrp only (err2)
		field(22, "-1"),     // starttime only (err3)
		field(22, "98765x"), // starttime only (err3)
		field(3, "SS"),      // state only
		strings.Replace(field(4, "1x"), "987654", "x", 1), // ppid and starttime
	} {
		if p, ok := parseStat([]byte(bad)); ok {
			t.Errorf("parseStat(%q) = %+v, true; want it refused", bad, p)
		}
	}
}

// FuzzParseStat: parseStat never panics, and accepts a line only when the
// fields it reads are what they must be (after the last ')': a one-byte
// state, then ppid and pgrp as integers, and starttime, the 22nd field, as
// an unsigned integer), returning their values.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte(statLine))
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 2 0 0 0"))
	f.Add([]byte("1 (x) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 18446744073709551616 0"))
	f.Add([]byte("7 (a)b) Z -1 +3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"))
	f.Add([]byte(")"))
	f.Add([]byte("9 (x\n) R 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 55"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, ok := parseStat(b)
		if !ok {
			return
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			t.Fatalf("parseStat(%q) accepted a line with no ')': %+v", b, p)
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 20 {
			t.Fatalf("parseStat(%q) accepted %d fields after the comm, want 20 or more: %+v", b, len(f), p)
		}
		ppid, err1 := strconv.Atoi(f[1])
		pgrp, err2 := strconv.Atoi(f[2])
		start, err3 := strconv.ParseUint(f[19], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || len(f[0]) != 1 {
			t.Fatalf("parseStat(%q) accepted state %q, ppid %q, pgrp %q, starttime %q: %+v", b, f[0], f[1], f[2], f[19], p)
		}
		if want := (procStat{ppid: ppid, pgrp: pgrp, state: f[0][0], start: start}); p != want {
			t.Fatalf("parseStat(%q) = %+v, want %+v", b, p, want)
		}
	})
}

// TestSpecEndOfFileKills: the end of file on the shim's spec pipe (fd 3)
// is the parent's death, whatever signal comes or not: the shim kills the
// command and every process below it. Here the parent closes its end while
// it lives, and sends no signal.
//
// Kills the mutant internal/proc/shim_linux.go:171:4:call "startKilling()"
// → "" (the startKilling of `case <-parentGone:`: the shim ignores its
// parent's death unless the Pdeathsig comes): fails with "the shim did not
// end within 10 s of the end of file on its spec pipe; processes [...] of
// [...] run".
func TestSpecEndOfFileKills(t *testing.T) {
	c, ps := startIgnoring(t)
	if err := c.sys.spec.Close(); err != nil {
		t.Fatalf("closing the spec pipe's write end: %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the shim did not end within 10 s of the end of file on its spec pipe; processes %v of %v run", aliveOf(ps), ps)
	}
	if e := c.Exit(); e != (Exit{Code: -1, Signal: syscall.SIGKILL}) {
		t.Errorf("exit = %v, want killed by SIGKILL", e)
	}
	if a := aliveOf(ps); len(a) != 0 {
		t.Fatalf("after the end of file on the spec pipe, processes %v of %v still run", a, ps)
	}
}

// startIgnoring starts a command that ignores SIGUSR1 and SIGTERM and
// leaves processes behind, two of them in sessions of their own, and
// returns its child and their processes (killed when the test ends, if a
// failing test left them).
func startIgnoring(t *testing.T) (*Child, []proc) {
	out := newLines()
	c := start(t, `trap '' USR1 TERM; `+leaver+`echo ready; sleep 1000`, out)
	ps := collect(t, out, 5)
	t.Cleanup(func() {
		for _, p := range ps {
			if p.alive() {
				killProc(p.pid, p.start)
			}
		}
	})
	return c, ps
}
