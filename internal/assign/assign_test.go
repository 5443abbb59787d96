package assign_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"testing/quick"

	"github.com/simba-go/simba/internal/assign"
)

var assignmentReport = flag.Bool("simba.assignment-report", false, "print balance and movement figures of the assignment variants")

// members makes n distinct member ids from r.
func memberIDs(r *rand.Rand, n int) []string {
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		id := fmt.Sprintf("m-%08x", r.Uint32())
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

type assignmentCase struct {
	Seed       uint64
	Members    uint8
	Partitions uint16
}

func (c assignmentCase) params() (string, []string, int) {
	r := rand.New(rand.NewPCG(c.Seed, 1))
	n := int(c.Members%12) + 1
	p := int(c.Partitions%300) + 1
	return fmt.Sprintf("g%d", c.Seed%7), memberIDs(r, n), p
}

var variants = []assign.Variant{assign.Rendezvous, assign.Balanced}

func TestAssignmentIsDeterministicUnderMemberOrder(t *testing.T) {
	for _, v := range variants {
		f := func(c assignmentCase) bool {
			group, ms, p := c.params()
			want := assign.Owners(group, ms, p, v)
			shuffled := slices.Clone(ms)
			rand.New(rand.NewPCG(c.Seed, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			shuffled = append(shuffled, shuffled[0]) // a duplicate counts once
			return slices.Equal(want, assign.Owners(group, shuffled, p, v))
		}
		if err := quick.Check(f, nil); err != nil {
			t.Errorf("%v: %v", v, err)
		}
	}
}

func TestAssignmentGivesEveryPartitionToAMember(t *testing.T) {
	for _, v := range variants {
		f := func(c assignmentCase) bool {
			group, ms, p := c.params()
			owners := assign.Owners(group, ms, p, v)
			if len(owners) != p {
				return false
			}
			for _, o := range owners {
				if !slices.Contains(ms, o) {
					return false
				}
			}
			return true
		}
		if err := quick.Check(f, nil); err != nil {
			t.Errorf("%v: %v", v, err)
		}
	}
}

// Adding or removing one member moves only the partitions that member gains
// or loses.
func TestRendezvousMovesTheMinimalSet(t *testing.T) {
	f := func(c assignmentCase) bool {
		group, ms, p := c.params()
		extra := memberIDs(rand.New(rand.NewPCG(c.Seed, 3)), len(ms)+1)[len(ms)]
		if slices.Contains(ms, extra) {
			return true
		}
		before := assign.Owners(group, ms, p, assign.Rendezvous)
		after := assign.Owners(group, append(slices.Clone(ms), extra), p, assign.Rendezvous)
		for i := range before {
			if before[i] != after[i] && after[i] != extra {
				return false // moved between two old members
			}
		}
		return true
	}
	if err := quick.Check(f, nil); err != nil {
		t.Error(err)
	}
}

func TestBalancedCapsEveryMember(t *testing.T) {
	f := func(c assignmentCase) bool {
		group, ms, p := c.params()
		limit := (p + len(ms) - 1) / len(ms)
		load := map[string]int{}
		for _, o := range assign.Owners(group, ms, p, assign.Balanced) {
			load[o]++
			if load[o] > limit {
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 500}); err != nil {
		t.Error(err)
	}
}

func TestAssignmentEdgeCases(t *testing.T) {
	for _, v := range variants {
		if got := assign.Owners("g", nil, 4, v); got != nil {
			t.Errorf("%v: no members: %v", v, got)
		}
		if got := assign.Owners("g", []string{"a"}, 0, v); got != nil {
			t.Errorf("%v: no partitions: %v", v, got)
		}
		if got := assign.Owners("g", []string{"a"}, 3, v); !slices.Equal(got, []string{"a", "a", "a"}) {
			t.Errorf("%v: one member: %v", v, got)
		}
	}
	// The group name salts the assignment.
	ms := []string{"a", "b", "c", "d"}
	if slices.Equal(assign.Owners("g1", ms, 64, assign.Rendezvous), assign.Owners("g2", ms, 64, assign.Rendezvous)) {
		t.Error("two groups got the same assignment")
	}
	if assign.Rendezvous.String() != "rendezvous" || assign.Balanced.String() != "balanced" || assign.Variant(9).String() != "unknown" {
		t.Error("variant names")
	}
}

// TestAssignmentReport prints the figures of docs/ASSIGNMENT.md:
//
//	go test -run TestAssignmentReport -v -args -simba.assignment-report
func TestAssignmentReport(t *testing.T) {
	if !*assignmentReport {
		t.Skip("run with -args -simba.assignment-report")
	}
	const trials = 20000
	for _, shape := range [][2]int{{3, 16}, {8, 256}, {10, 64}, {5, 1000}} {
		n, p := shape[0], shape[1]
		for _, v := range variants {
			r := rand.New(rand.NewPCG(uint64(n*1000+p), uint64(v)))
			var ratios []float64
			busy8 := 0
			var movedJoin, movedLeave, minimalJoin, minimalLeave int
			for range trials {
				ms := memberIDs(r, n+1)
				group := fmt.Sprintf("g%d", r.Uint32())
				before := assign.Owners(group, ms[:n], p, v)
				load := map[string]int{}
				maxLoad := 0
				for _, o := range before {
					load[o]++
					maxLoad = max(maxLoad, load[o])
				}
				ratios = append(ratios, float64(maxLoad)/(float64(p)/float64(n)))
				if maxLoad >= 8 {
					busy8++
				}
				joined := assign.Owners(group, ms, p, v)
				for i := range before {
					if before[i] != joined[i] {
						movedJoin++
					}
					if joined[i] == ms[n] {
						minimalJoin++
					}
				}
				left := assign.Owners(group, ms[1:n], p, v)
				for i := range before {
					if before[i] != left[i] {
						movedLeave++
					}
					if before[i] == ms[0] {
						minimalLeave++
					}
				}
			}
			sort.Float64s(ratios)
			mean := 0.0
			for _, x := range ratios {
				mean += x
			}
			mean /= float64(len(ratios))
			line := fmt.Sprintf("| %d | %d | %v | %.2f | %.2f | %.2f |", n, p, v, mean, ratios[len(ratios)*99/100], ratios[len(ratios)-1])
			if n == 3 && p == 16 {
				line += fmt.Sprintf(" busiest ≥ 8: %.1f%% |", 100*float64(busy8)/trials)
			} else {
				line += " |"
			}
			line += fmt.Sprintf(" %.2f (minimal %.2f) | %.2f (minimal %.2f) |",
				float64(movedJoin)/trials, float64(minimalJoin)/trials, float64(movedLeave)/trials, float64(minimalLeave)/trials)
			t.Log(line)
		}
	}
}

func BenchmarkPartitionAssignment(b *testing.B) {
	ms := memberIDs(rand.New(rand.NewPCG(1, 1)), 100)
	for _, v := range variants {
		b.Run(fmt.Sprintf("%v/10000x100", v), func(b *testing.B) {
			for b.Loop() {
				assign.Owners("billing", ms, 10000, v)
			}
		})
	}
}

// TestBalancedMatchesTheGreedyDefinition compares the heap-based balanced
// variant with its definition: all (member, partition) pairs sorted by
// decreasing weight, each taken when its partition is free and its member
// under ceil(P/N).
func TestBalancedMatchesTheGreedyDefinition(t *testing.T) {
	f := func(c assignmentCase) bool {
		group, ms, p := c.params()
		return slices.Equal(assign.Owners(group, ms, p, assign.Balanced), greedyBalanced(group, ms, p))
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 300}); err != nil {
		t.Error(err)
	}
}

func greedyBalanced(group string, members []string, partitions int) []string {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	type pair struct {
		w    uint64
		m, p int
	}
	var pairs []pair
	for i, m := range ms {
		for p := range partitions {
			pairs = append(pairs, pair{assign.Weight(group, m, p), i, p})
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].w != pairs[j].w {
			return pairs[i].w > pairs[j].w
		}
		return pairs[i].p < pairs[j].p
	})
	limit := (partitions + len(ms) - 1) / len(ms)
	owners := make([]string, partitions)
	load := make([]int, len(ms))
	for _, x := range pairs {
		if owners[x.p] == "" && load[x.m] < limit {
			owners[x.p] = ms[x.m]
			load[x.m]++
		}
	}
	return owners
}
