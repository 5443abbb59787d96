package proc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ShimMain runs the shim when this process was started as one by [Start],
// and never returns then; otherwise it returns at once. Call it first thing
// in main, and in TestMain of a test package that starts children through
// this package: Start re-executes the running executable as the shim.
//
// The process is a shim when its environment holds SIMBA_PROC_SHIM=1 (and
// nothing of the command's: the command's environment is sent on a pipe)
// and its argv[0] is "simba run:" (see shimArgs). It names itself after
// its executable ("simba", rather than the "exe" of /proc/self/exe), so
// that ps and top show the shim as what it is.
func ShimMain() {
	if os.Getenv(shimEnv) != "1" || len(os.Args) < 1 || os.Args[0] != shimArg0 {
		return
	}
	nameAfterExecutable()
	// The command's Pdeathsig belongs to the thread that forks it: the
	// main goroutine, locked to this thread until os.Exit.
	runtime.LockOSThread()
	os.Exit(shim())
}

// nameAfterExecutable sets the process's name (its comm, which ps -e and
// top show) to its executable's file name: a process started through
// /proc/self/exe is named "exe" otherwise. The name is cut to the 15 bytes
// the kernel keeps. A failure leaves the name as it was.
func nameAfterExecutable() {
	exe, err := os.Executable()
	if err != nil {
		return
	}
	name := filepath.Base(exe)
	if len(name) > maxComm {
		name = name[:maxComm]
	}
	// /proc/self/comm is the main thread's, whatever thread writes it.
	_ = os.WriteFile("/proc/self/comm", []byte(name), 0)
}

// maxComm is the longest process name the kernel keeps (TASK_COMM_LEN
// less its NUL).
const maxComm = 15

// shim starts the command, reaps everything it is given, kills every
// descendant once the command has exited, when the parent asks or when the
// parent is gone, and returns (or raises) the command's status.
func shim() int {
	kill := make(chan os.Signal, 1)
	signal.Notify(kill, killSignal)
	// Signals meant for the command, as the group's: it got them too.
	// Caught (not ignored), they are back to their defaults in the
	// command.
	ignored := make(chan os.Signal, 16)
	signal.Notify(ignored, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
		syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGPIPE)

	// fd 3 and 4 come without close-on-exec: the command must not get them.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	specF, resF := os.NewFile(3, "simba-proc-spec"), os.NewFile(4, "simba-proc-result")
	var sp shimSpec
	if err := json.NewDecoder(specF).Decode(&sp); err != nil {
		fmt.Fprintf(os.Stderr, "simba: proc shim: reading what to run: %v\n", err)
		return 127
	}
	// Every orphaned descendant of the command is reparented to the
	// shim, not to init. (Linux 3.4 and later; without it the walk of
	// /proc still finds the descendants whose ancestors live.)
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	if os.Getppid() != sp.Parent {
		return 1 // the parent died before the Pdeathsig took effect
	}
	pid, err := syscall.ForkExec(sp.Path, sp.Argv, &syscall.ProcAttr{
		Env:   sp.Env,
		Files: []uintptr{0, 1, 2},
		// Should the shim be killed with SIGKILL, the command dies too.
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		r := shimResult{Err: err.Error()}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			r.Errno = int(errno)
		}
		if json.NewEncoder(resF).Encode(r) != nil {
			fmt.Fprintf(os.Stderr, "simba: cannot run %s: %v\n", sp.Argv[0], err)
		}
		return 127
	}
	parentGone := make(chan struct{})
	if json.NewEncoder(resF).Encode(shimResult{Pid: pid}) != nil {
		close(parentGone)
	} else {
		go func() {
			_, _ = io.Copy(io.Discard, specF) // end of file: the parent is gone
			close(parentGone)
		}()
	}
	resF.Close()

	reaped := make(chan reap) // unbuffered: the command's reap comes before noChild
	noChild := make(chan struct{})
	go reapAll(reaped, noChild)

	var (
		status  unix.WaitStatus
		exited  bool // the command has been reaped
		killing bool
		tick    <-chan time.Time
		giveUp  <-chan time.Time
	)
	startKilling := func() {
		if !killing {
			killing = true
			tick = time.NewTicker(10 * time.Millisecond).C
			giveUp = time.After(giveUpBound)
		}
		// The command first: killed below it first, a command that waits
		// for its children would see them die and exit by itself, and
		// report a status of its own rather than the kill.
		if !exited {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		killDescendants()
	}
	for {
		select {
		case r := <-reaped:
			if r.pid == pid {
				status, exited = r.status, true
				startKilling()
			} else if killing {
				killDescendants()
			}
		case <-noChild:
			return exitLike(status)
		case <-giveUp:
			// Only a process this one may not signal (another user's)
			// lives this long after SIGKILL, or one in uninterruptible
			// sleep, which dies when it wakes: the command's status must
			// not wait for them.
			left := killDescendants()
			fmt.Fprintf(os.Stderr, "simba: proc shim: %d processes below the command still run %v after SIGKILL: %v\n", len(left), giveUpBound, left)
			if !exited {
				status = unix.WaitStatus(unix.SIGKILL) // a status: killed by SIGKILL
			}
			return exitLike(status)
		case <-kill:
			startKilling()
		case <-parentGone:
			parentGone = nil
			startKilling()
		case <-tick:
			killDescendants()
		case <-ignored:
		}
	}
}

// giveUpBound is how long the shim goes on killing before it exits all the
// same, leaving what it could not kill.
const giveUpBound = 5 * time.Second

type reap struct {
	pid    int
	status unix.WaitStatus
}

// reapAll reaps every child of the shim until it has none: the command has
// exited then, and every descendant with it (they are all reparented to the
// shim when their parents die).
func reapAll(reaped chan<- reap, noChild chan<- struct{}) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case err == nil:
			reaped <- reap{pid, ws}
		case errors.Is(err, unix.EINTR):
		default: // ECHILD
			close(noChild)
			return
		}
	}
}

// exitLike returns the command's exit code, or raises the signal that
// ended it on the shim itself, so that the parent sees the same status.
func exitLike(ws unix.WaitStatus) int {
	if !ws.Signaled() {
		return ws.ExitStatus()
	}
	sig := ws.Signal()
	// The default disposition, not the Go runtime's (which prints
	// goroutines for SIGQUIT); no core file of the shim.
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	var act [8]uint64 // a struct sigaction of zeros: SIG_DFL, no flags, empty mask
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); e == unix.EINVAL {
		unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 16, 0, 0) // mips' sigset_t
	}
	_ = unix.Kill(os.Getpid(), sig)
	time.Sleep(time.Second) // the signal is on its way
	return 128 + int(sig)
}

// killDescendants sends SIGKILL to every process below the shim and every
// other member of its process group, and returns their pids: one pass over
// /proc. Descendants that
// fork meanwhile leave children that the next pass finds (the shim is their
// subreaper).
func killDescendants() (left []int) {
	self, group := os.Getpid(), unix.Getpgrp()
	procs := scanProcs()
	below := map[int]bool{self: true}
	var isBelow func(pid int, depth int) bool
	isBelow = func(pid int, depth int) bool {
		if v, ok := below[pid]; ok {
			return v
		}
		p, ok := procs[pid]
		if !ok || depth > len(procs) {
			return false
		}
		v := isBelow(p.ppid, depth+1)
		below[pid] = v
		return v
	}
	for pid, p := range procs {
		if pid == self || p.state == 'Z' || p.state == 'X' {
			continue
		}
		if p.pgrp == group || isBelow(pid, 0) {
			killProc(pid, p.start)
			left = append(left, pid)
		}
	}
	return left
}

type procStat struct {
	ppid, pgrp int
	state      byte
	start      uint64 // start time since boot, in clock ticks
}

func scanProcs() map[int]procStat {
	procs := map[int]procStat{}
	d, err := os.Open("/proc")
	if err != nil {
		return procs
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, ok := readStat(pid); ok {
			procs[pid] = p
		}
	}
	return procs
}

// readStat reads /proc/PID/stat: "pid (comm) state ppid pgrp session ..."
// with starttime the 22nd field; comm may hold spaces and parentheses.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseStat(b)
}

// parseStat parses the text of a /proc/PID/stat file; it refuses one that
// does not have that shape.
func parseStat(b []byte) (procStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3, state
	if len(f) < 20 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	start, err3 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || len(f[0]) != 1 {
		return procStat{}, false
	}
	return procStat{ppid: ppid, pgrp: pgrp, state: f[0][0], start: start}, true
}

// killProc sends SIGKILL to pid if it is still the process that started at
// start: through a pidfd, checked after it is opened, so that a pid reused
// since the scan is never hit.
func killProc(pid int, start uint64) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) { // before Linux 5.3
		_ = unix.Kill(pid, unix.SIGKILL)
		return
	}
	if err != nil {
		return // gone
	}
	defer unix.Close(fd)
	if p, ok := readStat(pid); ok && p.start == start {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}
