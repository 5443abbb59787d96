package sigstop

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Stop sends SIGSTOP to process pid and waits until each of its threads is
// stopped (or gone), for at most timeout. Where /proc does not list the
// process's threads (not Linux), it returns once the signal is sent.
func Stop(pid int, timeout time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("sigstop: SIGSTOP to process %d: %w", pid, err)
	}
	return wait(pid, timeout)
}

// wait waits until each thread of process pid is stopped or gone, for at
// most timeout.
func wait(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		running, err := Running(pid)
		if err != nil || running == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sigstop: process %d: %d of its threads still running %v after SIGSTOP", pid, running, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// Timeout is how long Kill and Signal wait for a process to stop.
const Timeout = 10 * time.Second

// Kill sends sig to process pid; for SIGSTOP it returns once the process
// is stopped (within Timeout).
func Kill(pid int, sig syscall.Signal) error {
	if sig == syscall.SIGSTOP {
		return Stop(pid, Timeout)
	}
	return syscall.Kill(pid, sig)
}

// Signal is Kill for a process started by the caller, signalled through
// its handle (which does not signal a process that has been waited for).
func Signal(p *os.Process, sig syscall.Signal) error {
	if err := p.Signal(sig); err != nil {
		return err
	}
	if sig == syscall.SIGSTOP {
		return wait(p.Pid, Timeout)
	}
	return nil
}

// Running returns how many threads of process pid are neither stopped nor
// dead, by /proc/<pid>/task/*/stat; 0 when /proc does not list them.
func Running(pid int) (int, error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return 0, err
	}
	n := 0
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited
		}
		if err != nil {
			return 0, fmt.Errorf("sigstop: %w", err)
		}
		if !stopped(string(b)) {
			n++
		}
	}
	return n, nil
}

// stopped reports whether a /proc stat line ("tid (comm) state …", where
// comm may hold spaces and parentheses) shows a stopped or dead thread.
func stopped(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(stat[i+1:])
	if len(f) == 0 {
		return false
	}
	switch f[0] {
	case "T", "t", "Z", "X", "x":
		return true
	}
	return false
}
