package kubernetes

import (
	"context"
	"fmt"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/view"
)

var _ backend.Viewer = (*Backend)(nil)

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
	return view.New(b.ctx, "simba/kubernetes", source{b}), nil
}
