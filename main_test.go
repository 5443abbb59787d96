package simba_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/plant"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests. With
// a bug planted, the tests that depend on what it breaks must fail with a
// message, and none may hang.
func TestMain(m *testing.M) {
	plant.ForRun()
	goleak.VerifyTestMain(m)
}
