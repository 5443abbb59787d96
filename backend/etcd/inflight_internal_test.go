package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/limit"
	"github.com/simba-go/simba/internal/etcdtest"
)

// unsentKV fails the test if a request reaches it.
type unsentKV struct {
	clientv3.KV
	t *testing.T
}

func (k unsentKV) Txn(context.Context) clientv3.Txn { return unsentTxn{t: k.t} }

func (k unsentKV) Get(context.Context, string, ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	k.t.Error("a request was sent")
	return nil, errors.New("sent")
}

type unsentTxn struct {
	clientv3.Txn
	t *testing.T
}

func (x unsentTxn) Commit() (*clientv3.TxnResponse, error) {
	x.t.Error("a transaction was sent")
	return nil, errors.New("sent")
}

// TestRequestNotSentIsMarked: a request that ends while it waits for a
// slot, or as the slot comes, reports limit.ErrNotSent (Acquire then has nothing
// to undo), and still wraps its context's error.
func TestRequestNotSentIsMarked(t *testing.T) {
	lim, err := limit.New(1)
	if err != nil {
		t.Fatal(err)
	}
	k := newLimitedKV(unsentKV{t: t}, lim)
	if err := k.lim.Take(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = k.Txn(ctx).Commit()
	if !errors.Is(err, limit.ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Commit waiting for a slot: %v", err)
	}
	k.lim.Free()

	// A slot is free, but ctx has ended: send nothing either.
	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := k.Get(done, "k"); !errors.Is(err, limit.ErrNotSent) || !errors.Is(err, context.Canceled) {
		t.Errorf("Get with an ended ctx: %v", err)
	}
	if k.lim.InUse() != 0 {
		t.Errorf("%d slots taken after requests that were not sent", k.lim.InUse())
	}
}

// TestMembershipGoesAroundTheBound: with every request slot taken (by
// thousands of Acquires and status writes, say), a group's membership
// requests and the list of held leases still go out; an Acquire waits,
// and ends unsent with its ctx.
func TestMembershipGoesAroundTheBound(t *testing.T) {
	srv := etcdtest.Start(t)
	b, err := New(srv.Endpoints(), WithPrefix("/bound/"), WithMaxRequests(1))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bs, err := b.Open(t.Context(), backend.SessionOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := bs.(*session)
	if err := b.kv.lim.Take(t.Context()); err != nil { // the only slot
		t.Fatal(err)
	}
	defer b.kv.lim.Free()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := s.Join(ctx, "g", backend.Member{ID: "m"}); err != nil {
		t.Errorf("Join: %v", err)
	}
	if ms, err := s.Members(ctx, "g"); err != nil || len(ms) != 1 {
		t.Errorf("Members: %v, %v", ms, err)
	}
	if _, err := s.HeldLeases(ctx, "g."); err != nil {
		t.Errorf("HeldLeases: %v", err)
	}
	if err := s.Leave(ctx, "g"); err != nil {
		t.Errorf("Leave: %v", err)
	}
	short, stop := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer stop()
	if _, err := s.Acquire(short, "g.0"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire without a slot: %v", err)
	}
	s.Close(t.Context())
}
