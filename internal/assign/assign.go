// Package assign computes the assignment of a partition group's
// partitions to its members: a pure function of the group's name, its
// members and its partition count, which every member (simba's groups) and
// every reader (admin, the command, the console, the tests) computes alike.
package assign

import (
	"cmp"
	"slices"
)

// Variant is an assignment rule; simba.AssignmentVariant names them for
// users (WithAssignment), with the same values.
type Variant int

const (
	// Rendezvous gives each partition to the member with the highest
	// rendezvous weight for it.
	Rendezvous Variant = iota
	// Balanced caps every member at ceil(partitions/members), handing
	// partitions out in order of decreasing rendezvous weight.
	Balanced
)

// String returns "rendezvous" or "balanced".
func (v Variant) String() string {
	switch v {
	case Rendezvous:
		return "rendezvous"
	case Balanced:
		return "balanced"
	}
	return "unknown"
}

// Owners returns the owner of each of the partitions of group
// among members: owners[p] is a member id. It is a pure function of its
// arguments: every node computes the same answer from the same members, in
// any order (duplicates count once). It returns nil when partitions ≤ 0 or
// there are no members.
//
// The weight of member m for partition p is a 64-bit hash of (group, m, p),
// so the group name salts the assignment: two groups with the same members
// do not put the same partition numbers on the same member.
func Owners(group string, members []string, partitions int, v Variant) []string {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	if partitions <= 0 || len(ms) == 0 {
		return nil
	}
	seeds := make([]uint64, len(ms))
	for i, m := range ms {
		seeds[i] = memberSeed(group, m)
	}
	owners := make([]string, partitions)
	if v != Balanced || len(ms) == 1 {
		for p := range owners {
			best := 0
			bestW := weight(seeds[0], p)
			for i := 1; i < len(ms); i++ {
				if w := weight(seeds[i], p); w > bestW {
					best, bestW = i, w
				}
			}
			owners[p] = ms[best]
		}
		return owners
	}
	return balanced(ms, seeds, owners)
}

// balanced gives partitions out in order of decreasing weight over all
// (member, partition) pairs, each to a member still under ceil(P/N): the
// first pair taken is the heaviest of all, the next the heaviest left whose
// partition is free and whose member is under the cap, and so on.
//
// Rather than sorting all P×N pairs it keeps, for every free partition, its
// heaviest pair among members not yet full, in a max-heap; a popped pair
// whose member filled up meanwhile is replaced by the partition's next best.
// Members only ever fill up, so this takes the pairs in the same order.
func balanced(ms []string, seeds []uint64, owners []string) []string {
	partitions := len(owners)
	limit := (partitions + len(ms) - 1) / len(ms)
	load := make([]int, len(ms))
	best := func(p int) candidate {
		c := candidate{p: int32(p), m: -1}
		for i := range ms {
			if load[i] >= limit {
				continue
			}
			if w := weight(seeds[i], p); c.m < 0 || w > c.w {
				c.w, c.m = w, int32(i)
			}
		}
		return c
	}
	h := make(candidateHeap, 0, partitions)
	for p := range partitions {
		h = append(h, best(p))
	}
	h.init()
	for len(h) > 0 {
		c := h[0]
		if load[c.m] >= limit {
			h[0] = best(int(c.p))
			h.down(0)
			continue
		}
		owners[c.p] = ms[c.m]
		load[c.m]++
		h.pop()
	}
	return owners
}

// candidate is a (member, partition) pair and its weight.
type candidate struct {
	w    uint64
	p, m int32
}

// before orders candidates: heavier first, then by partition.
func (a candidate) before(b candidate) bool {
	if a.w != b.w {
		return a.w > b.w
	}
	return a.p < b.p
}

// candidateHeap is a max-heap of candidates by weight.
type candidateHeap []candidate

func (h candidateHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h candidateHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		j := l
		if r := l + 1; r < len(h) && h[r].before(h[l]) {
			j = r
		}
		if !h[j].before(h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

func (h *candidateHeap) pop() {
	old := *h
	n := len(old) - 1
	old[0] = old[n]
	*h = old[:n]
	h.down(0)
}

// Order returns members ordered by decreasing weight for partition
// p: the owner under Rendezvous first, then the next in line.
func Order(group string, members []string, p int) []string {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	w := make(map[string]uint64, len(ms))
	for _, m := range ms {
		w[m] = weight(memberSeed(group, m), p)
	}
	slices.SortStableFunc(ms, func(a, b string) int { return cmp.Compare(w[b], w[a]) })
	return ms
}

// memberSeed hashes (group, member) with FNV-1a, then mixes it.
func memberSeed(group, member string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(group); i++ {
		h = (h ^ uint64(group[i])) * prime
	}
	h = (h ^ 0xff) * prime // separator no name can contain
	for i := 0; i < len(member); i++ {
		h = (h ^ uint64(member[i])) * prime
	}
	return mix64(h)
}

// weight is the rendezvous weight of the member with the given seed for
// partition p.
func weight(seed uint64, p int) uint64 {
	return mix64(seed ^ (uint64(p)+1)*0x9e3779b97f4a7c15)
}

// mix64 is the SplitMix64 finaliser: every input bit affects every output
// bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Weight is the rendezvous weight of member m for partition p of group.
func Weight(group, m string, p int) uint64 { return weight(memberSeed(group, m), p) }
