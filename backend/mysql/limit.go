package mysql

import (
	"context"
	"database/sql"
)

// The backend's statements in flight whose number grows with the leases
// and records its sessions use are bounded (see WithMaxRequests) by a
// limit.Limiter: a statement waits for a slot, within its caller's ctx,
// before it asks the pool for a connection, and gives the slot back when
// it has returned the connection. database/sql hands out connections to
// waiters in no particular order, and a keep-alive asked for behind ten
// thousand Acquires would come back after its session's deadline; the
// bound keeps a connection that no bounded statement can take.
//
// stop is the session's or view's context. A statement that ended while
// it waited for a slot fails with an error wrapping limit.ErrNotSent: it
// was never sent, so it cannot have taken effect.

func (b *Backend) exec(ctx, stop context.Context, query string, args ...any) (sql.Result, error) {
	if err := b.lim.TakeUntil(ctx, stop); err != nil {
		return nil, err
	}
	defer b.lim.Free()
	return b.db.ExecContext(ctx, query, args...)
}

// query runs query and calls scan for each row, within a slot.
func (b *Backend) query(ctx, stop context.Context, scan func(*sql.Rows) error, query string, args ...any) error {
	if err := b.lim.TakeUntil(ctx, stop); err != nil {
		return err
	}
	defer b.lim.Free()
	return queryRows(ctx, b.db, scan, query, args...)
}

// querier is what queryRows needs: *sql.DB, *sql.Conn and *sql.Tx have it.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryRows runs query on q and calls scan for each row.
func queryRows(ctx context.Context, q querier, scan func(*sql.Rows) error, query string, args ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// boundedTx runs f in a transaction (see inTx) within a slot.
func (b *Backend) boundedTx(ctx, stop context.Context, f func(*sql.Tx) error) error {
	if err := b.lim.TakeUntil(ctx, stop); err != nil {
		return err
	}
	defer b.lim.Free()
	return b.inTx(ctx, f)
}

// txTries is how many times inTx runs a transaction that InnoDB rolled
// back for a deadlock or a lock wait timeout.
const txTries = 4

// inTx runs f in a READ COMMITTED transaction and commits it; f's error
// rolls it back. A deadlock or a lock wait timeout (InnoDB rolled the
// transaction back) runs it again, up to txTries times. READ COMMITTED:
// each statement reads the latest committed rows, and InnoDB takes no gap
// locks for the backend's searches, which would otherwise make
// registrations and deletions of one name deadlock.
func (b *Backend) inTx(ctx context.Context, f func(*sql.Tx) error) error {
	var err error
	for try := 0; try < txTries; try++ {
		err = b.tryTx(ctx, f)
		if !retryable(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (b *Backend) tryTx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// queryRow runs a query of one row within a slot; the slot is freed when
// the row is scanned.
func (b *Backend) queryRow(ctx, stop context.Context, query string, args ...any) rowScanner {
	if err := b.lim.TakeUntil(ctx, stop); err != nil {
		return rowScanner{err: err}
	}
	return rowScanner{row: b.db.QueryRowContext(ctx, query, args...), free: b.lim.Free}
}

// rowScanner is a row whose Scan frees its slot.
type rowScanner struct {
	row  *sql.Row
	err  error
	free func()
}

func (r rowScanner) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.free()
	return r.row.Scan(dest...)
}
