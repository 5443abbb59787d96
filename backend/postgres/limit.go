package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The backend's statements in flight whose number grows with the leases
// and records its sessions use are bounded (see WithMaxRequests) by a
// limit.Limiter: a statement waits for a slot, within its caller's ctx,
// before it asks the pool for a connection, and gives the slot back when
// it has returned the connection.
//
// Why: pgxpool hands out connections in the order they were asked for. A
// client that starts ten thousand elections at once asks for tens of
// thousands of connections (each Acquire's registration and queue read,
// each term's status write); the session's keep-alive, asked for behind
// them, waited for all of them and came back after the session's
// deadline, so every term ended, in a loop (docs/BENCHMARKS.md, Scale). A
// bound below the pool's size keeps at least one connection that no
// bounded statement can take, and the statements that go around the bound
// (the keep-alive among them) find it free.

// The bounded statements: each takes a slot of b.lim first, stop being
// the session's or view's context. One that ended while it waited for a
// slot fails with an error wrapping limit.ErrNotSent: it was never sent,
// so it cannot have taken effect.

func (b *Backend) exec(ctx, stop context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := b.lim.TakeUntil(ctx, stop); err != nil {
		return pgconn.CommandTag{}, err
	}
	defer b.lim.Free()
	return b.pool.Exec(ctx, sql, args...)
}

func (b *Backend) queryRow(ctx, stop context.Context, sql string, args ...any) pgx.Row {
	if err := b.lim.TakeUntil(ctx, stop); err != nil {
		return errRow{err}
	}
	return &limitedRow{Row: b.pool.QueryRow(ctx, sql, args...), free: b.lim.Free}
}

func (b *Backend) query(ctx, stop context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := b.lim.TakeUntil(ctx, stop); err != nil {
		return nil, err
	}
	rows, err := b.pool.Query(ctx, sql, args...)
	if err != nil {
		b.lim.Free()
		return nil, err
	}
	return &limitedRows{Rows: rows, free: b.lim.Free}, nil
}

func (b *Backend) beginFunc(ctx, stop context.Context, f func(pgx.Tx) error) error {
	if err := b.lim.TakeUntil(ctx, stop); err != nil {
		return err
	}
	defer b.lim.Free()
	return pgx.BeginFunc(ctx, b.pool, f)
}

// errRow is the row of a statement that was not sent.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// limitedRow frees its slot when scanned (pgxpool returns the connection
// then).
type limitedRow struct {
	pgx.Row
	free func()
}

func (r *limitedRow) Scan(dest ...any) error {
	defer r.free()
	return r.Row.Scan(dest...)
}

// limitedRows frees its slot when closed or read to the end (pgxpool
// returns the connection then).
type limitedRows struct {
	pgx.Rows
	free  func()
	freed bool
}

func (r *limitedRows) release() {
	if !r.freed {
		r.freed = true
		r.free()
	}
}

func (r *limitedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.release()
	return false
}

func (r *limitedRows) Close() {
	r.Rows.Close()
	r.release()
}
