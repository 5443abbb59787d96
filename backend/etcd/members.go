package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/frame"
	"github.com/simba-go/simba/backend/kit/wake"
)

// memberRecord is the value of a member key, in JSON: {"id":"…","data":"…"},
// with the data in base64 and left out when empty.
type memberRecord struct {
	ID   string `json:"id"`
	Data []byte `json:"data,omitempty"`
}

// Join writes the member key <prefix>group/<group>/<session ID>, bound to the
// session's etcd lease, with m's ID (the session ID when empty) and Data.
func (s *session) Join(ctx context.Context, group string, m backend.Member) error {
	if err := checkName("group", group); err != nil {
		return err
	}
	if len(m.Data) > backend.MaxMemberData {
		return fmt.Errorf("simba/etcd: join %q: member data of %d bytes exceeds %d", group, len(m.Data), backend.MaxMemberData)
	}
	op := fmt.Sprintf("join %q", group)
	if err := s.overErr(op); err != nil {
		return err
	}
	rec := memberRecord{ID: m.ID, Data: m.Data}
	if rec.ID == "" {
		rec.ID = s.id
	}
	val, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("simba/etcd: %s: %w", op, err)
	}
	cctx, release := s.bind(ctx)
	defer release()
	if _, err := s.b.kv.KV.Put(cctx, s.b.memberKey(group, s.id), string(val), clientv3.WithLease(s.lease)); err != nil {
		return s.failure(ctx, op, err)
	}
	return nil
}

// Leave deletes the session's member key of group, if any.
func (s *session) Leave(ctx context.Context, group string) error {
	if err := checkName("group", group); err != nil {
		return err
	}
	op := fmt.Sprintf("leave %q", group)
	if err := s.overErr(op); err != nil {
		return err
	}
	cctx, release := s.bind(ctx)
	defer release()
	if _, err := s.b.kv.KV.Delete(cctx, s.b.memberKey(group, s.id)); err != nil {
		return s.failure(ctx, op, err)
	}
	return nil
}

// Members reads the member keys of group in one range request, sorted by
// key, and so by session ID. A member key whose value is not a member
// record (JSON with an id; Join always writes one) is skipped, and logged.
func (s *session) Members(ctx context.Context, group string) ([]backend.Member, error) {
	out, skipped, err := s.MembersWithSkipped(ctx, group)
	for _, bad := range skipped {
		s.b.log.Warn("simba/etcd: skipping a member key whose value is not a member record", "key", s.b.memberKey(group, bad.Key), "reason", bad.Reason)
	}
	return out, err
}

// MembersWithSkipped is Members, which also returns the member keys it
// skipped, by their session part.
func (s *session) MembersWithSkipped(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	if err := checkName("group", group); err != nil {
		return nil, nil, err
	}
	op := fmt.Sprintf("members of %q", group)
	if err := s.overErr(op); err != nil {
		return nil, nil, err
	}
	cctx, release := s.bind(ctx)
	defer release()
	return s.b.members(cctx, group, func(err error) error { return s.failure(ctx, op, err) })
}

// members reads the members of group, ordered by session, and the member
// keys whose values are not member records, one range request: the read of
// session.MembersWithSkipped and view.MembersWithSkipped. fail turns an
// error of the etcd client into the caller's.
func (b *Backend) members(ctx context.Context, group string, fail func(error) error) ([]backend.Member, []backend.MalformedError, error) {
	prefix := b.groupPrefix(group)
	resp, err := b.kv.KV.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, nil, fail(err)
	}
	out := make([]backend.Member, 0, len(resp.Kvs))
	var skipped []backend.MalformedError
	for _, kv := range resp.Kvs {
		session := strings.TrimPrefix(string(kv.Key), prefix)
		var rec memberRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.ID == "" {
			why := "it names no member id"
			if err != nil {
				why = err.Error()
			}
			skipped = append(skipped, backend.MalformedError{
				Key:    session,
				Reason: fmt.Sprintf("value %s, not a member record (JSON with an id): %s", frame.Quote(kv.Value), why),
			})
			continue
		}
		out = append(out, backend.Member{ID: rec.ID, Session: session, Data: rec.Data})
	}
	return out, skipped, nil
}

// WatchMembers watches the member keys of group (one prefix watch) and sends
// a hint for every batch of changes. It returns once etcd has created the
// watch, so every change after it returns is signalled. The channel is
// closed when ctx ends or the session is over.
func (s *session) WatchMembers(ctx context.Context, group string) (<-chan struct{}, error) {
	if err := checkName("group", group); err != nil {
		return nil, err
	}
	return s.watchHints(ctx, fmt.Sprintf("watch members of %q", group), s.b.groupPrefix(group))
}

// hintOwner is what a watch of hints needs of the session or view it runs
// for.
type hintOwner interface {
	overErr(op string) error
	doneErr(op string) error
	bind(ctx context.Context) (context.Context, context.CancelFunc)
	failure(ctx context.Context, op string, err error) error
	spawn(f func()) bool
	pause(d time.Duration) bool
	// over reports that the owner is over (its ctx ended).
	over() bool
	// clientClosed is called when the etcd client was found closed under
	// a watch.
	clientClosed()
}

func (s *session) over() bool    { return s.ctx.Err() != nil }
func (s *session) clientClosed() { s.end(errClientClosed) }

// watchHints watches the keys under prefix and sends a hint, on the channel
// it returns, for every batch of changes, from a goroutine of the session
// until ctx ends or the session is over. It returns once etcd has created
// the watch.
func (s *session) watchHints(ctx context.Context, op, prefix string) (<-chan struct{}, error) {
	return watchHints(s, s.b, ctx, op, prefix)
}

// watchHints is session.watchHints for o, a session or a view of b.
func watchHints(s hintOwner, b *Backend, ctx context.Context, op, prefix string) (<-chan struct{}, error) {
	if err := s.overErr(op); err != nil {
		return nil, err
	}
	cctx, release := s.bind(ctx)
	wch := b.cli.Watch(cctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	var next int64
	select {
	case resp, ok := <-wch:
		err := resp.Err()
		if !ok && err == nil {
			err = cctx.Err()
		}
		if !ok && err == nil {
			err = errors.New("watch closed")
		}
		if err != nil {
			release()
			return nil, s.failure(ctx, op, err)
		}
		next = resp.Header.Revision + 1
	case <-cctx.Done():
		release()
		return nil, s.failure(ctx, op, cctx.Err())
	}
	hints := make(chan struct{}, 1)
	spawned := s.spawn(func() {
		defer close(hints)
		defer release()
		hint(s, b, cctx, prefix, wch, next, hints)
	})
	if !spawned {
		release()
		return nil, s.doneErr(op)
	}
	return hints, nil
}

// hint sends a hint on hints for every batch of events on wch, the watch of
// prefix, until ctx ends. A broken watch is set up again from the revision
// it reached, with a hint in case something was missed.
func hint(s hintOwner, b *Backend, ctx context.Context, prefix string, wch clientv3.WatchChan, next int64, hints chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case resp, ok := <-wch:
			if ok && resp.Err() == nil {
				if len(resp.Events) > 0 {
					next = resp.Header.Revision + 1
					wake.Poke(hints)
				}
				continue
			}
			if !ok && !s.over() && b.cli.Ctx().Err() != nil {
				s.clientClosed()
			}
			if ctx.Err() != nil || !s.pause(retryDelay) {
				return
			}
			opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(next)}
			if resp.CompactRevision != 0 {
				opts = opts[:1] // history is gone: from now on
			}
			wake.Poke(hints)
			wch = b.cli.Watch(ctx, prefix, opts...)
		}
	}
}
