package kubernetes_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/kubetest"
)

func openSession(t *testing.T, b backend.Backend) backend.Session {
	t.Helper()
	// Nothing renews it: a TTL that outlasts the test's writes on a
	// loaded machine (at 2 s, TestLeaseRecordSize's session expired before
	// its last fenced write in a CI run whose apiserver took 8.5 s to
	// start).
	s, err := b.Open(t.Context(), backend.SessionOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// TestDeposedFencedWrite: a deposed holder's fenced write that read the
// lease while it held, but reaches the server after its successor was
// granted and before the successor wrote anything, is refused, and
// nothing is written (the check and the write are one compare-and-swap).
func TestDeposedFencedWrite(t *testing.T) {
	srv := kubetest.Start(t)
	b := newBackend(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	a, c := openSession(t, b), openSession(t, b)
	la, err := a.Acquire(ctx, "fw")
	if err != nil {
		t.Fatalf("Acquire by a: %v", err)
	}
	var once sync.Once
	var lc backend.Lease
	var hookErr error
	ran := false
	restore := kubernetes.SetBeforeFencedWrite(b, func() {
		once.Do(func() {
			ran = true
			// a is deposed and c granted, after a's write read the lease.
			if hookErr = la.Release(ctx); hookErr != nil {
				return
			}
			lc, hookErr = c.Acquire(ctx, "fw")
		})
	})
	defer restore()
	_, err = a.(backend.Records).PutRecord(ctx, "status/fw", []byte("stale"), backend.Condition{Lease: "fw", Token: la.Token()})
	restore()
	if !ran {
		t.Fatalf("the hook between the read and the write never ran: the test shows nothing")
	}
	if hookErr != nil {
		t.Fatalf("deposing a and granting c: %v", hookErr)
	}
	if !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("fenced PutRecord by the deposed holder after its successor's grant: %v, want ErrConflict", err)
	}
	rc := c.(backend.Records)
	if got, err := rc.GetRecord(ctx, "status/fw"); !errors.Is(err, backend.ErrNoRecord) {
		t.Fatalf("after the refused write: %+v, %v; want no record", got, err)
	}
	r, err := rc.PutRecord(ctx, "status/fw", []byte("c"), backend.Condition{Lease: "fw", Token: lc.Token()})
	if err != nil || r.Token != lc.Token() {
		t.Fatalf("fenced PutRecord by the successor: %+v, %v", r, err)
	}
	if got, err := rc.GetRecord(ctx, "status/fw"); err != nil || string(got.Value) != "c" {
		t.Fatalf("GetRecord: %q, %v; want c", got.Value, err)
	}

	// The same window for a deposed holder's delete of a record in the
	// lease's object.
	la2, err := a.Acquire(ctx, "fw2")
	if err != nil {
		t.Fatalf("Acquire fw2: %v", err)
	}
	ra := a.(backend.Records)
	if _, err := ra.PutRecord(ctx, "status/fw2", []byte("a"), backend.Condition{Lease: "fw2", Token: la2.Token()}); err != nil {
		t.Fatalf("fenced PutRecord fw2: %v", err)
	}
	var once2 sync.Once
	ran = false
	restore = kubernetes.SetBeforeFencedWrite(b, func() {
		once2.Do(func() {
			ran = true
			if hookErr = la2.Release(ctx); hookErr != nil {
				return
			}
			_, hookErr = c.Acquire(ctx, "fw2")
		})
	})
	err = ra.DeleteRecord(ctx, "status/fw2", backend.Condition{Lease: "fw2", Token: la2.Token()})
	restore()
	if !ran || hookErr != nil {
		t.Fatalf("the hook: ran %v, %v", ran, hookErr)
	}
	if !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("fenced DeleteRecord by the deposed holder: %v, want ErrConflict", err)
	}
	if got, err := rc.GetRecord(ctx, "status/fw2"); err != nil || string(got.Value) != "a" {
		t.Fatalf("after the refused delete: %q, %v; want a", got.Value, err)
	}
}

// TestLeaseRecordSize: the records fenced by one lease are bounded by
// MaxLeaseRecordBytes; past it a write is refused with an error saying so,
// and a ReleaseWithRecords past it writes nothing and keeps the lease.
func TestLeaseRecordSize(t *testing.T) {
	srv := kubetest.Start(t)
	b := newBackend(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	a := openSession(t, b)
	ra := a.(backend.Records)
	la, err := a.Acquire(ctx, "big")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	cond := backend.Condition{Lease: "big", Token: la.Token()}
	big := make([]byte, backend.MaxRecordValue)
	for _, k := range []string{"big/1", "big/2"} {
		if _, err := ra.PutRecord(ctx, k, big, cond); err != nil {
			t.Fatalf("PutRecord %s of %d bytes: %v", k, len(big), err)
		}
	}
	_, err = ra.PutRecord(ctx, "big/3", big, cond)
	if err == nil || !strings.Contains(err.Error(), "MaxLeaseRecordBytes") {
		t.Fatalf("a third record of %d bytes under one lease: %v, want an error naming MaxLeaseRecordBytes", len(big), err)
	}
	if _, err := ra.GetRecord(ctx, "big/3"); !errors.Is(err, backend.ErrNoRecord) {
		t.Fatalf("GetRecord big/3 after the refused write: %v, want ErrNoRecord", err)
	}
	// Unfenced, a large record has an object of its own.
	if _, err := ra.PutRecord(ctx, "big/unfenced", big, backend.Condition{}); err != nil {
		t.Fatalf("unfenced PutRecord of %d bytes: %v", len(big), err)
	}
	err = la.(backend.RecordReleaser).ReleaseWithRecords(ctx, []backend.Record{{Key: "big/3", Value: big}, {Key: "big/4", Value: []byte("small")}})
	if err == nil || !strings.Contains(err.Error(), "MaxLeaseRecordBytes") {
		t.Fatalf("ReleaseWithRecords past the bound: %v, want an error naming MaxLeaseRecordBytes", err)
	}
	if _, err := ra.GetRecord(ctx, "big/4"); !errors.Is(err, backend.ErrNoRecord) {
		t.Fatalf("GetRecord big/4 after the refused release: %v, want ErrNoRecord (nothing written)", err)
	}
	if _, err := ra.PutRecord(ctx, "big/1", []byte("still held"), cond); err != nil {
		t.Fatalf("fenced PutRecord after the refused release (the lease is still held): %v", err)
	}
	if err := la.(backend.RecordReleaser).ReleaseWithRecords(ctx, []backend.Record{{Key: "big/4", Value: []byte("small")}}); err != nil {
		t.Fatalf("ReleaseWithRecords: %v", err)
	}
	if got, err := ra.GetRecord(ctx, "big/4"); err != nil || string(got.Value) != "small" || got.Token != la.Token() {
		t.Fatalf("big/4 = %+v, %v", got, err)
	}
	list, err := ra.ListRecords(ctx, "big/")
	if err != nil || len(list) != 4 {
		t.Fatalf("ListRecords big/: %d records, %v; want 4", len(list), err)
	}
}

// TestRecordMoves: a key has one copy, where it was last written: an
// unfenced record moves into the lease's object on a fenced write (its
// record object goes), an unfenced write replaces a fenced record in place,
// and a write fenced by another lease moves it there.
func TestRecordMoves(t *testing.T) {
	srv := kubetest.Start(t)
	b := newBackend(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	a := openSession(t, b)
	ra := a.(backend.Records)
	leases := b.Client().CoordinationV1().Leases(b.Namespace())
	// copies counts the objects holding the key: its record object and the
	// lease objects labelled with it.
	copies := func(key string) int {
		t.Helper()
		list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=simba"})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		n := 0
		for _, l := range list.Items {
			if l.Annotations["simba.io/key"] == key {
				n++
			}
			for k, v := range l.Annotations {
				if strings.HasPrefix(k, "r.simba.io/") && strings.Contains(v, `"k":"`+key+`"`) {
					n++
				}
			}
		}
		return n
	}
	want := func(what, key, value string, token uint64) {
		t.Helper()
		got, err := ra.GetRecord(ctx, key)
		if err != nil || string(got.Value) != value || got.Token != token {
			t.Fatalf("%s: %s = %q token %d, %v; want %q token %d", what, key, got.Value, got.Token, err, value, token)
		}
		if n := copies(key); n != 1 {
			t.Fatalf("%s: %d stored copies of %s, want 1", what, n, key)
		}
	}
	if _, err := ra.PutRecord(ctx, "mv/k", []byte("plain"), backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	want("unfenced", "mv/k", "plain", 0)
	l1, err := a.Acquire(ctx, "mv-one")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ra.PutRecord(ctx, "mv/k", []byte("one"), backend.Condition{Lease: "mv-one", Token: l1.Token()}); err != nil {
		t.Fatal(err)
	}
	want("fenced by mv-one", "mv/k", "one", l1.Token())
	r, err := ra.PutRecord(ctx, "mv/k", []byte("plain again"), backend.Condition{})
	if err != nil {
		t.Fatal(err)
	}
	want("unfenced over a fenced record", "mv/k", "plain again", 0)
	l2, err := a.Acquire(ctx, "mv-two")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ra.PutRecord(ctx, "mv/k", []byte("two"), backend.Condition{Lease: "mv-two", Token: l2.Token(), IfVersion: true, Version: r.Version}); err != nil {
		t.Fatal(err)
	}
	want("fenced by mv-two", "mv/k", "two", l2.Token())
	list, err := ra.ListRecords(ctx, "mv/")
	if err != nil || len(list) != 1 || string(list[0].Value) != "two" {
		t.Fatalf("ListRecords mv/: %+v, %v; want one record, two", list, err)
	}
	if err := ra.DeleteRecord(ctx, "mv/k", backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ra.GetRecord(ctx, "mv/k"); !errors.Is(err, backend.ErrNoRecord) || copies("mv/k") != 0 {
		t.Fatalf("after DeleteRecord: %v, %d copies; want ErrNoRecord, none", err, copies("mv/k"))
	}
}
