package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
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

// boundedBatch runs a batch (see batch) within a slot.
func (b *Backend) boundedBatch(ctx, stop context.Context, stmts []string, final string, args []any, dest ...any) error {
	if err := b.lim.TakeUntil(ctx, stop); err != nil {
		return err
	}
	defer b.lim.Free()
	return b.batch(ctx, stmts, final, args, dest...)
}

// txTries is how many times batch runs a transaction that InnoDB rolled
// back for a deadlock or a lock wait timeout.
const txTries = 4

// batch runs stmts as one READ COMMITTED transaction in one round trip
// (one COM_QUERY of several statements), then the SELECT final, whose one
// row it scans into dest; args are the placeholders' values of stmts and
// final, in their order (the driver interpolates them: see
// needMultiStatements).
//
// One round trip, so that no lock is ever held on the server while it
// waits for the client: a transaction of several round trips whose client
// was cut off stays open on the server, its locks held, until the server
// notices (wait_timeout, eight hours by default), and a waiter's deletion
// of the cut-off holder's session waited for it as long
// (TestLinkCutRevokesBeforeTakeover found it). The statements pass what
// the next ones need in user variables (@simba_…), which each batch sets
// first. A batch whose packet the network holds runs, whole, when it
// arrives, with its checks made then.
//
// When a statement fails, the server runs none of the rest: the
// transaction is left open, so the connection is dropped (closing it
// rolls the transaction back) rather than returned to the pool. A
// deadlock or a lock wait timeout runs the batch again, up to txTries
// times. READ COMMITTED: each statement reads the latest committed rows,
// and InnoDB takes no gap locks for the backend's searches.
func (b *Backend) batch(ctx context.Context, stmts []string, final string, args []any, dest ...any) error {
	text := "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\nSTART TRANSACTION;\n" + strings.Join(stmts, ";\n") + ";\nCOMMIT;\n" + final
	var err error
	for try := 0; try < txTries; try++ {
		err = b.batchOnce(ctx, text, args, dest)
		if !retryable(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (b *Backend) batchOnce(ctx context.Context, text string, args []any, dest []any) (err error) {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// The transaction may be open: never back in the pool.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	}()
	rows, err := conn.QueryContext(ctx, text, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	scanned := false
	for {
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			scanned = true
		}
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if !scanned && len(dest) > 0 {
		return errors.New("simba/mysql: a batch returned no row")
	}
	return nil
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
