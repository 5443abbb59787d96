package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/simba-go/simba/backend"
)

// record is one stored record. Records belong to the server, not to a
// session: they outlive the session that wrote them.
type record struct {
	value   []byte
	version uint64
	token   uint64
}

func (r *record) public(key string) backend.Record {
	return backend.Record{Key: key, Value: clone(r.value), Version: r.version, Token: r.token}
}

// GetRecord returns the record at key: the optional [backend.Records]
// capability, like the other record methods.
func (s *session) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	if err := checkKey(key); err != nil {
		return backend.Record{}, err
	}
	var out backend.Record
	err := s.records(ctx, func(b *Backend) (err error) {
		out, err = b.getRecord(key)
		return err
	})
	return out, err
}

// getRecord returns the record at key. b.mu is held.
func (b *Backend) getRecord(key string) (backend.Record, error) {
	r, ok := b.records[key]
	if !ok {
		return backend.Record{}, fmt.Errorf("simba/memory: record %q: %w", key, backend.ErrNoRecord)
	}
	return r.public(key), nil
}

// ListRecords returns the records under prefix, sorted by key.
func (s *session) ListRecords(ctx context.Context, prefix string) ([]backend.Record, error) {
	var out []backend.Record
	err := s.records(ctx, func(b *Backend) error {
		out = b.listRecords(prefix)
		return nil
	})
	return out, err
}

// listRecords returns the records under prefix, sorted by key. b.mu is
// held.
func (b *Backend) listRecords(prefix string) []backend.Record {
	var out []backend.Record
	for key, r := range b.records {
		if strings.HasPrefix(key, prefix) {
			out = append(out, r.public(key))
		}
	}
	slices.SortFunc(out, func(x, y backend.Record) int { return strings.Compare(x.Key, y.Key) })
	return out
}

// PutRecord writes value at key if cond holds; the lease check of a fenced
// write is atomic with the write.
func (s *session) PutRecord(ctx context.Context, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	if err := checkRecord(key, value); err != nil {
		return backend.Record{}, err
	}
	var out backend.Record
	err := s.records(ctx, func(b *Backend) error {
		if err := b.check(s, key, cond); err != nil {
			return err
		}
		b.recVersion++
		r := &record{value: clone(value), version: b.recVersion, token: cond.Token}
		b.records[key] = r
		b.recordChanged(key)
		out = r.public(key)
		return nil
	})
	return out, err
}

// DeleteRecord removes the record at key if cond holds.
func (s *session) DeleteRecord(ctx context.Context, key string, cond backend.Condition) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return s.records(ctx, func(b *Backend) error {
		if err := b.check(s, key, cond); err != nil {
			return err
		}
		if _, ok := b.records[key]; ok {
			delete(b.records, key)
			b.recordChanged(key)
		}
		return nil
	})
}

// WatchRecords returns a channel that receives a hint after every change to
// a record under prefix.
func (s *session) WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error) {
	return s.watch(ctx, &watcher{s: s, n: s.n, group: prefix, records: true, ch: make(chan struct{}, 1)}, opWatchRecords)
}

// records carries one record request to the server, where do runs with
// b.mu held.
func (s *session) records(ctx context.Context, do func(b *Backend) error) error {
	return s.n.exchange(ctx, opRecords, s, func() (func(), error) {
		if !s.live {
			return nil, sessionDone(opRecords)
		}
		return nil, do(s.b)
	})
}

// check reports whether cond holds for a write of key by s. b.mu is held.
func (b *Backend) check(s *session, key string, cond backend.Condition) error {
	cur, ok := b.records[key]
	if cond.Token != 0 {
		if l := b.leases[cond.Lease]; l == nil || l.s != s || l.token != cond.Token {
			return fmt.Errorf("simba/memory: record %q: lease %q is not held with token %d: %w", key, cond.Lease, cond.Token, backend.ErrConflict)
		}
		if ok && cur.token > cond.Token {
			return fmt.Errorf("simba/memory: record %q: written with token %d, newer than %d: %w", key, cur.token, cond.Token, backend.ErrConflict)
		}
	}
	if cond.IfVersion {
		var v uint64
		if ok {
			v = cur.version
		}
		if v != cond.Version {
			return fmt.Errorf("simba/memory: record %q: version %d, not %d: %w", key, v, cond.Version, backend.ErrConflict)
		}
	}
	return nil
}

// recordChanged hints the watchers of key. b.mu is held.
func (b *Backend) recordChanged(key string) {
	for _, w := range b.recWatchers {
		if strings.HasPrefix(key, w.group) {
			w.n.notify(w.hint)
		}
	}
}

// checkRecord is [backend.CheckRecord] with the package prefix.
func checkRecord(key string, value []byte) error {
	if err := backend.CheckRecord(key, value); err != nil {
		return fmt.Errorf("simba/memory: %w", err)
	}
	return nil
}

// checkKey is [backend.CheckKey] with the package prefix.
func checkKey(key string) error {
	if err := backend.CheckKey(key); err != nil {
		return fmt.Errorf("simba/memory: %w", err)
	}
	return nil
}

var _ backend.SkipReporter = (*session)(nil)

// ListRecordsWithSkipped is ListRecords, with no record skipped: the memory
// backend keeps records as they were written, never encodings that another
// program could have spoilt. It implements [backend.SkipReporter], with
// MembersWithSkipped, so that the memory backend offers what the others
// do.
func (s *session) ListRecordsWithSkipped(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	out, err := s.ListRecords(ctx, prefix)
	return out, nil, err
}

// MembersWithSkipped is Members, with no member skipped.
func (s *session) MembersWithSkipped(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	out, err := s.Members(ctx, group)
	return out, nil, err
}
