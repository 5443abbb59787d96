package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/simba-go/simba/fence"
)

// Dialect is the SQL dialect of a fence table's database.
type Dialect int

const (
	// Postgres is PostgreSQL, for instance through the driver of
	// github.com/jackc/pgx/v5/stdlib.
	Postgres Dialect = iota + 1
	// SQLite is SQLite 3.35 or later (for RETURNING), for instance through
	// modernc.org/sqlite.
	SQLite
)

// String returns "postgres" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// DefaultTable is the fence table's name when [Fence].Table is empty.
const DefaultTable = "simba_fence"

// Handle is a database handle for the statements that run outside a
// check: *sql.DB, *sql.Conn and *sql.Tx have these methods.
type Handle interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Fence is the fence of resources kept in a SQL database: a table with one row
// per resource, holding the highest token recorded for it. Set Dialect; the
// zero Table means [DefaultTable]. Fence values are plain values, safe for
// concurrent use.
//
// [Fence.Check] runs inside the caller's transaction, so the check, the
// recorded token and the caller's writes commit or roll back together. The
// table is made by [Fence.CreateTable], or by a migration running the
// statement of [Fence.DDL]; with the default name:
//
//	-- PostgreSQL
//	CREATE TABLE IF NOT EXISTS "simba_fence" (resource text PRIMARY KEY, token bigint NOT NULL CHECK (token >= 0))
//	-- SQLite
//	CREATE TABLE IF NOT EXISTS "simba_fence" (resource TEXT NOT NULL PRIMARY KEY, token INTEGER NOT NULL CHECK (token >= 0))
//
// Tokens are stored as signed 64-bit integers: a token above math.MaxInt64
// is refused with [fence.ErrInvalidArgument]. simba's backends hand out tokens far
// below that (etcd revisions and ZooKeeper zxids are themselves int64).
type Fence struct {
	// Dialect is the database's dialect: Postgres or SQLite.
	Dialect Dialect
	// Table is the fence table's name, optionally qualified by a schema
	// ("fences.simba"): letters, digits and underscores, not starting
	// with a digit, at most 63 characters per part. Empty means
	// DefaultTable.
	Table string
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// table returns the table's quoted name, or an error matching
// fence.ErrInvalidArgument.
func (s Fence) table() (string, error) {
	if s.Dialect != Postgres && s.Dialect != SQLite {
		return "", fence.Invalid("unknown SQL dialect %v", s.Dialect)
	}
	name := s.Table
	if name == "" {
		name = DefaultTable
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", fence.Invalid("table name %q has more than two parts", name)
	}
	for i, p := range parts {
		if !identifier.MatchString(p) {
			return "", fence.Invalid("table name %q: want letters, digits and underscores, not starting with a digit, at most 63 per part", name)
		}
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, "."), nil
}

// DDL returns the statement that creates the fence table if it does not
// exist, for migration tools. It returns an error matching
// [fence.ErrInvalidArgument] for an unknown dialect or a malformed table name.
func (s Fence) DDL() (string, error) {
	t, err := s.table()
	if err != nil {
		return "", err
	}
	if s.Dialect == Postgres {
		return "CREATE TABLE IF NOT EXISTS " + t + " (resource text PRIMARY KEY, token bigint NOT NULL CHECK (token >= 0))", nil
	}
	return "CREATE TABLE IF NOT EXISTS " + t + " (resource TEXT NOT NULL PRIMARY KEY, token INTEGER NOT NULL CHECK (token >= 0))", nil
}

// CreateTable creates the fence table if it does not exist (see [Fence.DDL]).
// Run it once, when the application's schema is set up: concurrent CREATE
// TABLE IF NOT EXISTS statements can fail on PostgreSQL.
func (s Fence) CreateTable(ctx context.Context, db Handle) error {
	ddl, err := s.DDL()
	if err != nil {
		return err
	}
	if db == nil {
		return fence.Invalid("nil database handle")
	}
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("simba/fence: create the fence table: %w", err)
	}
	return nil
}

// Check fences the caller's transaction tx with token for resource: it
// records token as the resource's highest if no higher token is recorded,
// and returns nil; otherwise it records nothing and returns a [*fence.StaleError],
// matching [fence.ErrStale]. The record is part of tx: it commits with the
// caller's writes, and a rollback undoes both. After a stale token, roll tx
// back.
//
// Call Check before the writes it guards, and keep tx short: from Check to
// the end of tx, other transactions that check the same resource wait (see
// below).
//
// Other errors are those of the database, wrapped, and errors matching
// [fence.ErrInvalidArgument] for a nil tx, a token above math.MaxInt64 or a bad
// dialect or table name. A database error leaves tx in whatever state the
// database put it in; roll it back.
//
// Why it is correct at the database's default isolation level: Check runs
// one statement that reads and writes the resource's row at once:
//
//	INSERT INTO simba_fence AS f (resource, token) VALUES ($1, $2)
//	ON CONFLICT (resource) DO UPDATE SET token = excluded.token
//	WHERE f.token <= excluded.token
//	RETURNING token
//
// and no row back means the token was stale.
//
// PostgreSQL (READ COMMITTED): when the row exists, ON CONFLICT DO UPDATE
// locks it, whether or not the WHERE holds, and evaluates the WHERE on the
// latest committed version of the row, not on the transaction's snapshot. A
// concurrent transaction that has checked the same resource holds that lock
// until it commits or rolls back, so concurrent checks of one resource
// serialize on the row: each compares against the token of the last
// committed check. When the row does not exist yet, the primary key makes a
// concurrent insertion wait for the first one's transaction, then take the
// update path. So two transactions that both passed Check for a resource
// committed one after the other, the later with the higher or equal token,
// and no transaction with a lower token commits after a higher one did. At
// REPEATABLE READ and SERIALIZABLE the same holds, but a check whose
// snapshot predates the last committed check of the resource fails with a
// serialization error (SQLSTATE 40001), whatever its token: retry the
// transaction.
//
// SQLite: transactions are serializable, and writes serialize on the
// database's write lock, held from the first write until commit or rollback.
// The statement is a write, so it runs holding that lock, and in WAL mode
// SQLite lets a transaction write only if its snapshot is the latest, so it
// always compares against the last committed token. The trap is liveness,
// not safety: a deferred transaction (SQLite's default BEGIN) that has
// already read must upgrade to the write lock, and when another connection
// holds it SQLite returns SQLITE_BUSY (in WAL mode, SQLITE_BUSY_SNAPSHOT once
// the other commits) at once instead of waiting. Check returns that error,
// wrapped; nothing is recorded, and the transaction must be rolled back and
// retried. Avoid it by beginning write transactions with BEGIN IMMEDIATE
// (modernc.org/sqlite: "_txlock=immediate" in the DSN) or by calling Check
// first in the transaction, and let waits for the lock last with a busy
// timeout ("_pragma=busy_timeout(5000)"), for instance:
//
//	file:app.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)&_txlock=immediate
func (s Fence) Check(ctx context.Context, tx *sql.Tx, resource string, token uint64) error {
	t, err := s.table()
	if err != nil {
		return err
	}
	if tx == nil {
		return fence.Invalid("nil transaction")
	}
	if token > math.MaxInt64 {
		return fence.Invalid("token %d does not fit the fence table's signed 64-bit column", token)
	}
	var recorded int64
	err = tx.QueryRowContext(ctx, s.upsert(t), resource, int64(token)).Scan(&recorded)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("simba/fence: check %q: %w", resource, err)
	}
	// The row exists, is locked by tx, and holds a higher token.
	var highest int64
	if err := tx.QueryRowContext(ctx, s.selectToken(t), resource).Scan(&highest); err != nil {
		return fmt.Errorf("simba/fence: check %q: token %d is stale; reading the highest token: %w", resource, token, err)
	}
	return &fence.StaleError{Resource: resource, Token: token, Highest: uint64(highest)}
}

// Highest returns the highest token recorded for resource, with ok false
// when none is, as db sees it: outside a transaction that is the last
// committed one.
func (s Fence) Highest(ctx context.Context, db Handle, resource string) (token uint64, ok bool, err error) {
	t, err := s.table()
	if err != nil {
		return 0, false, err
	}
	if db == nil {
		return 0, false, fence.Invalid("nil database handle")
	}
	var highest int64
	err = db.QueryRowContext(ctx, s.selectToken(t), resource).Scan(&highest)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("simba/fence: read the highest token of %q: %w", resource, err)
	}
	return uint64(highest), true, nil
}

// upsert returns the statement of Check for the quoted table t.
func (s Fence) upsert(t string) string {
	p1, p2 := "$1", "$2"
	if s.Dialect == SQLite {
		p1, p2 = "?1", "?2"
	}
	return "INSERT INTO " + t + " AS f (resource, token) VALUES (" + p1 + ", " + p2 + ") " +
		"ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token " +
		"RETURNING token"
}

// selectToken returns the statement reading a resource's token in t.
func (s Fence) selectToken(t string) string {
	p1 := "$1"
	if s.Dialect == SQLite {
		p1 = "?1"
	}
	return "SELECT token FROM " + t + " WHERE resource = " + p1
}

// TxBeginner begins transactions: *sql.DB and *sql.Conn.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Claim records token as resource's highest in a transaction of its own
// and commits it, so that from then on every transaction checked with a
// lower token is rejected; it returns a [*fence.StaleError], matching
// [fence.ErrStale], when a higher token is recorded already. Call it at the
// start of a term, before reading the state the term's writes depend on
// (see simba.WithClaim).
//
// Claim waits for any transaction that has checked the same resource and
// not ended yet (PostgreSQL: the fence row's lock; SQLite: the write lock,
// within the busy timeout), so a deposed leader's transaction that had
// passed its check commits before the claim, and is seen by what the new
// leader reads afterwards, or fails its check after it. A leader paused
// inside such a transaction delays the claim until it resumes or its
// connection ends: on PostgreSQL bound that with the server's
// idle_in_transaction_session_timeout, and bound the wait with ctx.
//
// Errors are those of [Fence.Check] and of the database's BeginTx and
// Commit, wrapped, and [fence.ErrInvalidArgument] for a nil db.
func (s Fence) Claim(ctx context.Context, db TxBeginner, resource string, token uint64) error {
	if _, err := s.table(); err != nil {
		return err
	}
	if db == nil {
		return fence.Invalid("nil database handle")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("simba/fence: claim %q: %w", resource, err)
	}
	defer tx.Rollback() // a no-op after Commit
	if err := s.Check(ctx, tx, resource, token); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("simba/fence: claim %q: commit: %w", resource, err)
	}
	return nil
}
