package consoletest

import (
	"fmt"
	"time"

	"github.com/simba-go/simba/admin"
)

// PartTerms are the terms of one partition, in order.
type PartTerms struct {
	Index int
	Terms []admin.Term
}

// GroupSnapshot makes group g of partitions with the terms given; the last
// term of each partition holds if it has no end.
func GroupSnapshot(g string, parts ...PartTerms) admin.Snapshot {
	var snap admin.Snapshot
	for _, pt := range parts {
		st := admin.Status{Lease: fmt.Sprintf("%s.%d", g, pt.Index), Group: g, Partition: pt.Index, Terms: pt.Terms}
		held := false
		if n := len(pt.Terms); n > 0 && pt.Terms[n-1].End.IsZero() {
			last := pt.Terms[n-1]
			st.Holder = &admin.Holder{Member: last.Member, Token: last.Token, Since: last.Start}
			held = true
		}
		snap.Elections = append(snap.Elections, admin.Election{Name: st.Lease, Status: st, Held: held})
	}
	snap.Groups = []admin.Group{{Name: g}}
	return snap
}

// BigGroup is a group "big" of n partitions with terms terms each, in the
// hour before now, each ended by a hand-off or a fail-over but the last,
// held.
func BigGroup(now time.Time, n, terms int) admin.Snapshot {
	members := []string{"node-a", "node-b", "node-c", "node-d", "node-e"}
	parts := make([]PartTerms, n)
	step := time.Hour / time.Duration(terms+1)
	for i := range parts {
		ts := make([]admin.Term, terms)
		for j := range ts {
			start := now.Add(-time.Hour).Add(time.Duration(j) * step).Add(time.Duration(i) * time.Millisecond)
			ts[j] = admin.Term{Token: uint64(j + 1), Member: members[(i+j)%len(members)], Start: start, TTLms: 3000}
			if j < terms-1 {
				ts[j].End = start.Add(step - 100*time.Millisecond)
				ts[j].Ended = []string{"moved", admin.EndedFailOver, "member drained"}[j%3]
			}
		}
		parts[i] = PartTerms{Index: i, Terms: ts}
	}
	return GroupSnapshot("big", parts...)
}
