package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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
// slot, or as the slot comes, reports errNotSent (Acquire then has nothing
// to undo), and still wraps its context's error.
func TestRequestNotSentIsMarked(t *testing.T) {
	k := newLimitedKV(unsentKV{t: t}, 1)
	if err := k.take(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := k.Txn(ctx).Commit()
	if !errors.Is(err, errNotSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Commit waiting for a slot: %v", err)
	}
	k.free()

	// A slot is free, but ctx has ended: send nothing either.
	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := k.Get(done, "k"); !errors.Is(err, errNotSent) || !errors.Is(err, context.Canceled) {
		t.Errorf("Get with an ended ctx: %v", err)
	}
	if len(k.slots) != 0 {
		t.Errorf("%d slots taken after requests that were not sent", len(k.slots))
	}
}
