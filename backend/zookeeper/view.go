package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/simba-go/simba/backend"
)

var (
	_ backend.Viewer = (*Backend)(nil)
	_ backend.View   = (*view)(nil)
)

// viewTTL is the session timeout a view's connection requests: the server
// ends the session of a view abandoned without Close (a killed process)
// within it. Like every session of the backend's (whose connections send no
// pings), the view's lives by KeepAlive, a read of the root, which the view
// sends every third of the granted timeout.
const viewTTL = 10 * time.Second

// viewCloseTimeout bounds view.Close's wait for the server to confirm the
// end of the view's session.
const viewCloseTimeout = 2 * time.Second

// View returns a read-only view of what the backend stores: the optional
// [backend.Viewer] capability. The view has a connection of its own, made
// through the backend's dialer with its credentials (WithAuth) and root,
// and reads with plain getData, exists and getChildren requests: it creates
// no znode and changes no data, so the tree under the root is unchanged (a
// ZooKeeper connection always has a session on the server, which is not a
// znode; the view's ends on Close, or viewTTL after its process is gone).
//
// View connects before it returns, so that an unreachable ensemble or
// refused credentials are reported now; it returns an error wrapping
// ctx.Err() when ctx ends first. The connection reconnects by itself;
// when its session has ended (it expired during an outage longer than
// the timeout), the view's next call opens another, so a view works again
// after an outage of any length. Its watches are closed when their ctx
// ends, the view is closed, or the connection's session ends: the caller
// reads and watches again.
func (b *Backend) View(ctx context.Context) (backend.View, error) {
	vctx, cancel := context.WithCancel(context.Background())
	v := &view{b: b, lock: make(chan struct{}, 1), ctx: vctx, cancel: cancel}
	if _, err := v.session(ctx, "view"); err != nil {
		cancel()
		return nil, err
	}
	return v, nil
}

// view is a read-only view: a session of its own that it never uses to
// write, opened again when it has ended.
type view struct {
	b      *Backend
	lock   chan struct{}   // held while opening a session
	ctx    context.Context // ends on Close: the renewals stop
	cancel context.CancelFunc
	renew  sync.WaitGroup // the renewal loops

	mu     sync.Mutex
	closed bool
	cur    *session // nil before the first session
}

// errViewClosed is the error of a call after Close.
var errViewClosed = fmt.Errorf("view closed: %w", backend.ErrClosed)

// session returns the view's session, opening one when there is none or
// the last one has ended.
func (v *view) session(ctx context.Context, op string) (*session, error) {
	if s, err := v.current(op); s != nil || err != nil {
		return s, err
	}
	select {
	case v.lock <- struct{}{}:
		defer func() { <-v.lock }()
	case <-ctx.Done():
		return nil, fmt.Errorf("simba/zookeeper: %s: %w", op, ctx.Err())
	}
	if s, err := v.current(op); s != nil || err != nil {
		return s, err
	}
	opened, err := v.b.Open(ctx, backend.SessionOptions{TTL: viewTTL})
	if err != nil {
		return nil, viewErr(op, err)
	}
	s := opened.(*session)
	v.mu.Lock()
	closed := v.closed
	if !closed {
		v.cur = s
		v.renew.Go(func() { v.keepAlive(s) })
	}
	v.mu.Unlock()
	if closed { // closed while opening
		cctx, cancel := context.WithTimeout(context.Background(), viewCloseTimeout)
		defer cancel()
		_ = s.Close(cctx) // unconfirmed, it expires by itself
		return nil, fmt.Errorf("simba/zookeeper: %s: %w", op, errViewClosed)
	}
	return s, nil
}

// keepAlive renews s every third of its timeout until s is over or the
// view is closed. A renewal that fails is not retried early: the session
// may expire, and the view's next call opens another.
func (v *view) keepAlive(s *session) {
	for {
		t := time.NewTimer(max(s.link.granted()/3, time.Millisecond))
		select {
		case <-t.C:
		case <-s.Done():
			t.Stop()
			return
		case <-v.ctx.Done():
			t.Stop()
			return
		}
		_, _ = s.KeepAlive(v.ctx)
	}
}

// current returns the view's session if it is live, or the error of a
// closed view.
func (v *view) current(op string) (*session, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil, fmt.Errorf("simba/zookeeper: %s: %w", op, errViewClosed)
	}
	if v.cur != nil && v.cur.live(op) == nil {
		return v.cur, nil
	}
	return nil, nil
}

// viewErr is err, an error of a view's session during op, as the view
// reports it: one that wraps backend.ErrClosed after Backend.Close, and
// otherwise never one wrapping backend.ErrSessionDone (the session is the
// view's business: its next call opens another).
func viewErr(op string, err error) error {
	switch {
	case errors.Is(err, backend.ErrClosed):
		return fmt.Errorf("simba/zookeeper: %s: %w", op, backend.ErrClosed)
	case errors.Is(err, backend.ErrSessionDone):
		return fmt.Errorf("simba/zookeeper: %s: the view's connection ended (%v); its next call connects again", op, err)
	}
	return err
}

// viewCall runs f on the view's session, and once more on a new session
// when that one turns out to have ended.
func viewCall[T any](v *view, ctx context.Context, op string, f func(*session) (T, error)) (T, error) {
	var zero T
	for attempt := 0; ; attempt++ {
		s, err := v.session(ctx, op)
		if err != nil {
			return zero, err
		}
		out, err := f(s)
		if err == nil {
			return out, nil
		}
		if attempt == 0 && errors.Is(err, backend.ErrSessionDone) && !errors.Is(err, backend.ErrClosed) && ctx.Err() == nil {
			continue
		}
		if _, closed := v.current(op); closed != nil {
			return zero, closed
		}
		return zero, viewErr(op, err)
	}
}

// GetRecord returns the record at key.
func (v *view) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	return viewCall(v, ctx, "get record", func(s *session) (backend.Record, error) { return s.GetRecord(ctx, key) })
}

// ListRecordsWithSkipped returns the records under prefix and the record
// znodes under it whose data is not a record.
func (v *view) ListRecordsWithSkipped(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	type listing struct {
		records []backend.Record
		skipped []backend.MalformedError
	}
	l, err := viewCall(v, ctx, "list records", func(s *session) (listing, error) {
		r, m, err := s.ListRecordsWithSkipped(ctx, prefix)
		return listing{r, m}, err
	})
	return l.records, l.skipped, err
}

// MembersWithSkipped returns the members of group and the member znodes
// whose data is not a member record.
func (v *view) MembersWithSkipped(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	type listing struct {
		members []backend.Member
		skipped []backend.MalformedError
	}
	l, err := viewCall(v, ctx, "members", func(s *session) (listing, error) {
		m, bad, err := s.MembersWithSkipped(ctx, group)
		return listing{m, bad}, err
	})
	return l.members, l.skipped, err
}

// HeldLeases lists the lease znodes under prefix.
func (v *view) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	return viewCall(v, ctx, "held leases", func(s *session) ([]string, error) { return s.HeldLeases(ctx, prefix) })
}

// WatchRecords watches the records under prefix, on the view's current
// session: the channel is closed when that session ends.
func (v *view) WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error) {
	return viewCall(v, ctx, "watch records", func(s *session) (<-chan struct{}, error) { return s.WatchRecords(ctx, prefix) })
}

// WatchMembers watches the members of group, on the view's current
// session: the channel is closed when that session ends.
func (v *view) WatchMembers(ctx context.Context, group string) (<-chan struct{}, error) {
	return viewCall(v, ctx, "watch members", func(s *session) (<-chan struct{}, error) { return s.WatchMembers(ctx, group) })
}

// Close closes the view's session, waiting at most viewCloseTimeout for the
// server to confirm; its watches are closed. An unconfirmed close is
// reported, and the session expires by itself within its timeout.
func (v *view) Close() error {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return nil
	}
	v.closed = true
	s := v.cur
	v.mu.Unlock()
	v.cancel()
	v.renew.Wait()
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), viewCloseTimeout)
	defer cancel()
	return s.Close(ctx)
}
