package handoffbench

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// BusyEnv, set to a number n, has [Busy] start n busy loops beside a
// benchmark: processes of their own that spin on a core each, as other
// work on a loaded machine does.
const BusyEnv = "SIMBA_BENCH_BUSY"

// Busy starts the busy loops $SIMBA_BENCH_BUSY asks for (none if it is
// unset or 0), stops them when t ends, and returns a sentence for the
// report saying what ran alongside and the load average.
func Busy(t testing.TB) string {
	n, err := strconv.Atoi(os.Getenv(BusyEnv))
	if os.Getenv(BusyEnv) != "" && (err != nil || n < 0) {
		t.Fatalf("%s=%q: want a number of busy loops", BusyEnv, os.Getenv(BusyEnv))
	}
	for range n {
		cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting a busy loop: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	if n == 0 {
		return "No busy loop alongside (" + BusyEnv + " unset)."
	}
	return fmt.Sprintf("%d busy loops alongside (%s=%d: processes spinning on a core each).", n, BusyEnv, n)
}

// LoadAverage is the first three fields of /proc/loadavg, or "unknown".
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
