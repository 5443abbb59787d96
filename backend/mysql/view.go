package mysql

import (
	"context"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/view"
)

// View returns a read-only view: reads on the backend's pool, no session
// and no write (but the tables' creation on first use, as Open does).
func (b *Backend) View(ctx context.Context) (backend.View, error) {
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	return view.New(b.ctx, "simba/mysql", source{b}), nil
}
