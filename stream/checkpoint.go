package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
)

// CheckpointStore keeps the checkpoint of every partition: the offset below
// which every message has been processed. It is called from each
// partition's loop, one call at a time per partition, and from several
// partitions at once: it must be safe for concurrent use.
type CheckpointStore interface {
	// Load returns the checkpoint of partition as last saved by any term,
	// or found false when there is none. term is the caller's term of the
	// partition; the store may use it to read.
	Load(ctx context.Context, term *simba.Term, partition int) (offset int64, found bool, err error)

	// Save records offset as the checkpoint of partition, fenced by term:
	// it must succeed only while term still holds the partition's lease,
	// and never replace a checkpoint saved by a later term, so that a
	// deposed owner can never move the checkpoint. A refused write returns
	// an error matching [ErrFenced] and changes nothing. Other errors are
	// transient: the loop tries again at the next commit.
	//
	// The loop calls Save only with offsets higher than the last one it
	// loaded or saved in the term. ctx may outlive the term's
	// cancellation: at hand-off it ends at the term's deadline (the last
	// one seen while the term was valid).
	Save(ctx context.Context, term *simba.Term, partition int, offset int64) error
}

// DefaultRecordPrefix is the key prefix of a zero [RecordStore].
const DefaultRecordPrefix = "stream/"

// RecordStore is the default [CheckpointStore]: it keeps each partition's
// checkpoint as a record of the backend (on backends that keep records: see
// [backend.Records]) under Prefix + the partition's lease name, for example
// "stream/orders.3", written through [simba.Term.PutRecord]. The write is
// fenced by the term's holding of the partition's lease, checked by the
// backend with the write, so a deposed owner's late write is refused. Values
// are the offset in decimal. On a backend without records, Load fails with
// an error matching [backend.ErrRecordsUnsupported], and so does every partition.
//
// The zero RecordStore is ready to use, with [DefaultRecordPrefix].
type RecordStore struct {
	// Prefix is put before the lease name to make the record key
	// ("" means DefaultRecordPrefix). Keys follow the rules of
	// backend.Records.
	Prefix string
}

func (s RecordStore) key(term *simba.Term) string {
	p := s.Prefix
	if p == "" {
		p = DefaultRecordPrefix
	}
	return p + term.Name()
}

// Load reads the checkpoint of term's partition.
func (s RecordStore) Load(ctx context.Context, term *simba.Term, partition int) (int64, bool, error) {
	v, err := term.GetRecord(ctx, s.key(term))
	if errors.Is(err, backend.ErrNoRecord) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	off, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || off < 0 {
		return 0, false, fmt.Errorf("simba/stream: checkpoint %q of partition %d is not an offset", v, partition)
	}
	return off, true, nil
}

// Save writes the checkpoint of term's partition, fenced by term. Refusals
// (the term is over, or the backend found the lease moved on or the session
// gone) match [ErrFenced] and the core's error ([simba.ErrTermExpired],
// [backend.ErrConflict] or [backend.ErrSessionDone]).
func (s RecordStore) Save(ctx context.Context, term *simba.Term, partition int, offset int64) error {
	var buf [20]byte
	err := term.PutRecord(ctx, s.key(term), strconv.AppendInt(buf[:0], offset, 10))
	if err != nil && (errors.Is(err, simba.ErrTermExpired) || errors.Is(err, backend.ErrConflict) || errors.Is(err, backend.ErrSessionDone)) {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return err
}
