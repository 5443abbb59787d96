package main

import (
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/etcdtest"
)

// TestRunShimShowsTheCommandInPs: the built simba binary's shim (see
// internal/proc) shows in ps as "simba run: COMMAND ARGS", named simba,
// with no test flag: -test.run=^$ is for test binaries only.
func TestRunShimShowsTheCommandInPs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the shim is Linux's")
	}
	if testing.Short() {
		t.Skip("builds the command and runs etcd")
	}
	bins := build(t)
	srv := etcdtest.Start(t)
	cmd := exec.Command(bins.simba, "run", "--etcd", strings.Join(srv.Endpoints(), ","), "--prefix", "/shim-test/",
		"--election", "ps", "--", "sleep", "1000")
	cmd.Env = cleanEnv()
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM) // ends the child: no sleep left behind
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("simba run did not exit within 30s of SIGTERM\n%s", stderr)
		}
	}()
	started := regexp.MustCompile(`started sleep \(pid \d+, process group (\d+)\)`)
	var m []string
	eventually(t, 30*time.Second, "simba run starts sleep", func() bool {
		m = started.FindStringSubmatch(stderr.String())
		return m != nil
	})
	shim := m[1] // the process group's leader is the shim
	raw, err := os.ReadFile("/proc/" + shim + "/cmdline")
	if err != nil {
		t.Fatalf("the shim's cmdline: %v\n%s", err, stderr)
	}
	if got, want := strings.ReplaceAll(strings.TrimSuffix(string(raw), "\x00"), "\x00", " "), "simba run: sleep 1000"; got != want {
		t.Errorf("ps shows the shim as %q, want %q", got, want)
	}
	comm, err := os.ReadFile("/proc/" + shim + "/comm")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(comm)); got != "simba" {
		t.Errorf("ps -e names the shim %q, want simba", got)
	}
	t.Logf("shim %s: %q", shim, raw)
}
