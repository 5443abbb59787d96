package mysql_test

import (
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
