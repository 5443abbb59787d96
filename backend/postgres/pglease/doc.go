// Package pglease fences the caller's PostgreSQL transaction with simba's
// own lease rows, for leaders elected by the PostgreSQL backend
// (github.com/simba-go/simba/backend/postgres) whose writes go to the same
// database: the transaction commits only while the term's lease is held
// with that token, and a deposed leader's write is refused with
// [fence.ErrStale] even when no newer leader has written anything, or
// none has been elected yet. No fence table and no claim are needed.
//
//	f := pglease.Fence{Schema: b.Schema()} // b the *postgres.Backend
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if err := f.CheckPgx(ctx, tx, term.Name(), term.Token()); err != nil {
//			return err // errors.Is(err, fence.ErrStale): the term is over; stop.
//		}
//		_, err := tx.Exec(ctx, "UPDATE cursor SET position = $1", position)
//		return err
//	})
//
// [Fence.CheckPgx] takes a pgx.Tx, [Fence.Check] a database/sql *sql.Tx
// (with the driver of github.com/jackc/pgx/v5/stdlib or any other). The
// check runs the backend's own fence query (postgres.LeaseFenceSQL), the
// one its fenced records use.
//
// # What is guaranteed
//
// The check passes when the term's candidacy row (lease, token) exists,
// its session row is alive by the database's clock and no candidacy is
// ahead of it (an expired one counts until a successor has deleted it):
// the term holds the lease. It then locks both rows FOR KEY
// SHARE until the transaction commits or rolls back. A successor takes the
// lease only after deleting the expired session's row (with its
// candidacies), and a release deletes the candidacy: both wait for that
// lock. So the successor's term begins after the transaction has ended,
// and every check of the old term made after that fails: no write of a
// deposed term commits once a successor holds, and none that passed its
// check lands inside a successor's term. The session's renewals go on
// meanwhile (KEY SHARE does not conflict with the renewal's UPDATE of a
// non-key column). A transaction that outlasts the TTL delays the
// successor by as much; it never overlaps it. Keep fenced transactions
// short, and bound them with the server's idle_in_transaction_session_timeout
// and statement_timeout so that a paused leader cannot delay its successor
// for long.
//
// The check is of the moment it runs: once it passed, the transaction's
// writes commit even if the session expires before the COMMIT (only no
// successor can have begun). Run it before the writes it guards; run it
// again just before COMMIT to narrow that window.
//
// At READ COMMITTED (PostgreSQL's default) the check waits for a takeover
// in progress and then fails. At REPEATABLE READ and SERIALIZABLE a check
// whose snapshot predates a takeover fails with a serialization error
// (SQLSTATE 40001): roll back; the term is over.
//
// The transaction must run on the database, and the schema, of the
// backend that elected the term, and the user needs SELECT and UPDATE on
// its candidacies and sessions tables (PostgreSQL requires UPDATE for FOR
// KEY SHARE) and SELECT on lease_names: the backend's own user has them.
//
// Errors have the prefix "simba/fence: "; a refused term is a
// [*fence.StaleError] whose Resource is the lease's name and Highest the
// lease's last granted token (Token itself when no candidate came after
// the term); bad input matches [fence.ErrInvalidArgument].
package pglease
