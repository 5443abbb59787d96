package mylease

import (
	"context"
	"database/sql"
	"fmt"
	"math"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/fence"
)

// Fence is the fence of the terms elected by a MySQL backend, checked on
// the backend's lease rows. Fence values are plain values, safe for
// concurrent use.
type Fence struct {
	// TablePrefix is the prefix of the backend's tables, the one given to
	// mysql.WithTablePrefix (Backend.TablePrefix returns it). Empty means
	// "simba_", the backend's default.
	TablePrefix string
}

// Check fences the caller's transaction tx with the term that holds lease
// with token (simba.Term's Name and Token): it returns nil when the term
// holds the lease, having locked its rows until tx ends (see the package
// documentation), and otherwise a [*fence.StaleError] matching
// [fence.ErrStale]; then roll tx back and stop working in the term.
//
// Other errors are those of the database, wrapped (a deadlock or a lock
// wait timeout among them), and errors matching [fence.ErrInvalidArgument]
// for a nil tx, an invalid lease name or table prefix, or a token of 0 or
// above math.MaxInt64. After an error, roll tx back.
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
	err = tx.QueryRowContext(ctx, query, mysql.LeaseFenceArgs(lease, int64(token))...).Scan(&held, &last)
	if err != nil {
		return fmt.Errorf("simba/fence: check the lease %q with token %d in the tables of prefix %q: %w", lease, token, f.prefix(), err)
	}
	if !held {
		return &fence.StaleError{Resource: lease, Token: token, Highest: uint64(max(last, 0))}
	}
	return nil
}

// query checks the arguments and returns the check's query.
func (f Fence) query(lease string, token uint64) (string, error) {
	if !backend.ValidName(lease) {
		return "", fence.Invalid("lease name %q: want 1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", lease)
	}
	if token == 0 || token > math.MaxInt64 {
		return "", fence.Invalid("token %d of lease %q: simba's tokens are from 1 to %d", token, lease, int64(math.MaxInt64))
	}
	query, err := mysql.LeaseFenceSQL(f.TablePrefix)
	if err != nil {
		return "", fence.Invalid("%v", err)
	}
	return query, nil
}

// prefix returns the table prefix, with the default.
func (f Fence) prefix() string {
	if f.TablePrefix == "" {
		return "simba_"
	}
	return f.TablePrefix
}
