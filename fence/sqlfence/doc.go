// Package sqlfence fences writes to a SQL database (PostgreSQL or SQLite,
// through database/sql) with a term's token: a deposed leader's late
// transaction is rejected with [fence.ErrStale]. Package fence describes
// the pattern and what fencing cannot protect.
//
// [Fence.Check] runs inside the caller's *sql.Tx: it records the token in a
// fence table (one row per resource; [Fence.CreateTable] or [Fence.DDL]) and
// fails with [fence.ErrStale] when a higher one is recorded, so the check
// and the caller's writes commit or roll back together:
//
//	f := sqlfence.Fence{Dialect: sqlfence.Postgres}
//	if err := f.Check(ctx, tx, "ingest", term.Token()); errors.Is(err, fence.ErrStale) {
//		// A later term has written: roll back, and stop.
//	}
//
// It is correct under concurrent transactions at the default isolation
// level of PostgreSQL and SQLite; [Fence.Check] explains why, and how
// SQLite's locking wants the transaction begun. [Fence.Claim] claims the
// resource at the start of a term, before the term reads anything (see
// package fence and simba.WithClaim).
//
// The package imports database/sql and no driver: the program chooses its
// own (github.com/jackc/pgx/v5/stdlib, modernc.org/sqlite, ...). Errors
// have the prefix "simba/fence: "; a rejected token is a
// [*fence.StaleError], bad input matches [fence.ErrInvalidArgument].
package sqlfence
