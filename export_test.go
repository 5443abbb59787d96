package simba

// PlantBug switches on a deliberate safety bug for the test that calls it,
// and switches it off again when the test ends. Tests that plant bugs must
// not run in parallel.
func PlantBug(t interface{ Cleanup(func()) }, name string) {
	switch name {
	case "deadline-from-reply":
		plantedBug = plantDeadlineFromReply
	case "no-margin":
		plantedBug = plantNoMargin
	case "requested-ttl":
		plantedBug = plantRequestedTTL
	default:
		panic("unknown planted bug " + name)
	}
	t.Cleanup(func() { plantedBug = plantNone })
}

// RendezvousWeight exposes the weight of member m for partition p of group.
func RendezvousWeight(group, m string, p int) uint64 { return weight(memberSeed(group, m), p) }
