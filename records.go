package simba

import (
	"context"
	"fmt"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/records"
)

// errNoRecords is the error of the record methods of [Term] on a backend
// that keeps no records (every backend of this module's tree does).
var errNoRecords = fmt.Errorf("simba: %w (it does not implement backend.Records)", backend.ErrRecordsUnsupported)

// PutRecord stores value under key in the backend's records, fenced by the
// term: the write succeeds only while this term's holding of the lease is
// current, so a deposed holder can never overwrite what a newer term wrote
// (for checkpoints, cursors, progress). It may be called while the term is
// valid and, after a stop, a yield or an operator's request ended it, during
// its hand-off (the lease is still this client's until the work returns, at
// most until the deadline the term had when it ended) — for a final
// checkpoint. It returns an error matching [ErrTermExpired] otherwise, one
// matching [backend.ErrConflict] when the backend refused the write because
// the lease has moved on, and one matching [backend.ErrRecordsUnsupported] when the backend keeps
// none. Keys follow [backend.Records]' rules; they are stored apart from
// simba's own status and operation records.
func (t *Term) PutRecord(ctx context.Context, key string, value []byte) error {
	rec, ok := t.gen.sess.(backend.Records)
	if !ok {
		return errNoRecords
	}
	if !t.valid() && (t.gen.ended.Load() || time.Duration(t.handOffUntil.Load()) <= t.gen.now()) {
		return t.endErr()
	}
	_, err := rec.PutRecord(ctx, records.DataPrefix+key, value, backend.Condition{Lease: t.ref.Election, Token: t.ref.Token})
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
		return nil, errNoRecords
	}
	r, err := rec.GetRecord(ctx, records.DataPrefix+key)
	if err != nil {
		return nil, fmt.Errorf("simba: record %q: %w", key, err)
	}
	return r.Value, nil
}
