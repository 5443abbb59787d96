package records

import (
	"bytes"
	"fmt"
	"slices"
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

// TestMergeTerms: the lease's terms from its log and its status: each
// once, the entry that says how it ended winning, by token, the last
// TermsLen.
func TestMergeTerms(t *testing.T) {
	open := func(tok uint64) Term { return Term{Token: tok, Member: "n"} }
	ended := func(tok uint64, how string) Term { return Term{Token: tok, Member: "n", Ended: how} }
	tokens := func(ts []Term) (out []uint64) {
		for _, t := range ts {
			out = append(out, t.Token)
		}
		return out
	}
	got := MergeTerms([]Term{ended(1, "stopped"), open(3)}, []Term{ended(3, "resigned"), open(7)})
	if want := []Term{ended(1, "stopped"), ended(3, "resigned"), open(7)}; !slices.Equal(got, want) {
		t.Errorf("the status's end of a term the log has open: got %+v, want %+v", got, want)
	}
	got = MergeTerms([]Term{ended(3, EndedFailOver)}, []Term{open(3)})
	if want := []Term{ended(3, EndedFailOver)}; !slices.Equal(got, want) {
		t.Errorf("an open term in the status does not undo the log's end: got %+v, want %+v", got, want)
	}
	got = MergeTerms(nil, []Term{open(5), ended(2, "stopped")})
	if want := []uint64{2, 5}; !slices.Equal(tokens(got), want) {
		t.Errorf("by token: got %v, want %v", tokens(got), want)
	}
	var log, st []Term
	for i := range uint64(TermsLen) {
		log = append(log, ended(i+1, "stopped"))
	}
	st = []Term{ended(TermsLen, "moved"), open(TermsLen + 1)}
	got = MergeTerms(log, st)
	if len(got) != TermsLen || got[0].Token != 2 || got[TermsLen-2].Ended != "moved" || got[TermsLen-1] != open(TermsLen+1) {
		t.Errorf("past TermsLen: the oldest dropped: got %+v", got)
	}
	if len(log) != TermsLen || log[TermsLen-1].Ended != "stopped" {
		t.Errorf("MergeTerms changed its argument: %+v", log[TermsLen-1])
	}
}
