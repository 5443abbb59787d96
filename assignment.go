package simba

import "github.com/simba-go/simba/internal/assign"

// AssignmentVariant chooses how a partition group spreads its partitions
// over its members. Every member of a group must use the same variant.
type AssignmentVariant int

const (
	// AssignRendezvous gives each partition to the member with the highest
	// rendezvous weight for it. Adding or removing one member moves only the
	// partitions that member gains or loses, but the load is uneven: with 16
	// partitions over 3 members the busiest often has 8 or more.
	AssignRendezvous AssignmentVariant = iota
	// AssignBalanced caps every member at ceil(partitions/members): partitions
	// are handed out in order of decreasing rendezvous weight to members
	// still under the cap. It moves a few more partitions than Rendezvous
	// when members come and go, and never piles them on one member.
	AssignBalanced
)

// String returns "rendezvous" or "balanced".
func (v AssignmentVariant) String() string { return assign.Variant(v).String() }
