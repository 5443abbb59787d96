package etcd_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
)

// records returns s as a backend.Records.
func records(t *testing.T, s backend.Session) backend.Records {
	t.Helper()
	r, ok := s.(backend.Records)
	if !ok {
		t.Fatal("the session does not implement backend.Records")
	}
	return r
}

// TestRecordKeyLayout: a record is <prefix>rec/<key>, not bound to any
// etcd lease, its value the token in 8 bytes big-endian and the value; its
// Version is the key's mod revision; it outlives the session.
func TestRecordKeyLayout(t *testing.T) {
	srv := startServer(t)
	cli := newClient(t, srv)
	prefix := testPrefix(t)
	b := newBackend(t, srv.Endpoints(), etcd.WithPrefix(prefix))
	s := open(t, b, 5*time.Second)
	l, err := s.Acquire(op(t), "ingest")
	if err != nil {
		t.Fatal(err)
	}
	r, err := records(t, s).PutRecord(op(t), "status/ingest", []byte("v"), backend.Condition{Lease: "ingest", Token: l.Token()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(op(t)); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(op(t), prefix+"rec/status/ingest")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("record key after the session closed: %v, %v", resp, err)
	}
	kv := resp.Kvs[0]
	if kv.Lease != 0 {
		t.Errorf("record bound to etcd lease %x", kv.Lease)
	}
	if uint64(kv.ModRevision) != r.Version {
		t.Errorf("Version %d, mod revision %d", r.Version, kv.ModRevision)
	}
	if len(kv.Value) != 9 || binary.BigEndian.Uint64(kv.Value) != l.Token() || kv.Value[8] != 'v' {
		t.Errorf("stored value %x, want token %d then \"v\"", kv.Value, l.Token())
	}
}

// TestRecordTokenOrderAcrossLeases: a fenced write never replaces a record
// written with a higher token, even when the two writes are fenced by
// different leases, both held.
func TestRecordTokenOrderAcrossLeases(t *testing.T) {
	srv := startServer(t)
	b := newBackend(t, srv.Endpoints(), etcd.WithPrefix(testPrefix(t)))
	s := open(t, b, 5*time.Second)
	rs := records(t, s)
	la, err := s.Acquire(op(t), "a")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := s.Acquire(op(t), "b")
	if err != nil {
		t.Fatal(err)
	}
	fa := backend.Condition{Lease: "a", Token: la.Token()}
	fb := backend.Condition{Lease: "b", Token: lb.Token()}
	if _, err := rs.PutRecord(op(t), "k", []byte("b1"), fb); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.PutRecord(op(t), "k", []byte("a"), fa); !errors.Is(err, backend.ErrConflict) {
		t.Errorf("write with the lower token %d over token %d: %v, want ErrConflict", la.Token(), lb.Token(), err)
	}
	if err := rs.DeleteRecord(op(t), "k", fa); !errors.Is(err, backend.ErrConflict) {
		t.Errorf("delete with the lower token: %v, want ErrConflict", err)
	}
	r, err := rs.PutRecord(op(t), "k", []byte("b2"), fb)
	if err != nil {
		t.Fatalf("write with the same token: %v", err)
	}
	got, err := rs.GetRecord(op(t), "k")
	if err != nil || string(got.Value) != "b2" || got.Token != lb.Token() || got.Version != r.Version {
		t.Errorf("GetRecord = %+v, %v; want b2, token %d, version %d", got, err, lb.Token(), r.Version)
	}
	// An unfenced write replaces anything, and stores token 0.
	if r, err := rs.PutRecord(op(t), "k", []byte("free"), backend.Condition{}); err != nil || r.Token != 0 {
		t.Fatalf("unfenced write: %+v, %v", r, err)
	}
	if _, err := rs.PutRecord(op(t), "k", []byte("a"), fa); err != nil {
		t.Errorf("fenced write over token 0: %v", err)
	}
	// Fenced delete of a missing key; fences that cannot hold.
	if err := rs.DeleteRecord(op(t), "missing", fa); err != nil {
		t.Errorf("fenced delete of a missing key: %v", err)
	}
	for _, c := range []backend.Condition{
		{Lease: "a", Token: math.MaxUint64},
		{Lease: "a/b", Token: la.Token()},
		{Lease: "c", Token: la.Token()},
		{Lease: "a", Token: la.Token(), IfVersion: true, Version: math.MaxUint64},
	} {
		if _, err := rs.PutRecord(op(t), "k", nil, c); !errors.Is(err, backend.ErrConflict) {
			t.Errorf("PutRecord with %+v: %v, want ErrConflict", c, err)
		}
	}
}

// TestRecordWatchEndsWithSession: the hint channel is closed when the
// session is over.
func TestRecordWatchEndsWithSession(t *testing.T) {
	srv := startServer(t)
	b := newBackend(t, srv.Endpoints(), etcd.WithPrefix(testPrefix(t)))
	s := open(t, b, 5*time.Second)
	hints, err := records(t, s).WatchRecords(op(t), "ops/")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(op(t)); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(opTimeout)
	for {
		select {
		case _, ok := <-hints:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("record watch not closed after the session closed")
		}
	}
}
