//go:build unix

package main

import (
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/simba-go/simba/jobs"
)

// watchedWriter is a writer safe for concurrent use that reports when its
// text first contains a string.
type watchedWriter struct {
	mu   sync.Mutex
	b    strings.Builder
	want string
	seen chan struct{}
}

func (w *watchedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if w.seen != nil && strings.Contains(w.b.String(), w.want) {
		close(w.seen)
		w.seen = nil
	}
	return len(p), nil
}

func (w *watchedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// The program shuts down cleanly on SIGINT: the signal reaches the test
// process, whose runMain has it registered with signal.NotifyContext.
func TestJobsStopOnSIGINT(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a few seconds of real time")
	}
	unsetEnv(t, jobs.EnabledEnv)
	seen := make(chan struct{})
	out := &watchedWriter{want: "bravo: jobs started", seen: seen}
	var errs strings.Builder
	exit := make(chan int, 1)
	go func() { exit <- runMain([]string{"-for", "1m"}, out, &errs) }()
	select {
	case <-seen:
	case <-time.After(30 * time.Second):
		t.Fatalf("bravo did not start:\n%s", out.String())
	}
	// runMain registered SIGINT before it printed anything.
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("exit status %d: %s", code, errs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit 30s after SIGINT:\n%s", out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"shutting down (signal received)", "alpha: Run returned; leases alpha holds now: 0", "bravo: Run returned; leases bravo holds now: 0", "runs of one job on two nodes at once: 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
