package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/synctest"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/plant"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	if name := os.Getenv("SIMBA_PLANT"); name != "" {
		if _, err := plant.Set(name); err != nil {
			fmt.Fprintln(os.Stderr, "SIMBA_PLANT:", err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "SIMBA_PLANT: bug %q planted for the whole run\n", name)
	}
	goleak.VerifyTestMain(m)
}

// TestStreamRunsAndTellsTheStory runs the example in a bubble: virtual
// time, so it takes well under a second.
func TestStreamRunsAndTellsTheStory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out strings.Builder
		if err := run(&out); err != nil {
			t.Log("\n" + out.String())
			t.Fatal(err)
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
