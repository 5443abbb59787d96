package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/backend/memory"
)

// TestRunOnceSpeaksOneFormat: simba run --once of a command that fails
// says so in the command's format only, "simba run: ..." and the final
// "simba: ..." line, the client's log record of the failed run included
// (not slog's "time=... level=ERROR msg=...").
func TestRunOnceSpeaksOneFormat(t *testing.T) {
	b := memory.New()
	defer b.Close()
	h := newHarness(t, b)
	r := h.run("run", "--election", "nightly", "--once", "--ttl", "600ms", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if r.code != 3 {
		t.Fatalf("exit %d, want the command's 3\n%v", r.code, r)
	}
	if !strings.Contains(r.stderr, "simba run: error: run failed: exit status 3 (election=nightly token=") {
		t.Errorf("the client's record of the failed run is not a line of simba run's\n%v", r)
	}
	for _, line := range strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n") {
		if line != "err" && !strings.HasPrefix(line, "simba run: ") && !strings.HasPrefix(line, "simba: ") {
			t.Errorf("a line of another format: %q\n%v", line, r)
		}
	}
}

func TestLogHandlerFormat(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	h := newLogHandler(func(s string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, s)
	}, "simba run", slog.LevelWarn)
	log := slog.New(h)
	log.Info("not shown")
	log.Warn("simba/etcd: session lost", "session", "6781a22a", "err", errors.New("simba/etcd: lease expired"), "left", 1234567*time.Microsecond)
	log.With("election", "x").WithGroup("g").Error("run failed", "reason", "two words", "empty", "", slog.Group("in", "n", 3))
	log.WithGroup("g").With("k", "v").Warn("grouped", slog.Attr{})
	want := []string{
		"simba run: warning: session lost: lease expired (session=6781a22a left=1.235s)",
		`simba run: error: run failed (election=x g.reason="two words" g.empty="" g.in.n=3)`,
		"simba run: warning: grouped (g.k=v)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if h.Enabled(context.Background(), slog.LevelInfo) {
		t.Error("Info is enabled at level Warn")
	}
}
