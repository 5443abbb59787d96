package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

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

func TestQuickstartRunsAndTellsTheStory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of real time")
	}
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
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
