package simba

import "github.com/simba-go/simba/internal/plant"

// runPlant is the bug planted for the whole test run by PlantForRun, ""
// for none.
var runPlant string

// PlantForRun plants the bug called name (see internal/plant) for the whole
// test run; TestMain calls it with $SIMBA_PLANT before any test runs. An
// unknown name is an error.
func PlantForRun(name string) error {
	if _, err := plant.Set(name); err != nil {
		return err
	}
	runPlant = name
	return nil
}

// PlantBug switches on a deliberate safety bug (see internal/plant) for the
// test that calls it, and puts back the bug planted for the run (none, but
// under $SIMBA_PLANT) when the test ends. Tests that plant bugs must not run
// in parallel.
func PlantBug(t interface {
	Cleanup(func())
	Fatal(...any)
}, name string) {
	if _, err := plant.Set(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plant.Set(runPlant) })
}

// RendezvousWeight exposes the weight of member m for partition p of group.
func RendezvousWeight(group, m string, p int) uint64 { return weight(memberSeed(group, m), p) }
