package simba

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simba-go/simba/backend"
)

// ErrNoRecords is returned by the record methods of [Term] when the backend
// keeps no records (see [backend.Records]; memory, etcd and ZooKeeper do).
var ErrNoRecords = errors.New("simba: the backend keeps no records")

// DataPrefix is where the records written through [Term.PutRecord] live in
// the backend, apart from simba's own status and operation records.
const DataPrefix = "data/"

// PutRecord stores value under key in the backend's records, fenced by the
// term: the write succeeds only while this term's holding of the lease is
// current, so a deposed holder can never overwrite what a newer term wrote
// (for checkpoints, cursors, progress). It may be called while the term is
// valid and, after a stop, a yield or an operator's request ended it, during
// its hand-off (the lease is still this client's until the work returns, at
// most until the deadline the term had when it ended) — for a final
// checkpoint. It returns an error matching [ErrTermExpired] otherwise, one
// matching [backend.ErrConflict] when the backend refused the write because
// the lease has moved on, and [ErrNoRecords] when the backend keeps none.
// Keys follow [backend.Records]' rules and are stored under [DataPrefix].
func (t *Term) PutRecord(ctx context.Context, key string, value []byte) error {
	rec, ok := t.gen.sess.(backend.Records)
	if !ok {
		return ErrNoRecords
	}
	if !t.valid() && (t.gen.ended.Load() || time.Duration(t.handOffUntil.Load()) <= t.gen.now()) {
		return t.Err()
	}
	_, err := rec.PutRecord(ctx, DataPrefix+key, value, backend.Condition{Lease: t.ref.Election, Token: t.ref.Token})
	if err != nil {
		return fmt.Errorf("simba: record %q by %v: %w", key, t, err)
	}
	return nil
}

// GetRecord reads the record stored under key with [Term.PutRecord] by this
// or any earlier term. It returns an error matching [backend.ErrNoRecord]
// when there is none.
func (t *Term) GetRecord(ctx context.Context, key string) ([]byte, error) {
	rec, ok := t.gen.sess.(backend.Records)
	if !ok {
		return nil, ErrNoRecords
	}
	r, err := rec.GetRecord(ctx, DataPrefix+key)
	if err != nil {
		return nil, fmt.Errorf("simba: record %q: %w", key, err)
	}
	return r.Value, nil
}
