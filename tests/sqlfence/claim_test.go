package sqlfence_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/fence/sqlfence"
	"github.com/simba-go/simba/internal/fencetest"
)

// TestClaimPreventsLostUpdate is fencetest.ClaimPreventsLostUpdate on SQLite
// and PostgreSQL.
func TestClaimPreventsLostUpdate(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		fencetest.ClaimPreventsLostUpdate(t, func(t *testing.T) fencetest.CounterStore { return newSQLCounter(t, sqliteDB(t, "immediate")) })
	})
	t.Run("postgres", func(t *testing.T) {
		fencetest.ClaimPreventsLostUpdate(t, func(t *testing.T) fencetest.CounterStore { return newSQLCounter(t, postgresDB(t)) })
	})
}

func TestClaimStale(t *testing.T) {
	t.Run("sql", func(t *testing.T) {
		sqlDialects(t, func(t *testing.T, d *sqlDB) { fencetest.ClaimStale(t, newSQLCounter(t, d).Claim) })
	})
	t.Run("invalid", func(t *testing.T) {
		ctx := fencetest.Ctx(t)
		for _, err := range []error{
			sqlfence.Fence{Dialect: sqlfence.SQLite}.Claim(ctx, nil, "r", 1),
			sqlfence.Fence{}.Claim(ctx, nil, "r", 1),
		} {
			if !errors.Is(err, fence.ErrInvalidArgument) {
				t.Errorf("want ErrInvalidArgument, got %v", err)
			}
		}
	})
}

// sqlCounter is a counter in row 1 of a table of the test's own.
type sqlCounter struct {
	d   *sqlDB
	res string
}

func newSQLCounter(t *testing.T, d *sqlDB) *sqlCounter {
	ctx := fencetest.Ctx(t)
	for _, q := range []string{
		"CREATE TABLE " + d.table + " (id integer PRIMARY KEY, value integer NOT NULL)",
		"INSERT INTO " + d.table + " (id, value) VALUES (1, 0)",
	} {
		if _, err := d.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return &sqlCounter{d: d, res: "counter"}
}

func (c *sqlCounter) Load(ctx context.Context) (v int, err error) {
	err = c.d.db.QueryRowContext(ctx, "SELECT value FROM "+c.d.table+" WHERE id = 1").Scan(&v)
	return v, err
}

func (c *sqlCounter) Begin(ctx context.Context, token uint64, v int) (func() (bool, error), error) {
	tx, err := c.d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if err := c.d.fence.Check(ctx, tx, c.res, token); err != nil {
		tx.Rollback()
		if errors.Is(err, fence.ErrStale) {
			return func() (bool, error) { return false, nil }, nil
		}
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+c.d.table+" SET value = "+strconv.Itoa(v)+" WHERE id = 1"); err != nil {
		tx.Rollback()
		return nil, err
	}
	return func() (bool, error) { return true, tx.Commit() }, nil
}

func (c *sqlCounter) Claim(ctx context.Context, token uint64) error {
	return c.d.fence.Claim(ctx, c.d.db, c.res, token)
}

// ClaimWaits is true: a claim waits for the row's lock.
func (c *sqlCounter) ClaimWaits() bool { return true }
