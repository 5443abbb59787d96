package simba

import "github.com/simba-go/simba/internal/plant"

// PlantBug switches on a deliberate safety bug (see internal/plant) for the
// test that calls it, and puts back the bug planted for the run (none, but
// under $SIMBA_PLANT) when the test ends. Tests that plant bugs must not run
// in parallel.
func PlantBug(t interface {
	Cleanup(func())
	Fatal(...any)
}, name string) {
	undo, err := plant.Set(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(undo)
}

// RendezvousWeight exposes the weight of member m for partition p of group.
func RendezvousWeight(group, m string, p int) uint64 { return weight(memberSeed(group, m), p) }
