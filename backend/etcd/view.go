package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
)

var (
	_ backend.Viewer = (*Backend)(nil)
	_ backend.View   = (*view)(nil)
)

// errViewClosed is the cause of a view's end by Close.
var errViewClosed = errors.New("view closed")

// View returns a read-only view of what the backend stores: the optional
// [backend.Viewer] capability. It sends plain range requests and watches
// on the backend's client, with the backend's key prefix: no lease grant,
// no put, no transaction, so the store's revision does not move and a user
// whose role may only read the prefix can use it. It contacts no server
// until its first call; while etcd cannot be reached its calls fail, and
// they work again when it answers, as the client reconnects by itself. Its
// watches resume from the revision they reached after a broken stream (with
// a hint), and are closed only when their ctx ends, the view is closed or
// the backend or its client is closed.
func (b *Backend) View(ctx context.Context) (backend.View, error) {
	if b.isClosed() {
		return nil, fmt.Errorf("simba/etcd: view: %w", backend.ErrClosed)
	}
	if b.cli.Ctx().Err() != nil {
		return nil, fmt.Errorf("simba/etcd: view: etcd client closed: %w", backend.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("simba/etcd: view: %w", err)
	}
	vctx, cancel := context.WithCancelCause(b.ctx)
	return &view{b: b, ctx: vctx, cancel: cancel}, nil
}

// view is a read-only view: the backend's client, with a ctx of its own
// that ends on Close or Backend.Close.
type view struct {
	b      *Backend
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // the view's watch goroutines
}

// GetRecord returns the record at key: one Get.
func (v *view) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	if err := checkKey(key); err != nil {
		return backend.Record{}, err
	}
	op := fmt.Sprintf("get record %q", key)
	if err := v.overErr(op); err != nil {
		return backend.Record{}, err
	}
	cctx, release := v.bind(ctx)
	defer release()
	return v.b.getRecord(cctx, op, key, func(err error) error { return v.failure(ctx, op, err) })
}

// ListRecordsWithSkipped returns the records under prefix and the stored
// values under it that are not records: one range request.
func (v *view) ListRecordsWithSkipped(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	op := fmt.Sprintf("list records %q", prefix)
	if err := v.overErr(op); err != nil {
		return nil, nil, err
	}
	cctx, release := v.bind(ctx)
	defer release()
	return v.b.listRecords(cctx, prefix, func(err error) error { return v.failure(ctx, op, err) })
}

// MembersWithSkipped returns the members of group and the member keys
// that are not member records: one range request.
func (v *view) MembersWithSkipped(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	if err := checkName("group", group); err != nil {
		return nil, nil, err
	}
	op := fmt.Sprintf("members of %q", group)
	if err := v.overErr(op); err != nil {
		return nil, nil, err
	}
	cctx, release := v.bind(ctx)
	defer release()
	return v.b.members(cctx, group, func(err error) error { return v.failure(ctx, op, err) })
}

// HeldLeases lists the names under prefix with at least one candidacy,
// each once: one range request, keys only.
func (v *view) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	op := fmt.Sprintf("held leases %q", prefix)
	if err := v.overErr(op); err != nil {
		return nil, err
	}
	cctx, release := v.bind(ctx)
	defer release()
	return v.b.heldLeases(cctx, prefix, func(err error) error { return v.failure(ctx, op, err) })
}

// Candidates returns the session IDs of the candidacies for name, oldest
// first (as a session's [backend.CandidateLister] does): one range
// request, keys only.
func (v *view) Candidates(ctx context.Context, name string) ([]string, error) {
	if err := checkName("lease", name); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("candidates of %q", name)
	if err := v.overErr(op); err != nil {
		return nil, err
	}
	cctx, release := v.bind(ctx)
	defer release()
	return v.b.candidates(cctx, name, func(err error) error { return v.failure(ctx, op, err) })
}

// WatchRecords watches the records under prefix.
func (v *view) WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error) {
	return watchHints(v, v.b, ctx, fmt.Sprintf("watch records %q", prefix), v.b.recordKey(prefix))
}

// WatchMembers watches the members of group.
func (v *view) WatchMembers(ctx context.Context, group string) (<-chan struct{}, error) {
	if err := checkName("group", group); err != nil {
		return nil, err
	}
	return watchHints(v, v.b, ctx, fmt.Sprintf("watch members of %q", group), v.b.groupPrefix(group))
}

// Close ends the view's watches and waits for their goroutines, which
// return at once. It sends nothing to etcd.
func (v *view) Close() error {
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	v.cancel(errViewClosed)
	v.wg.Wait()
	return nil
}

// The view's side of hintOwner.

func (v *view) over() bool    { return v.ctx.Err() != nil }
func (v *view) clientClosed() {} // every later call fails: failure says why

func (v *view) overErr(op string) error {
	if v.ctx.Err() == nil {
		return nil
	}
	return v.doneErr(op)
}

func (v *view) doneErr(op string) error {
	why := context.Cause(v.ctx)
	if !errors.Is(why, errViewClosed) {
		why = errBackendClosed
	}
	return fmt.Errorf("simba/etcd: %s: %v: %w", op, why, backend.ErrClosed)
}

// bind returns a ctx that ends with ctx or the view.
func (v *view) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	return bindTo(ctx, v.ctx)
}

// failure describes err, an error of the etcd client during op: the
// caller's ctx ended, the view or the client was closed, or etcd could
// not be reached (saying so) or refused the request.
func (v *view) failure(ctx context.Context, op string, err error) error {
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case v.ctx.Err() != nil:
		return v.doneErr(op)
	case v.b.cli.Ctx().Err() != nil:
		return fmt.Errorf("simba/etcd: %s: etcd client closed: %w", op, backend.ErrClosed)
	}
	if state := v.b.connState(); state != connectivity.Ready {
		return fmt.Errorf("simba/etcd: %s: not connected to etcd at %s (connection %s): %w",
			op, strings.Join(v.b.cli.Endpoints(), ","), state, err)
	}
	return fmt.Errorf("simba/etcd: %s: %w", op, err)
}

// spawn runs f on a goroutine of the view (and the backend), unless the
// view is closed.
func (v *view) spawn(f func()) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed || v.ctx.Err() != nil {
		return false
	}
	// Added under b.mu while the backend is open: before Close waits.
	v.b.mu.Lock()
	if v.b.closed {
		v.b.mu.Unlock()
		return false
	}
	v.b.wg.Add(1)
	v.b.mu.Unlock()
	v.wg.Add(1)
	go func() {
		defer v.b.wg.Done()
		defer v.wg.Done()
		f()
	}()
	return true
}

// pause waits for d, jittered, unless the view ends first.
func (v *view) pause(d time.Duration) bool { return backoff.Sleep(v.ctx, backoff.Jitter(d)) }
