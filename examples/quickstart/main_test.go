package main

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/await"
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

func TestQuickstartRunsAndTellsTheStory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of real time")
	}
	var out await.Buffer
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
