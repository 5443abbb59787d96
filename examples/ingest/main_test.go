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

func TestIngestRejectsThePausedLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of real time")
	}
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		"east leads ingest with token 1",
		"froze",
		"west leads ingest with token 2",
		"the sink refused the write: simba/fence: stale token 1",
		"each once and in order",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
