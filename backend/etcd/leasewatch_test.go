package etcd_test

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
)

// TestSharedWatchTellsEachHoldingAlone: with one watch for all of a
// session's holdings, a key deleted or overwritten by another writer ends
// its holding, and only it.
func TestSharedWatchTellsEachHoldingAlone(t *testing.T) {
	srv := startServer(t)
	cli := newClient(t, srv)
	prefix := testPrefix(t)
	b := newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix))
	s := open(t, b, 10*time.Second)
	var leases []backend.Lease
	for i := range 50 {
		l, err := s.Acquire(op(t), fmt.Sprintf("p%d", i))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	// Another writer deletes p3 and rebinds p7 to no etcd lease.
	if _, err := cli.Delete(op(t), prefix+"lease/p3/"+s.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(op(t), prefix+"lease/p7/"+s.ID(), s.ID()); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{3, 7} {
		if !waitFor(leases[i].Lost(), opTimeout) {
			t.Errorf("p%d: Lost not closed", i)
		}
	}
	// A release of p5 and a new holding of p9 by this session end nothing
	// else; the holding of p9 it replaces is lost.
	if err := leases[5].Release(op(t)); err != nil {
		t.Fatal(err)
	}
	p9, err := s.Acquire(op(t), "p9")
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(leases[9].Lost(), opTimeout) {
		t.Error("p9: the replaced holding's Lost not closed")
	}
	time.Sleep(100 * time.Millisecond) // time for a wrong event to arrive
	for i, l := range leases {
		if i != 3 && i != 7 && i != 9 && closed(l.Lost()) {
			t.Errorf("p%d: Lost closed", i)
		}
	}
	if closed(p9.Lost()) {
		t.Error("the new holding of p9: Lost closed")
	}
	if err := s.Close(op(t)); err != nil {
		t.Fatal(err)
	}
	for i, l := range leases {
		if i != 5 && !waitFor(l.Lost(), opTimeout) {
			t.Errorf("p%d: Lost not closed when the session closed", i)
		}
	}
	if closed(leases[5].Lost()) {
		t.Error("p5: Lost closed after its own Release")
	}
}

// TestSharedWatchResyncsAfterCompaction: while the client is cut off, a
// held key is deleted and the history compacted past it, so the watch
// cannot resume where it was; the session reads the lease keys again and
// the deleted key's holding learns of its loss, the others not.
func TestSharedWatchResyncsAfterCompaction(t *testing.T) {
	srv := startServer(t)
	cli := newClient(t, srv)
	prefix := testPrefix(t)
	px := newProxy(t, srv.Endpoints()[0])
	b := newBackend(t, []string{px.Addr()}, etcd.WithPrefix(prefix))
	s := open(t, b, 10*time.Second)
	x, err := s.Acquire(op(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	y, err := s.Acquire(op(t), "y")
	if err != nil {
		t.Fatal(err)
	}
	px.Refuse()
	if _, err := cli.Delete(op(t), prefix+"lease/x/"+s.ID()); err != nil {
		t.Fatal(err)
	}
	put, err := cli.Put(op(t), prefix+"other", "1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(op(t), put.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	px.Accept()
	if !waitFor(x.Lost(), opTimeout) {
		t.Fatal("x: Lost not closed after the resync")
	}
	if closed(y.Lost()) {
		t.Error("y: Lost closed")
	}
	if err := y.Release(op(t)); err != nil {
		t.Errorf("y: Release after the resync: %v", err)
	}
}
