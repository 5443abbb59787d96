package etcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/internal/plant"
)

// ErrRestored is wrapped by the errors of a [Backend] that found its etcd
// cluster restored from a backup without --bump-revision, or replaced by
// another cluster: a response at a revision below one it saw before, or
// from another cluster ID. The Backend then refuses for good: its sessions
// are over, [Backend.Open] fails, and no lease is granted. See "etcd
// restored from a backup" in the package documentation.
var ErrRestored = errors.New("etcd cluster restored from a backup or replaced")

// history is what a Backend has seen of its cluster: the highest revision
// of its ordered responses and the cluster ID, so that it notices the
// cluster going back in time (etcd#16028) and refuses rather than hand out
// tokens at or below ones already handed out.
//
// An ordered response is at a revision at or above every revision of the
// responses received before its request was sent (not before it arrived:
// a read sent before a write returned may come back after it, at a lower
// revision), whatever member answers: writes, linearizable reads (every
// read of the backend: it makes no serializable one) and lease grants.
// Keep-alives and watch responses carry the revision of the member that
// answers, which may lag behind the others: they are checked for the
// cluster ID only, and a keep-alive at a revision below the highest seen
// when it was sent is checked again by an ordered read (see
// session.KeepAlive).
type history struct {
	mu      sync.Mutex
	rev     int64  // the highest revision of an ordered response
	cluster uint64 // the cluster ID of the first response, 0 before
	err     error  // why the backend refuses, once it does; never cleared
}

// floor returns the highest revision seen so far: what a response to a
// request sent now must not be below, if ordered.
func (b *Backend) floor() int64 {
	b.hist.mu.Lock()
	defer b.hist.mu.Unlock()
	return b.hist.rev
}

// observe checks the header h of a response, ordered or not (see
// history), to a request sent when the highest revision seen was floor.
// It returns the refusal, having ended every session, when h shows the
// cluster restored or replaced, or when the backend refuses already; and
// behind when an unordered response's revision is below floor.
func (b *Backend) observe(h *pb.ResponseHeader, floor int64, ordered bool) (behind bool, err error) {
	if h == nil || plant.Is(plant.EtcdTrustRevision) {
		return false, nil
	}
	hs := &b.hist
	hs.mu.Lock()
	switch {
	case hs.err != nil:
		err = hs.err
		hs.mu.Unlock()
		return false, err
	case h.ClusterId == 0 && h.Revision == 0:
		// A header the client made up (a watch's end, say): no news.
	case hs.cluster != 0 && h.ClusterId != 0 && h.ClusterId != hs.cluster:
		err = fmt.Errorf("refused: etcd answered as cluster %x (member %x, revision %d), but this backend saw cluster %x before (at revision %d): the cluster was replaced or restored from a backup; restart the clients once it is trusted: %w",
			h.ClusterId, h.MemberId, h.Revision, hs.cluster, hs.rev, ErrRestored)
	case ordered && h.Revision < floor:
		err = fmt.Errorf("refused: etcd cluster %x answered at revision %d (member %x), below revision %d it answered before, as after a restore from a backup without --bump-revision: its revisions, the leases' fencing tokens, would repeat: %w",
			h.ClusterId, h.Revision, h.MemberId, floor, ErrRestored)
	default:
		if hs.cluster == 0 {
			hs.cluster = h.ClusterId
		}
		if ordered {
			hs.rev = max(hs.rev, h.Revision)
		} else {
			behind = h.Revision < floor
		}
	}
	if err == nil {
		hs.mu.Unlock()
		return behind, nil
	}
	hs.err = err
	hs.mu.Unlock()
	b.refuse(err)
	return false, err
}

// refusal returns why the backend refuses, or nil.
func (b *Backend) refusal() error {
	b.hist.mu.Lock()
	defer b.hist.mu.Unlock()
	return b.hist.err
}

// refuse ends every session of the backend, with why as its cause: their
// holdings are lost, and their terms revoked.
func (b *Backend) refuse(why error) {
	b.log.Error("simba/etcd: the etcd cluster went back in time or was replaced: every session ends and no lease is granted by this backend any more; restore backups with etcdutl snapshot restore --bump-revision --mark-compacted", "error", why)
	b.mu.Lock()
	sessions := slices.Collect(maps.Keys(b.sessions))
	b.mu.Unlock()
	for _, s := range sessions {
		s.end(why)
	}
}

// checkedKV is the client's KV with the header of every response checked
// by observe, as ordered: a response that shows the cluster restored or
// replaced is replaced by the backend's refusal. Every key-value request
// of the backend goes through it (see newBackend).
type checkedKV struct {
	clientv3.KV
	b *Backend
}

// checked returns resp, or the refusal if h shows the cluster restored or
// replaced (the request sent when the highest revision seen was floor), or
// err.
func checked[R any](b *Backend, floor int64, resp R, h func(R) *pb.ResponseHeader, err error) (R, error) {
	if err != nil {
		return resp, err
	}
	if _, err := b.observe(h(resp), floor, true); err != nil {
		var zero R
		return zero, err
	}
	return resp, nil
}

func (k checkedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	floor := k.b.floor()
	resp, err := k.KV.Get(ctx, key, opts...)
	return checked(k.b, floor, resp, func(r *clientv3.GetResponse) *pb.ResponseHeader { return r.Header }, err)
}

func (k checkedKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	floor := k.b.floor()
	resp, err := k.KV.Put(ctx, key, val, opts...)
	return checked(k.b, floor, resp, func(r *clientv3.PutResponse) *pb.ResponseHeader { return r.Header }, err)
}

func (k checkedKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	floor := k.b.floor()
	resp, err := k.KV.Delete(ctx, key, opts...)
	return checked(k.b, floor, resp, func(r *clientv3.DeleteResponse) *pb.ResponseHeader { return r.Header }, err)
}

func (k checkedKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	floor := k.b.floor()
	resp, err := k.KV.Do(ctx, op)
	return checked(k.b, floor, resp, opHeader, err)
}

// opHeader returns the header of whichever response resp holds.
func opHeader(resp clientv3.OpResponse) *pb.ResponseHeader {
	switch {
	case resp.Get() != nil:
		return resp.Get().Header
	case resp.Put() != nil:
		return resp.Put().Header
	case resp.Del() != nil:
		return resp.Del().Header
	case resp.Txn() != nil:
		return resp.Txn().Header
	}
	return nil
}

func (k checkedKV) Txn(ctx context.Context) clientv3.Txn {
	return checkedTxn{Txn: k.KV.Txn(ctx), b: k.b}
}

// checkedTxn is a transaction whose response is checked by observe.
type checkedTxn struct {
	clientv3.Txn
	b *Backend
}

func (t checkedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	return checkedTxn{Txn: t.Txn.If(cs...), b: t.b}
}

func (t checkedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	return checkedTxn{Txn: t.Txn.Then(ops...), b: t.b}
}

func (t checkedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	return checkedTxn{Txn: t.Txn.Else(ops...), b: t.b}
}

func (t checkedTxn) Commit() (*clientv3.TxnResponse, error) {
	floor := t.b.floor()
	resp, err := t.Txn.Commit()
	return checked(t.b, floor, resp, func(r *clientv3.TxnResponse) *pb.ResponseHeader { return r.Header }, err)
}
