package records

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// TestStatusEncoderMatchesEncode: a StatusEncoder's output is Encode's,
// byte for byte, through a status's changes: its runs, terms appended,
// a term ended in place, the log emptied.
func TestStatusEncoderMatchesEncode(t *testing.T) {
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	st := Status{Lease: "billing.3", Group: "billing", Partition: 3, Holder: &Holder{Member: "n1", Token: 7}}
	var e StatusEncoder
	check := func(step string) {
		t.Helper()
		got, want := e.Encode(&st), Encode(st)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: StatusEncoder gives\n%s\nEncode gives\n%s", step, got, want)
		}
	}
	check("no terms")
	st.Terms = []Term{}
	check("an empty term log")
	st.Terms = append(st.Terms, Term{Token: 7, Member: "n1", Start: at, TTLms: 2000})
	check("a term")
	st.LastRun = &Run{Seq: 1, Token: 7, Member: "n1", Start: at, Result: "running"}
	st.HistorySeq, st.Updated = 1, at.Add(time.Second)
	check("a run, the same terms")
	st.Terms[0].End, st.Terms[0].Ended = at.Add(time.Minute), EndedMoved
	check("the term ended in place")
	st.Terms = append(st.Terms, Term{Token: 9, Member: "n2", Start: at.Add(2 * time.Minute)})
	check("another term")
	for i := range 2 * TermsLen {
		st.Terms = append(st.Terms, Term{Token: uint64(10 + i), Member: "n3", Start: at.Add(time.Duration(i) * time.Hour), Ended: "<stopped>"})
		if len(st.Terms) > TermsLen {
			st.Terms = st.Terms[1:] // the oldest dropped
		}
		check(fmt.Sprintf("term %d appended", i))
		st.Terms[len(st.Terms)-1].End = at.Add(time.Duration(i)*time.Hour + time.Minute)
		check(fmt.Sprintf("term %d ended", i))
	}
	st.Terms[3].Member = "n4"
	check("a term in the middle changed")
	st.Terms = nil
	check("the log gone")
}
