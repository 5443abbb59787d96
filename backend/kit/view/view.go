package view

import (
	"context"
	"fmt"

	"github.com/simba-go/simba/backend"
)

// Source is a backend's reads that need no session. Each takes the
// caller's ctx and stop, which ends when the reader does (its session
// over, its view closed, the backend closed): a read that waits (for a
// slot among the backend's requests) gives up when stop ends, and a
// watch's channel is closed when ctx or stop ends. The arguments are
// checked before Source sees them.
type Source interface {
	// GetRecord is backend.Records' GetRecord.
	GetRecord(ctx, stop context.Context, key string) (backend.Record, error)
	// ListRecords is backend.SkipReporter's ListRecordsWithSkipped.
	ListRecords(ctx, stop context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error)
	// Members is backend.SkipReporter's MembersWithSkipped.
	Members(ctx, stop context.Context, group string) ([]backend.Member, []backend.MalformedError, error)
	// HeldLeases is backend.LeaseLister's HeldLeases.
	HeldLeases(ctx, stop context.Context, prefix string) ([]string, error)
	// WatchRecords is backend.Records' WatchRecords.
	WatchRecords(ctx, stop context.Context, prefix string) <-chan struct{}
	// WatchMembers is backend.Session's WatchMembers.
	WatchMembers(ctx, stop context.Context, group string) <-chan struct{}
}

// Reader serves a [Source]'s reads with the checks every backend makes
// first. Its methods are those of the same names of backend.Records,
// backend.SkipReporter, backend.LeaseLister and backend.Session. Make it
// with [NewReader]; it is safe for concurrent use by multiple goroutines.
type Reader struct {
	prefix string
	stop   context.Context
	check  func(op string) error
	src    Source
}

// NewReader returns a Reader of src whose errors start with prefix
// ("simba/postgres"). stop ends when the reader does (it is given to
// src); check, unless nil, returns the error of the call op when the
// reader may no longer read (a session over: an error wrapping
// backend.ErrSessionDone), and nil while it may.
func NewReader(prefix string, stop context.Context, check func(op string) error, src Source) *Reader {
	if check == nil {
		check = func(string) error { return nil }
	}
	return &Reader{prefix: prefix, stop: stop, check: check, src: src}
}

// CheckGroup returns an error, starting with the reader's prefix, for an
// invalid group name (see backend.CheckName), and nil for a valid one.
func (r *Reader) CheckGroup(group string) error {
	if err := backend.CheckName(group); err != nil {
		return fmt.Errorf("%s: group name: %w", r.prefix, err)
	}
	return nil
}

// GetRecord returns the record at key.
func (r *Reader) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	if err := backend.CheckKey(key); err != nil {
		return backend.Record{}, fmt.Errorf("%s: %w", r.prefix, err)
	}
	if err := r.check("get record"); err != nil {
		return backend.Record{}, err
	}
	return r.src.GetRecord(ctx, r.stop, key)
}

// ListRecords returns the records under prefix, sorted by key.
func (r *Reader) ListRecords(ctx context.Context, prefix string) ([]backend.Record, error) {
	list, _, err := r.ListRecordsWithSkipped(ctx, prefix)
	return list, err
}

// ListRecordsWithSkipped returns the records under prefix and the
// malformed ones it skipped.
func (r *Reader) ListRecordsWithSkipped(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	if err := r.check("list records"); err != nil {
		return nil, nil, err
	}
	return r.src.ListRecords(ctx, r.stop, prefix)
}

// Members returns the members of group, ordered by Session.
func (r *Reader) Members(ctx context.Context, group string) ([]backend.Member, error) {
	ms, _, err := r.MembersWithSkipped(ctx, group)
	return ms, err
}

// MembersWithSkipped returns the members of group and the malformed
// member entries it skipped.
func (r *Reader) MembersWithSkipped(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	if err := r.CheckGroup(group); err != nil {
		return nil, nil, err
	}
	if err := r.check("members"); err != nil {
		return nil, nil, err
	}
	return r.src.Members(ctx, r.stop, group)
}

// HeldLeases returns the names under prefix of the leases held now.
func (r *Reader) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	if err := r.check("held leases"); err != nil {
		return nil, err
	}
	return r.src.HeldLeases(ctx, r.stop, prefix)
}

// WatchRecords returns a channel of hints that records under prefix may
// have changed, closed when ctx or the reader ends.
func (r *Reader) WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error) {
	if err := r.check("watch records"); err != nil {
		return nil, err
	}
	return r.src.WatchRecords(ctx, r.stop, prefix), nil
}

// WatchMembers returns a channel of hints that the members of group may
// have changed, closed when ctx or the reader ends.
func (r *Reader) WatchMembers(ctx context.Context, group string) (<-chan struct{}, error) {
	if err := r.CheckGroup(group); err != nil {
		return nil, err
	}
	if err := r.check("watch members"); err != nil {
		return nil, err
	}
	return r.src.WatchMembers(ctx, r.stop, group), nil
}

// New returns a backend.View of src whose errors start with prefix
// ("simba/postgres"). It lasts until its Close or until parent ends (the
// backend's Close); after either, every call returns an error wrapping
// backend.ErrClosed, and its watches' channels are closed.
func New(parent context.Context, prefix string, src Source) backend.View {
	ctx, cancel := context.WithCancel(parent)
	closed := func(op string) error {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: view: %s: %w", prefix, op, backend.ErrClosed)
		}
		return nil
	}
	return &view{Reader: NewReader(prefix, ctx, closed, src), cancel: cancel}
}

type view struct {
	*Reader
	cancel context.CancelFunc
}

// Close closes the view's watches; later calls fail with ErrClosed.
func (v *view) Close() error {
	v.cancel()
	return nil
}
