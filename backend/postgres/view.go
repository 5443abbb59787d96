package postgres

import (
	"context"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/view"
)

// View returns a read-only view: reads on the backend's pool, watches on
// its listener, no session and no write. It makes sure the schema exists
// (creating it if it has no tables, as Open does).
func (b *Backend) View(ctx context.Context) (backend.View, error) {
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	return view.New(b.ctx, "simba/postgres", source{b}), nil
}
