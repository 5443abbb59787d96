package sigstop

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestStop: a child process has every thread stopped when Stop returns,
// and is no longer stopped after SIGCONT.
func TestStop(t *testing.T) {
	testPause(t, func(cmd *exec.Cmd) error { return Stop(cmd.Process.Pid, 5*time.Second) })
}

func TestSignal(t *testing.T) {
	testPause(t, func(cmd *exec.Cmd) error { return Signal(cmd.Process, syscall.SIGSTOP) })
}

func TestKill(t *testing.T) {
	testPause(t, func(cmd *exec.Cmd) error { return Kill(cmd.Process.Pid, syscall.SIGSTOP) })
}

func testPause(t *testing.T, pause func(*exec.Cmd) error) {
	if runtime.GOOS != "linux" {
		t.Skip("threads are read from /proc")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	if n, err := Running(cmd.Process.Pid); err != nil || n == 0 {
		t.Fatalf("before the pause: %d threads running, %v; want some", n, err)
	}
	if err := pause(cmd); err != nil {
		t.Fatal(err)
	}
	if n, err := Running(cmd.Process.Pid); err != nil || n != 0 {
		t.Fatalf("after Stop: %d threads running, %v; want none", n, err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if n, err := Running(cmd.Process.Pid); err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process did not run again within 5s of SIGCONT")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStopped(t *testing.T) {
	for line, want := range map[string]bool{
		"12 (java) T 1 12":    true,
		"12 (a (b) c) t 1":    true,
		"12 (sleep) S 1 12":   false,
		"12 (x) R 1":          false,
		"12 (gone) Z 1":       true,
		"garbage":             false,
		"12 (weird) ) R 1 (T": false,
	} {
		if got := stopped(line); got != want {
			t.Errorf("stopped(%q) = %v, want %v", line, got, want)
		}
	}
}

func TestStopRefused(t *testing.T) {
	if err := Stop(1<<30, time.Second); err == nil {
		t.Error("Stop of a process that does not exist: no error")
	}
}
