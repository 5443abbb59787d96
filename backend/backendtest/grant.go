package backendtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
)

// GrantSnapshot checks a backend whose leases list records at their grant
// (backend.GrantSnapshot; the PostgreSQL and MySQL backends): a session
// opened with SessionOptions.GrantRecords gets leases whose
// RecordsAtGrant lists the records under that prefix as the queue read
// that granted them saw them: every record the holder wrote before its
// release is there, at the version the write returned, round after round;
// another prefix, or a session opened without it, lists nothing. (The
// core checks a term's start against this listing instead of reading the
// operations itself.)
func GrantSnapshot(t *testing.T, b backend.Backend) {
	t.Helper()
	ctx := t.Context()
	openWith := func(prefix string) backend.Session {
		s, err := b.Open(ctx, backend.SessionOptions{TTL: 30 * time.Second, GrantRecords: prefix})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		return s
	}
	holder, waiter, plain := openWith("ops/"), openWith("ops/"), openWith("")
	want := map[string]backend.Record{}
	for round := range 4 {
		held, err := holder.Acquire(ctx, "q")
		if err != nil {
			t.Fatal(err)
		}
		a := AcquireAsync(ctx, waiter, "q")
		WaitCandidates(t, holder, "q", 2)
		key := fmt.Sprintf("ops/disabled/r%d", round)
		r, err := holder.(backend.Records).PutRecord(ctx, key, []byte(key), backend.Condition{})
		if err != nil {
			t.Fatal(err)
		}
		want[key] = r
		if _, err := holder.(backend.Records).PutRecord(ctx, "status/q", []byte("s"), backend.Condition{}); err != nil {
			t.Fatal(err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		got := <-a
		if got.Err != nil {
			t.Fatal(got.Err)
		}
		gs, ok := got.Lease.(backend.GrantSnapshot)
		if !ok {
			t.Fatalf("the lease %T is no backend.GrantSnapshot", got.Lease)
		}
		list, ok := gs.RecordsAtGrant("ops/")
		if !ok {
			t.Fatalf("round %d: the waiter's lease lists no records at its grant", round)
		}
		if len(list) != len(want) {
			t.Fatalf("round %d: records at the grant %v, want the %d written before the release", round, list, len(want))
		}
		for i, r := range list {
			w, ok := want[r.Key]
			if !ok || string(r.Value) != string(w.Value) || r.Version != w.Version || r.Token != w.Token {
				t.Errorf("round %d: record at the grant %+v, want %+v", round, r, w)
			}
			if i > 0 && list[i-1].Key >= r.Key {
				t.Errorf("round %d: records at the grant not sorted by key: %q before %q", round, list[i-1].Key, r.Key)
			}
		}
		if _, ok := gs.RecordsAtGrant("status/"); ok {
			t.Errorf("round %d: the lease lists records under status/ at its grant", round)
		}
		if err := got.Lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l, err := plain.Acquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if gs, ok := l.(backend.GrantSnapshot); ok {
		if _, ok := gs.RecordsAtGrant("ops/"); ok {
			t.Error("a session opened without GrantRecords lists records at its grants")
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// WaitCandidates waits, up to 10s, until name has n candidacies on s (a
// backend.CandidateLister).
func WaitCandidates(t *testing.T, s backend.Session, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q, err := s.(backend.CandidateLister).Candidates(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if len(q) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("candidates of %q: %v, want %d", name, q, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
