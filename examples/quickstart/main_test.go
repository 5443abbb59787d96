package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/plant"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	plant.ForRun()
	goleak.VerifyTestMain(m)
}

// runBound bounds the example's run: it takes a few seconds.
const runBound = time.Minute

// syncBuilder is a strings.Builder safe for a writer and a reader on other
// goroutines: the test reads what a run that did not finish has written.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestQuickstartRunsAndTellsTheStory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of real time")
	}
	var out syncBuilder
	done := make(chan error, 1)
	go func() { done <- run(&out) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(runBound):
		// The run's goroutines are left behind, for goleak to report.
		t.Fatalf("the example did not finish within %v; its output so far:\n%s", runBound, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		`alpha won the election "ingest"`,
		"alpha stops its task",
		"took over",
		"crashes",
		"one leader at a time",
		"all nodes closed",
		"rejected 0 stale ones",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
