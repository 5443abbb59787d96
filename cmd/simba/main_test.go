package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/plant"
	"github.com/simba-go/simba/internal/proc"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	proc.ShimMain() // simba run's children start under a copy of this binary
	plant.ForRun()
	goleak.VerifyTestMain(m)
}
