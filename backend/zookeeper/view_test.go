package zookeeper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
)

// TestViewAfterSessionExpired cuts a view off from the server for longer
// than its session's timeout: its watch ends, its calls fail while cut
// off, and once the link is back it reads again, on a new session, what a
// session wrote meanwhile, and creates nothing under the root.
func TestViewAfterSessionExpired(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	p, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	writer := newBackendAt(t, addr, root)
	reader := newBackendAt(t, p.Addr(), root)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := writer.Open(ctx, backend.SessionOptions{TTL: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	rec := s.(backend.Records)
	if _, err := rec.PutRecord(ctx, "st/a", []byte("before"), backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	v, err := reader.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if r, err := v.GetRecord(ctx, "st/a"); err != nil || string(r.Value) != "before" {
		t.Fatalf("View.GetRecord before the cut: %q, %v", r.Value, err)
	}
	hints, err := v.WatchRecords(ctx, "st/")
	if err != nil {
		t.Fatal(err)
	}

	p.Blackhole()
	// The test server grants at most 4s; the server expires the view's
	// session then, unheard from.
	cut, cancelCut := context.WithTimeout(ctx, 2*time.Second)
	_, err = v.GetRecord(cut, "st/a")
	cancelCut()
	if err == nil {
		t.Error("View.GetRecord while cut off: no error")
	}
	if errors.Is(err, backend.ErrSessionDone) {
		t.Errorf("View.GetRecord while cut off: error %v wraps ErrSessionDone; a view's errors are transient", err)
	}
	if _, err := rec.PutRecord(ctx, "st/a", []byte("during"), backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second) // past the largest session timeout the server grants
	p.Heal()

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for range hints {
		}
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the view's watch was not closed within 30s of the link's return, although its session expired")
	}
	var got backend.Record
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err = v.GetRecord(ctx, "st/a")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || string(got.Value) != "during" {
		t.Fatalf("View.GetRecord within 30s of the link's return: %q, %v; want what was written during the cut", got.Value, err)
	}
	if _, err := v.WatchRecords(ctx, "st/"); err != nil {
		t.Errorf("View.WatchRecords after the return: %v", err)
	}
	nodes, err := zktest.Snapshot(addr, root)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if owner, ok := n.Ephemeral(); ok {
			t.Errorf("a znode owned by session %016x under the root: %s (the view creates none, the writer joined nothing)", uint64(owner), n)
		}
	}
}

// TestViewIdleKeepsItsSession: a view left idle for longer than the
// largest session timeout the server grants keeps its session (it renews
// it, as the backend's connections send no pings): its watch is still
// open and hints.
func TestViewIdleKeepsItsSession(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	v, err := b.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	hints, err := v.WatchRecords(ctx, "st/")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(9 * time.Second) // over twice the largest timeout the test server grants
	s, err := b.Open(ctx, backend.SessionOptions{TTL: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.(backend.Records).PutRecord(ctx, "st/a", []byte("a"), backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-hints:
		if !ok {
			t.Fatal("the idle view's watch was closed: its session expired")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no hint on the idle view's watch within 30s of a write")
	}
}
