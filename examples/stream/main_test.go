package main

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
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

// runBound bounds the example's run, in virtual time: it takes seconds.
const runBound = 10 * time.Minute

// TestStreamRunsAndTellsTheStory runs the example in a bubble: virtual
// time, so it takes well under a second.
func TestStreamRunsAndTellsTheStory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out await.Buffer
		done := make(chan error, 1)
		go func() { done <- run(&out) }()
		select {
		case err := <-done:
			if err != nil {
				t.Log("\n" + out.String())
				t.Fatal(err)
			}
		case <-time.After(runBound):
			// The run's goroutines would keep the bubble alive for ever:
			// end the test binary, saying why, rather than hang.
			panic(fmt.Sprintf("%s: the example did not finish within %v of virtual time; its output so far:\n%s", t.Name(), runBound, out.String()))
		}
		t.Log("\n" + out.String())
		for _, want := range []string{
			"crashes holding partitions",
			"over at checkpoint",
			"every message of every partition has been processed",
			"every message processed at least once: true",
			"in order per partition, within every one of",
			"checkpoints never moved backwards: true",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q", want)
			}
		}
	})
}
