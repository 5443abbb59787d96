package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/plant"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	plant.ForRun()
	goleak.VerifyTestMain(m)
}

func TestPoliciesStory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of real time")
	}
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		"attempt 1 timed out: simba: run timed out",
		"attempt 2 timed out: simba: run timed out",
		"notified: export failed after 2 attempts (2 failed runs in a row): simba: run timed out after 300ms",
		"export paused itself after 2 failed runs in a row",
		"planned start(s) skipped (paused)",
		"export ran for day 2026-12-05 (trigger, token 2)",
		"] done",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
