package simba

import (
	"testing"

	"github.com/simba-go/simba/internal/plant"
)

// PlantBug switches on a deliberate safety bug for the test that calls it
// (see plant.ForTest: it needs -tags simba_plant). Tests that plant bugs
// must not run in parallel.
func PlantBug(t testing.TB, name string) {
	t.Helper()
	plant.ForTest(t, name)
}
