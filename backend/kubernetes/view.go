package kubernetes

import (
	"context"
	"fmt"

	"github.com/simba-go/simba/backend"
)

var (
	_ backend.Viewer = (*Backend)(nil)
	_ backend.View   = (*view)(nil)
)

// View returns a read-only view: gets and lists on the backend's client,
// watches on its watch, no session and no write. It needs get, list and
// watch on leases only.
func (b *Backend) View(ctx context.Context) (backend.View, error) {
	if b.closed() {
		return nil, fmt.Errorf("simba/kubernetes: view: %w", backend.ErrClosed)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("simba/kubernetes: view: %w", context.Cause(ctx))
	}
	b.hub.start()
	vctx, cancel := context.WithCancel(b.ctx)
	return &view{b: b, ctx: vctx, cancel: cancel}, nil
}

type view struct {
	b      *Backend
	ctx    context.Context // ends with Close or the backend's
	cancel context.CancelFunc
}

func (v *view) closedErr(op string) error {
	if v.ctx.Err() != nil {
		return fmt.Errorf("simba/kubernetes: view: %s: %w", op, backend.ErrClosed)
	}
	return nil
}

func (v *view) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	if err := backend.CheckKey(key); err != nil {
		return backend.Record{}, fmt.Errorf("simba/kubernetes: %w", err)
	}
	if err := v.closedErr("get record"); err != nil {
		return backend.Record{}, err
	}
	return v.b.getRecord(ctx, key)
}

func (v *view) ListRecordsWithSkipped(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	if err := v.closedErr("list records"); err != nil {
		return nil, nil, err
	}
	return v.b.listRecords(ctx, prefix)
}

func (v *view) MembersWithSkipped(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	if err := checkName("group", group); err != nil {
		return nil, nil, err
	}
	if err := v.closedErr("members"); err != nil {
		return nil, nil, err
	}
	ms, skipped, _, err := v.b.members(ctx, group)
	return ms, skipped, err
}

func (v *view) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	if err := v.closedErr("held leases"); err != nil {
		return nil, err
	}
	return v.b.heldLeases(ctx, prefix)
}

func (v *view) WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error) {
	if err := v.closedErr("watch records"); err != nil {
		return nil, err
	}
	return v.b.watch(ctx, v.ctx, func(f func()) func() { return v.b.hub.subscribeRecords(prefix, f) }, nil), nil
}

func (v *view) WatchMembers(ctx context.Context, group string) (<-chan struct{}, error) {
	if err := checkName("group", group); err != nil {
		return nil, err
	}
	if err := v.closedErr("watch members"); err != nil {
		return nil, err
	}
	return v.b.watchMembers(ctx, v.ctx, group), nil
}

// Close closes the view's watches.
func (v *view) Close() error {
	v.cancel()
	return nil
}
