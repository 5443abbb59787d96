package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/simba-go/simba/backend"
)

var (
	_ backend.Viewer = (*Backend)(nil)
	_ backend.Viewer = (*Node)(nil)
	_ backend.View   = (*view)(nil)
)

// View returns a read-only view through the default node. See
// [Node.View].
func (b *Backend) View(ctx context.Context) (backend.View, error) { return b.def.View(ctx) }

// View returns a read-only view of the server through this node: the
// optional [backend.Viewer] capability. It opens no session and changes
// nothing on the server (its requests are counted in [Stats] under their
// kinds, and no Open is). The node's faults apply to it as to a session:
// while partitioned its calls block until their ctx ends, and its watch
// hints are withheld until Heal. Its watches are closed when their ctx
// ends, or the view or the node is closed.
func (n *Node) View(ctx context.Context) (backend.View, error) {
	b := n.b
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case n.crashed:
		return nil, fmt.Errorf("simba/memory: view through node %q: %w", n.name, ErrCrashed)
	case n.closed:
		return nil, fmt.Errorf("simba/memory: view: %w", backend.ErrClosed)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("simba/memory: view: %w", ctx.Err())
	}
	v := &view{n: n}
	if n.views == nil {
		n.views = make(map[*view]struct{})
	}
	n.views[v] = struct{}{}
	return v, nil
}

// view is a read-only view of the server through a node.
type view struct {
	n *Node

	// Guarded by n.b.mu.
	closed   bool
	watchers []*watcher
}

// read carries one read of kind k to the server, where do runs with b.mu
// held.
func (v *view) read(ctx context.Context, k op, do func(b *Backend) error) error {
	return v.n.exchange(ctx, k, nil, func() (func(), error) {
		if v.closed {
			return nil, fmt.Errorf("simba/memory: %v: view %w", k, backend.ErrClosed)
		}
		return nil, do(v.n.b)
	})
}

// GetRecord returns the record at key.
func (v *view) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	if err := checkKey(key); err != nil {
		return backend.Record{}, err
	}
	var out backend.Record
	err := v.read(ctx, opRecords, func(b *Backend) (err error) {
		out, err = b.getRecord(key)
		return err
	})
	return out, err
}

// ListRecordsWithSkipped returns the records under prefix, sorted by key;
// none is ever skipped (see session.ListRecordsWithSkipped).
func (v *view) ListRecordsWithSkipped(ctx context.Context, prefix string) ([]backend.Record, []backend.MalformedError, error) {
	var out []backend.Record
	err := v.read(ctx, opRecords, func(b *Backend) error {
		out = b.listRecords(prefix)
		return nil
	})
	return out, nil, err
}

// MembersWithSkipped returns the members of group, ordered by Session;
// none is ever skipped.
func (v *view) MembersWithSkipped(ctx context.Context, group string) ([]backend.Member, []backend.MalformedError, error) {
	if err := checkName("group", group); err != nil {
		return nil, nil, err
	}
	var out []backend.Member
	err := v.read(ctx, opMembers, func(b *Backend) error {
		out = b.members(group)
		return nil
	})
	return out, nil, err
}

// HeldLeases returns the names of the leases held now that start with
// prefix, sorted.
func (v *view) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	err := v.read(ctx, opHeldLeases, func(b *Backend) error {
		out = b.heldLeases(prefix)
		return nil
	})
	return out, err
}

// WatchRecords returns a channel of hints after changes to records under
// prefix.
func (v *view) WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error) {
	return v.watch(ctx, &watcher{v: v, n: v.n, group: prefix, records: true, ch: make(chan struct{}, 1)}, opWatchRecords)
}

// WatchMembers returns a channel of hints after changes to the members of
// group.
func (v *view) WatchMembers(ctx context.Context, group string) (<-chan struct{}, error) {
	if err := checkName("group", group); err != nil {
		return nil, err
	}
	return v.watch(ctx, &watcher{v: v, n: v.n, group: group, ch: make(chan struct{}, 1)}, opWatchMembers)
}

// watch registers w on the server and arranges for it to end with ctx.
func (v *view) watch(ctx context.Context, w *watcher, k op) (<-chan struct{}, error) {
	return v.n.watch(ctx, w, k, nil, func() error {
		if v.closed {
			return fmt.Errorf("simba/memory: %v: view %w", k, backend.ErrClosed)
		}
		return nil
	}, &v.watchers)
}

// Close closes the view and its watches. It always returns nil.
func (v *view) Close() error {
	b := v.n.b
	b.mu.Lock()
	defer b.mu.Unlock()
	v.closeLocked()
	delete(v.n.views, v)
	return nil
}

// closeLocked closes the view's watches and makes its later calls fail.
// b.mu is held.
func (v *view) closeLocked() {
	v.closed = true
	for _, w := range slices.Clone(v.watchers) {
		v.n.b.unwatch(w)
		w.close()
	}
}
