package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend/kit/limit"
)

// limitedKV is the client's KV with a bound on the requests in flight (see
// backend/kit/limit): a request waits for a slot (or for its ctx) before
// it is sent; one that ended while it waited reports limit.ErrNotSent.
//
// Why: a client that starts ten thousand elections at once would put ten
// thousand transactions (and their status writes) in front of its own
// keep-alive. Measured on the embedded server, renewals then took 1.4–2s,
// enough for the session's deadline to pass (and, in a loop of sessions
// lost and elections restarting, for etcd to expire the lease), and etcd
// refused writes with "too many requests" once more than 5,000 proposals
// waited to be applied. With a bound, the backlog a keep-alive can find in
// front of it is the bound, not the burst: renewals of milliseconds.
//
// Requests whose number does not grow with the leases held go around the
// bound, through the embedded KV (k.KV): group membership (Join, Leave,
// Members), HeldLeases and the shared lease watch's resync. A group's view
// decides which of thousands of Acquires to start or stop; queued behind
// them, a Join took longer than a renewal period at a cold start of 10,000
// partitions, and the member came late into the others' views.
type limitedKV struct {
	clientv3.KV
	lim *limit.Limiter
}

func newLimitedKV(kv clientv3.KV, lim *limit.Limiter) *limitedKV {
	return &limitedKV{KV: kv, lim: lim}
}

func (k *limitedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return limit.Do(ctx, k.lim, func() (*clientv3.GetResponse, error) { return k.KV.Get(ctx, key, opts...) })
}

func (k *limitedKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	return limit.Do(ctx, k.lim, func() (*clientv3.PutResponse, error) { return k.KV.Put(ctx, key, val, opts...) })
}

func (k *limitedKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	return limit.Do(ctx, k.lim, func() (*clientv3.DeleteResponse, error) { return k.KV.Delete(ctx, key, opts...) })
}

func (k *limitedKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	return limit.Do(ctx, k.lim, func() (clientv3.OpResponse, error) { return k.KV.Do(ctx, op) })
}

func (k *limitedKV) Txn(ctx context.Context) clientv3.Txn {
	return &limitedTxn{Txn: k.KV.Txn(ctx), ctx: ctx, k: k}
}

// limitedTxn is a transaction whose Commit waits for a slot.
type limitedTxn struct {
	clientv3.Txn
	ctx context.Context
	k   *limitedKV
}

func (t *limitedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *limitedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *limitedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *limitedTxn) Commit() (*clientv3.TxnResponse, error) {
	return limit.Do(t.ctx, t.k.lim, t.Txn.Commit)
}
