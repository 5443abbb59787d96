package etcd

import (
	"context"
	"fmt"
	"math"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/frame"
)

var (
	_ backend.Records      = (*session)(nil)
	_ backend.SkipReporter = (*session)(nil)
)

// A record's key is <prefix>rec/<key>; its value is the record's stored
// form (see backend/kit/frame): the token of the write that stored it, 8
// bytes big-endian (0 for an unfenced write), followed by the record's
// value. Big-endian makes the byte order of stored values follow the order
// of their tokens, which is what lets a transaction compare a record's
// token with a fence (see tokenAtMost). The key is not bound to any etcd
// lease: records outlive the session that wrote them.

// encodeRecord returns the stored value of a record written with token.
func encodeRecord(token uint64, value []byte) string { return string(frame.Encode(token, value)) }

// decodeRecord returns the record stored as kv under base, or a
// *backend.MalformedError when the stored value is too short to hold the
// token: a value that this backend did not write (etcdctl put, say).
func decodeRecord(base string, kv *mvccpb.KeyValue) (backend.Record, *backend.MalformedError) {
	r, bad := frame.Decode(strings.TrimPrefix(string(kv.Key), base), kv.Value)
	if bad == nil {
		r.Version = uint64(kv.ModRevision)
	}
	return r, bad
}

// tokenAtMost compares the token stored in front of the value of key with
// token: it holds when the stored token is at most token. etcd compares
// values byte by byte, shorter first on a common prefix: a stored value
// (8 token bytes, then the record's value) is less than the 8 bytes of
// token+1 exactly when its token bytes are less than them, that is when its
// token is at most token; with equal token bytes the stored value is not
// less. A value compare fails on a missing key, so the callers test
// absence first. token is below math.MaxInt64: a fence with a larger token
// never matches a lease (see fenceCmps).
func tokenAtMost(key string, token uint64) clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(key), "<", string(frame.Encode(token+1, nil)))
}

// GetRecord returns the record at key, or an error wrapping
// [backend.ErrNoRecord]: one read. It implements [backend.Records], as the
// other record methods do.
func (s *session) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	if err := checkKey(key); err != nil {
		return backend.Record{}, err
	}
	op := fmt.Sprintf("get record %q", key)
	if err := s.overErr(op); err != nil {
		return backend.Record{}, err
	}
	cctx, release := s.bind(ctx)
	defer release()
	return s.b.getRecord(cctx, op, key, func(err error) error { return s.failure(ctx, op, err) })
}

// getRecord reads the record at key for op, one Get: the read of
// session.GetRecord and view.GetRecord. fail turns an error of the etcd
// client into the caller's.
func (b *Backend) getRecord(ctx context.Context, op, key string, fail func(error) error) (backend.Record, error) {
	resp, err := b.kv.Get(ctx, b.recordKey(key))
	if err != nil {
		return backend.Record{}, fail(err)
	}
	if len(resp.Kvs) == 0 {
		return backend.Record{}, fmt.Errorf("simba/etcd: %s: %w", op, backend.ErrNoRecord)
	}
	r, bad := decodeRecord(b.recordKey(""), resp.Kvs[0])
	if bad != nil {
		return backend.Record{}, fmt.Errorf("simba/etcd: %s: %w", op, bad)
	}
	return r, nil
}

// ListRecords returns the records whose keys start with prefix, sorted by
// key: one range read, so a consistent snapshot. Stored values too short to
// be records are skipped, and logged.
func (s *session) ListRecords(ctx context.Context, prefix string) ([]backend.Record, error) {
	out, skipped, err := s.ListRecordsWithSkipped(ctx, prefix)
	for _, bad := range skipped {
		s.b.log.Warn("simba/etcd: skipping a stored value that is not a record", "key", s.b.recordKey(bad.Key), "reason", bad.Reason)
	}
	return out, err
}

// ListRecordsWithSkipped is ListRecords, which also returns the stored
// values it skipped; it implements [backend.SkipReporter], with
// MembersWithSkipped.
func (s *session) ListRecordsWithSkipped(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	op := fmt.Sprintf("list records %q", prefix)
	if err := s.overErr(op); err != nil {
		return nil, nil, err
	}
	cctx, release := s.bind(ctx)
	defer release()
	return s.b.listRecords(cctx, prefix, func(err error) error { return s.failure(ctx, op, err) })
}

// listRecords reads the records under prefix, sorted by key, and the
// stored values under it that are not records, one range request: the
// read of session.ListRecordsWithSkipped and view.ListRecordsWithSkipped.
func (b *Backend) listRecords(ctx context.Context, prefix string, fail func(error) error) ([]backend.Record, []backend.MalformedError, error) {
	base := b.recordKey("")
	resp, err := b.kv.Get(ctx, base+prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, nil, fail(err)
	}
	out := make([]backend.Record, 0, len(resp.Kvs))
	var skipped []backend.MalformedError
	for _, kv := range resp.Kvs {
		r, bad := decodeRecord(base, kv)
		if bad != nil {
			skipped = append(skipped, *bad)
			continue
		}
		out = append(out, r)
	}
	return out, skipped, nil
}

// PutRecord writes value at key if cond holds, in one transaction with the
// check, and returns the record written, whose Version is the key's mod
// revision.
//
// A fenced write (cond.Token not 0) compares the lease key
// <prefix>lease/<cond.Lease>: its create revision must be the token and it
// must be bound to this session's etcd lease, as only this session's
// Acquire binds it. That proves the session holds the lease with that
// token at the write's revision. Within that transaction, a nested one
// writes the key if it has no record or if the record's token is at most
// cond.Token (see tokenAtMost). The lease compare alone would imply the
// order as long as a key is only ever fenced by one lease name (tokens,
// create revisions, strictly increase across holdings, and only the
// current holding passes the compare), but not when writes fenced by
// different leases meet on one key; the nested compare makes the order
// hold for every key.
//
// With cond.IfVersion, the key's mod revision must be cond.Version (0: the
// key must not exist). When a condition fails nothing is written and the
// error wraps [backend.ErrConflict].
func (s *session) PutRecord(ctx context.Context, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	if err := checkRecord(key, value); err != nil {
		return backend.Record{}, err
	}
	op := fmt.Sprintf("put record %q", key)
	rk := s.b.recordKey(key)
	var then clientv3.Op
	if cond.Token != 0 {
		then = s.fencedPut(rk, value, cond.Token)
	} else {
		then = clientv3.OpPut(rk, encodeRecord(0, value))
	}
	resp, err := s.writeRecord(ctx, op, key, cond, then)
	if err != nil {
		return backend.Record{}, err
	}
	if cond.Token != 0 {
		inner := resp.Responses[0].GetResponseTxn()
		if !inner.Succeeded && !inner.Responses[0].GetResponseTxn().Succeeded {
			return backend.Record{}, s.newerToken(op, inner.Responses[0].GetResponseTxn().Responses[0].GetResponseRange().Kvs, cond)
		}
	}
	return backend.Record{Key: key, Value: append([]byte{}, value...), Version: uint64(resp.Header.Revision), Token: cond.Token}, nil
}

// fencedPut is the write of value at the record key rk with token: a
// nested transaction that puts when the key is absent, or when its stored
// token is not newer, and otherwise reads the key (its responses are those
// PutRecord reads).
func (s *session) fencedPut(rk string, value []byte, token uint64) clientv3.Op {
	put := clientv3.OpPut(rk, encodeRecord(token, value))
	ordered := clientv3.OpTxn([]clientv3.Cmp{tokenAtMost(rk, token)}, []clientv3.Op{put}, []clientv3.Op{clientv3.OpGet(rk)})
	return clientv3.OpTxn([]clientv3.Cmp{absent(rk)}, []clientv3.Op{put}, []clientv3.Op{ordered})
}

// DeleteRecord removes the record at key if cond holds, in one transaction
// with the check (see PutRecord). Deleting a key with no record is not an
// error, unless cond requires a version other than 0.
func (s *session) DeleteRecord(ctx context.Context, key string, cond backend.Condition) error {
	if err := checkKey(key); err != nil {
		return err
	}
	op := fmt.Sprintf("delete record %q", key)
	rk := s.b.recordKey(key)
	del := clientv3.OpDelete(rk)
	var then clientv3.Op
	if cond.Token != 0 {
		// Deleted when its token is not newer; a missing key fails the
		// value compare, and the read tells.
		then = clientv3.OpTxn([]clientv3.Cmp{tokenAtMost(rk, cond.Token)}, []clientv3.Op{del}, []clientv3.Op{clientv3.OpGet(rk)})
	} else {
		then = del
	}
	resp, err := s.writeRecord(ctx, op, key, cond, then)
	if err != nil {
		return err
	}
	if cond.Token != 0 {
		if inner := resp.Responses[0].GetResponseTxn(); !inner.Succeeded {
			if kvs := inner.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				return s.newerToken(op, kvs, cond)
			}
		}
	}
	return nil
}

// writeRecord runs one transaction: if the lease and version parts of cond
// hold, then; else a read of the record and of the fence's lease key, to
// say why not.
func (s *session) writeRecord(ctx context.Context, op, key string, cond backend.Condition, then clientv3.Op) (*clientv3.TxnResponse, error) {
	if err := s.overErr(op); err != nil {
		return nil, err
	}
	rk := s.b.recordKey(key)
	cmps, err := s.fenceCmps(op, cond)
	if err != nil {
		return nil, err
	}
	if cond.IfVersion {
		if cond.Version == 0 {
			cmps = append(cmps, absent(rk))
		} else if cond.Version > math.MaxInt64 {
			return nil, fmt.Errorf("simba/etcd: %s: version %d: %w", op, cond.Version, backend.ErrConflict)
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(rk), "=", int64(cond.Version)))
		}
	}
	cctx, release := s.bind(ctx)
	defer release()
	els := []clientv3.Op{clientv3.OpGet(rk)}
	if cond.Token != 0 {
		els = append(els, clientv3.OpGet(s.b.candidacyKey(cond.Lease, s.id)))
	}
	resp, err := s.b.kv.Txn(cctx).If(cmps...).Then(then).Else(els...).Commit()
	if err != nil {
		return nil, s.failure(ctx, op, err)
	}
	if !resp.Succeeded {
		return nil, s.conflict(op, cond, resp)
	}
	return resp, nil
}

// fenceCmps returns the compares that prove this session holds cond.Lease
// with cond.Token, none for an unfenced write.
func (s *session) fenceCmps(op string, cond backend.Condition) ([]clientv3.Cmp, error) {
	if cond.Token == 0 {
		return nil, nil
	}
	if !backend.ValidName(cond.Lease) || cond.Token > math.MaxInt64 {
		// No such holding can exist: etcd's revisions are int64.
		return nil, fmt.Errorf("simba/etcd: %s: lease %q is not held with token %d: %w", op, cond.Lease, cond.Token, backend.ErrConflict)
	}
	lk := s.b.candidacyKey(cond.Lease, s.id)
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(lk), "=", int64(cond.Token)),
		clientv3.Compare(clientv3.LeaseValue(lk), "=", s.lease),
	}, nil
}

// conflict is the error of a record write whose outer compares failed;
// resp holds the reads of the record and of the fence's lease key.
func (s *session) conflict(op string, cond backend.Condition, resp *clientv3.TxnResponse) error {
	if cond.Token != 0 {
		kvs := resp.Responses[1].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != int64(cond.Token) || clientv3.LeaseID(kvs[0].Lease) != s.lease {
			return fmt.Errorf("simba/etcd: %s: lease %q is not held with token %d by session %s: %w", op, cond.Lease, cond.Token, s.id, backend.ErrConflict)
		}
	}
	var v int64
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		v = kvs[0].ModRevision
	}
	return fmt.Errorf("simba/etcd: %s: version %d, not %d: %w", op, v, cond.Version, backend.ErrConflict)
}

// newerToken is the error of a fenced write refused because the record was
// written with a newer token; kvs holds the record as read.
func (s *session) newerToken(op string, kvs []*mvccpb.KeyValue, cond backend.Condition) error {
	var token uint64
	if len(kvs) > 0 {
		token, _ = frame.Token(kvs[0].Value)
	}
	return fmt.Errorf("simba/etcd: %s: written with token %d, newer than %d: %w", op, token, cond.Token, backend.ErrConflict)
}

// absent compares key's create revision with 0: the key does not exist.
func absent(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
}

// WatchRecords watches the records under prefix (one prefix watch) and
// sends a hint for every batch of changes, like WatchMembers: it returns
// once etcd has created the watch, and the channel is closed when ctx ends
// or the session is over.
func (s *session) WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error) {
	return s.watchHints(ctx, fmt.Sprintf("watch records %q", prefix), s.b.recordKey(prefix))
}

// checkRecord is [backend.CheckRecord] with the package prefix.
func checkRecord(key string, value []byte) error {
	if err := backend.CheckRecord(key, value); err != nil {
		return fmt.Errorf("simba/etcd: %w", err)
	}
	return nil
}

// checkKey is [backend.CheckKey] with the package prefix.
func checkKey(key string) error {
	if err := backend.CheckKey(key); err != nil {
		return fmt.Errorf("simba/etcd: %w", err)
	}
	return nil
}
