package pglease

import (
	"context"
	"database/sql"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/fence"
)

// Fence is the fence of the terms elected by a PostgreSQL backend, checked
// on the backend's lease rows. Fence values are plain values, safe for
// concurrent use.
type Fence struct {
	// Schema is the schema of the backend's tables, the name given to
	// postgres.WithSchema (Backend.Schema returns it). Empty means
	// "simba", the backend's default.
	Schema string
}

// Check fences the caller's transaction tx with the term that holds lease
// with token (simba.Term's Name and Token): it returns nil when the term
// holds the lease, having locked its rows until tx ends (see the package
// documentation), and otherwise a [*fence.StaleError] matching
// [fence.ErrStale]; then roll tx back and stop working in the term.
//
// Other errors are those of the database, wrapped (a serialization
// failure at REPEATABLE READ or SERIALIZABLE among them: the term is over
// too), and errors matching [fence.ErrInvalidArgument] for a nil tx, an
// invalid lease name or schema name, or a token of 0 or above
// math.MaxInt64. After an error, roll tx back.
func (f Fence) Check(ctx context.Context, tx *sql.Tx, lease string, token uint64) error {
	query, err := f.query(lease, token)
	if err != nil {
		return err
	}
	if tx == nil {
		return fence.Invalid("nil transaction")
	}
	var held bool
	var last int64
	err = tx.QueryRowContext(ctx, query, lease, int64(token)).Scan(&held, &last)
	return f.result(lease, token, held, last, err)
}

// CheckPgx is [Fence.Check] for a transaction of pgx: a pgx.Tx of a
// *pgx.Conn or of a *pgxpool.Pool.
func (f Fence) CheckPgx(ctx context.Context, tx pgx.Tx, lease string, token uint64) error {
	query, err := f.query(lease, token)
	if err != nil {
		return err
	}
	if tx == nil {
		return fence.Invalid("nil transaction")
	}
	var held bool
	var last int64
	err = tx.QueryRow(ctx, query, lease, int64(token)).Scan(&held, &last)
	return f.result(lease, token, held, last, err)
}

// query checks the arguments and returns the check's query.
func (f Fence) query(lease string, token uint64) (string, error) {
	if !backend.ValidName(lease) {
		return "", fence.Invalid("lease name %q: want 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", lease)
	}
	if token == 0 || token > math.MaxInt64 {
		return "", fence.Invalid("token %d of lease %q: simba's tokens are from 1 to %d", token, lease, int64(math.MaxInt64))
	}
	query, err := postgres.LeaseFenceSQL(f.Schema)
	if err != nil {
		return "", fence.Invalid("%v", err)
	}
	return query, nil
}

// result is the outcome of a check that returned held and last, or err.
func (f Fence) result(lease string, token uint64, held bool, last int64, err error) error {
	if err != nil {
		return fmt.Errorf("simba/fence: check the lease %q with token %d in schema %q: %w", lease, token, f.schema(), err)
	}
	if !held {
		return &fence.StaleError{Resource: lease, Token: token, Highest: uint64(max(last, 0))}
	}
	return nil
}

// schema returns the schema's name, with the default.
func (f Fence) schema() string {
	if f.Schema == "" {
		return "simba"
	}
	return f.Schema
}
