package main

import (
	"fmt"
	"os"
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
