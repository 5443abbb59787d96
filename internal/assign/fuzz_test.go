package assign_test

import (
	"strings"
	"testing"

	"github.com/simba-go/simba/internal/assign"
)

// FuzzAssignment: any members and count give an owner per partition among
// the members, the same for any order, within the cap for Balanced.
func FuzzAssignment(f *testing.F) {
	f.Add("billing", "a,b,c", 16, false)
	f.Add("g", "x", 1, true)
	f.Add("", "", 0, false)
	f.Add("g", "a,a,b,,c", 7, true)
	f.Add("billing", "n1,n2,n3,n4,n5,n6,n7,n8", 256, true)
	f.Fuzz(func(t *testing.T, group, members string, partitions int, balanced bool) {
		if partitions > 4096 {
			partitions %= 4096
		}
		v := assign.Rendezvous
		if balanced {
			v = assign.Balanced
		}
		ms := strings.Split(members, ",")
		owners := assign.Owners(group, ms, partitions, v)
		if partitions <= 0 {
			if owners != nil {
				t.Fatalf("%d partitions: %v", partitions, owners)
			}
			return
		}
		if len(owners) != partitions {
			t.Fatalf("%d owners for %d partitions", len(owners), partitions)
		}
		distinct := map[string]bool{}
		for _, m := range ms {
			distinct[m] = true
		}
		load := map[string]int{}
		for _, o := range owners {
			if !distinct[o] {
				t.Fatalf("owner %q is not a member", o)
			}
			load[o]++
		}
		if limit := (partitions + len(distinct) - 1) / len(distinct); balanced {
			for m, n := range load {
				if n > limit {
					t.Fatalf("%q has %d > %d partitions", m, n, limit)
				}
			}
		}
		reversed := make([]string, len(ms))
		for i, m := range ms {
			reversed[len(ms)-1-i] = m
		}
		again := assign.Owners(group, reversed, partitions, v)
		for p := range owners {
			if owners[p] != again[p] {
				t.Fatalf("partition %d: %q, or %q with the members reversed", p, owners[p], again[p])
			}
		}
	})
}
