package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/fence/sqlfence"
	"github.com/simba-go/simba/internal/fencetest"
)

// checkTx runs Check in a transaction of its own and commits it when the
// check passes.
func checkTx(t *testing.T, d *sqlDB, resource string, token uint64) error {
	t.Helper()
	ctx := fencetest.Ctx(t)
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.fence.Check(ctx, tx, resource, token); err != nil {
		if rerr := tx.Rollback(); rerr != nil {
			t.Fatalf("rollback after %v: %v", err, rerr)
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return nil
}

func highestSQL(t *testing.T, d *sqlDB, resource string) (uint64, bool) {
	t.Helper()
	tok, ok, err := d.fence.Highest(fencetest.Ctx(t), d.db, resource)
	if err != nil {
		t.Fatal(err)
	}
	return tok, ok
}

func TestSQLCheck(t *testing.T) {
	sqlDialects(t, func(t *testing.T, d *sqlDB) {
		if _, ok := highestSQL(t, d, "ingest"); ok {
			t.Fatal("a token is recorded before any check")
		}
		steps := []struct {
			token   uint64
			stale   bool
			highest uint64
		}{
			{token: 5, highest: 5},
			{token: 5, highest: 5}, // equal: the same term writes again
			{token: 4, stale: true, highest: 5},
			{token: 0, stale: true, highest: 5},
			{token: 9, highest: 9},
			{token: 6, stale: true, highest: 9},
			{token: math.MaxInt64, highest: math.MaxInt64},
			{token: math.MaxInt64 - 1, stale: true, highest: math.MaxInt64},
		}
		for i, s := range steps {
			err := checkTx(t, d, "ingest", s.token)
			if s.stale {
				var se *fence.StaleError
				if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) {
					t.Fatalf("step %d: Check(%d) = %v, want a *StaleError", i, s.token, err)
				}
				if se.Resource != "ingest" || se.Token != s.token || se.Highest != s.highest {
					t.Errorf("step %d: %+v, want resource ingest, token %d, highest %d", i, *se, s.token, s.highest)
				}
				if !strings.HasPrefix(err.Error(), "simba/fence: ") {
					t.Errorf("error %q lacks the package prefix", err)
				}
			} else if err != nil {
				t.Fatalf("step %d: Check(%d) = %v, want nil", i, s.token, err)
			}
			if got, ok := highestSQL(t, d, "ingest"); !ok || got != s.highest {
				t.Errorf("step %d: highest %d (%v), want %d", i, got, ok, s.highest)
			}
		}
		// Resources are independent, and any string names one.
		for _, r := range []string{"", "ingest/other", "ünïcode ☃", "ingest "} {
			if err := checkTx(t, d, r, 1); err != nil {
				t.Errorf("resource %q: Check(1) = %v", r, err)
			}
		}
		if got, _ := highestSQL(t, d, "ingest"); got != math.MaxInt64 {
			t.Errorf("other resources changed ingest's token to %d", got)
		}
	})
}

// TestSQLRollback checks that the recorded token is part of the caller's
// transaction: rolled back with it, and committed with its writes.
func TestSQLRollback(t *testing.T) {
	sqlDialects(t, func(t *testing.T, d *sqlDB) {
		ctx := fencetest.Ctx(t)
		if _, err := d.db.ExecContext(ctx, "CREATE TABLE "+d.table+" (id INTEGER PRIMARY KEY, value TEXT NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		if err := checkTx(t, d, "r", 3); err != nil {
			t.Fatal(err)
		}
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.fence.Check(ctx, tx, "r", 7); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+d.table+" (id, value) VALUES (1, 'seven')"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if got, _ := highestSQL(t, d, "r"); got != 3 {
			t.Errorf("after a rollback the highest token is %d, want 3", got)
		}
		// Token 5 is accepted: 7 was never committed.
		tx, err = d.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.fence.Check(ctx, tx, "r", 5); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+d.table+" (id, value) VALUES (1, 'five')"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		var v string
		if err := d.db.QueryRowContext(ctx, "SELECT value FROM "+d.table+" WHERE id = 1").Scan(&v); err != nil || v != "five" {
			t.Errorf("value %q (%v), want five", v, err)
		}
		if got, _ := highestSQL(t, d, "r"); got != 5 {
			t.Errorf("highest token %d, want 5", got)
		}
		// A stale check leaves the transaction usable: it can read, and
		// roll back cleanly.
		tx, err = d.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.fence.Check(ctx, tx, "r", 4); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Check(4) = %v, want ErrStale", err)
		}
		if tok, ok, err := d.fence.Highest(ctx, tx, "r"); err != nil || !ok || tok != 5 {
			t.Errorf("Highest in the transaction of a stale check: %d, %v, %v", tok, ok, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSQLInvalid(t *testing.T) {
	d := sqliteDB(t, "immediate")
	ctx := fencetest.Ctx(t)
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	cases := []struct {
		name string
		err  error
	}{
		{"no dialect", sqlfence.Fence{}.Check(ctx, tx, "r", 1)},
		{"unknown dialect", sqlfence.Fence{Dialect: 7}.Check(ctx, tx, "r", 1)},
		{"injection", sqlfence.Fence{Dialect: sqlfence.SQLite, Table: "x; DROP TABLE y"}.Check(ctx, tx, "r", 1)},
		{"three parts", sqlfence.Fence{Dialect: sqlfence.SQLite, Table: "a.b.c"}.Check(ctx, tx, "r", 1)},
		{"leading digit", sqlfence.Fence{Dialect: sqlfence.SQLite, Table: "1fence"}.Check(ctx, tx, "r", 1)},
		{"too long", sqlfence.Fence{Dialect: sqlfence.SQLite, Table: strings.Repeat("f", 64)}.Check(ctx, tx, "r", 1)},
		{"nil tx", d.fence.Check(ctx, nil, "r", 1)},
		{"token above MaxInt64", d.fence.Check(ctx, tx, "r", math.MaxInt64+1)},
		{"nil handle", d.fence.CreateTable(ctx, nil)},
	}
	for _, c := range cases {
		if !errors.Is(c.err, fence.ErrInvalidArgument) || !strings.HasPrefix(c.err.Error(), "simba/fence: ") {
			t.Errorf("%s: %v, want ErrInvalidArgument", c.name, c.err)
		}
	}
	if _, _, err := (sqlfence.Fence{}).Highest(ctx, d.db, "r"); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Errorf("Highest without a dialect: %v", err)
	}
	if _, err := (sqlfence.Fence{}).DDL(); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Errorf("DDL without a dialect: %v", err)
	}
	// Nothing was recorded by the refused checks.
	if _, ok := highestSQL(t, d, "r"); ok {
		t.Error("a refused check recorded a token")
	}
}

func TestSQLDDL(t *testing.T) {
	for _, c := range []struct {
		f    sqlfence.Fence
		want string
	}{
		{sqlfence.Fence{Dialect: sqlfence.Postgres}, `CREATE TABLE IF NOT EXISTS "simba_fence" (resource text PRIMARY KEY, token bigint NOT NULL CHECK (token >= 0))`},
		{sqlfence.Fence{Dialect: sqlfence.SQLite}, `CREATE TABLE IF NOT EXISTS "simba_fence" (resource TEXT NOT NULL PRIMARY KEY, token INTEGER NOT NULL CHECK (token >= 0))`},
		{sqlfence.Fence{Dialect: sqlfence.Postgres, Table: "ops.Fences"}, `CREATE TABLE IF NOT EXISTS "ops"."Fences" (resource text PRIMARY KEY, token bigint NOT NULL CHECK (token >= 0))`},
	} {
		got, err := c.f.DDL()
		if err != nil || got != c.want {
			t.Errorf("%+v: DDL() = %q, %v\nwant %q", c.f, got, err, c.want)
		}
	}
	if sqlfence.Postgres.String() != "postgres" || sqlfence.SQLite.String() != "sqlite" || sqlfence.Dialect(0).String() != "Dialect(0)" {
		t.Error("Dialect.String")
	}
}

// TestSQLQualifiedTable uses a schema-qualified, mixed-case table name.
func TestSQLQualifiedTable(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		d := sqliteDB(t, "immediate")
		d.fence.Table = "main.Fence_Table"
		qualified(t, d)
	})
	t.Run("postgres", func(t *testing.T) {
		d := postgresDB(t)
		ctx := fencetest.Ctx(t)
		schema := d.table + "_S"
		if _, err := d.db.ExecContext(ctx, `CREATE SCHEMA "`+schema+`"`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := d.db.ExecContext(context.Background(), `DROP SCHEMA "`+schema+`" CASCADE`); err != nil {
				t.Error(err)
			}
		})
		d.fence.Table = schema + ".Fence_Table"
		qualified(t, d)
	})
}

func qualified(t *testing.T, d *sqlDB) {
	if err := d.fence.CreateTable(fencetest.Ctx(t), d.db); err != nil {
		t.Fatal(err)
	}
	if err := d.fence.CreateTable(fencetest.Ctx(t), d.db); err != nil {
		t.Fatalf("CreateTable again: %v", err)
	}
	if err := checkTx(t, d, "r", 2); err != nil {
		t.Fatal(err)
	}
	if err := checkTx(t, d, "r", 1); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Check(1) after 2 = %v", err)
	}
}

// TestSQLiteDeferredBusy shows the trap of deferred SQLite transactions: one
// that has read and then checks while another holds the write lock gets
// SQLITE_BUSY at once, which Check returns (not ErrStale, recording
// nothing); with BEGIN IMMEDIATE the same sequence waits and succeeds.
func TestSQLiteDeferredBusy(t *testing.T) {
	path := t.TempDir() + "/busy.db"
	for _, mode := range []string{"deferred", "immediate"} {
		t.Run(mode, func(t *testing.T) {
			d := sqliteAt(t, path, mode)
			ctx := fencetest.Ctx(t)
			resource := "busy-" + mode
			if err := checkTx(t, d, resource, 1); err != nil {
				t.Fatal(err)
			}
			reader, err := d.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer reader.Rollback()
			if mode == "deferred" {
				// The reader's snapshot starts here.
				if _, _, err := d.fence.Highest(ctx, reader, resource); err != nil {
					t.Fatal(err)
				}
			}
			writerDone := make(chan error, 1)
			go func() {
				tx, err := d.db.BeginTx(ctx, nil)
				if err != nil {
					writerDone <- err
					return
				}
				if err := d.fence.Check(ctx, tx, resource, 2); err != nil {
					tx.Rollback()
					writerDone <- err
					return
				}
				writerDone <- tx.Commit()
			}()
			if mode == "immediate" {
				// The reader holds the write lock from BEGIN: the other
				// transaction waits for it.
				if err := d.fence.Check(ctx, reader, resource, 3); err != nil {
					t.Fatalf("Check in an immediate transaction: %v", err)
				}
				if err := reader.Commit(); err != nil {
					t.Fatal(err)
				}
				if err := <-writerDone; !errors.Is(err, fence.ErrStale) {
					t.Fatalf("the waiting transaction's Check(2) after 3 = %v, want ErrStale", err)
				}
				return
			}
			if err := <-writerDone; err != nil {
				t.Fatalf("the other transaction: %v", err)
			}
			err = d.fence.Check(ctx, reader, resource, 3)
			if err == nil || errors.Is(err, fence.ErrStale) || !strings.Contains(strings.ToLower(err.Error()), "busy") {
				t.Fatalf("Check in a deferred transaction whose snapshot is out of date = %v, want SQLITE_BUSY", err)
			}
			reader.Rollback()
			if got, _ := highestSQL(t, d, resource); got != 2 {
				t.Errorf("highest %d, want 2", got)
			}
		})
	}
}

var _ sqlfence.Handle = (*sql.DB)(nil)
var _ sqlfence.Handle = (*sql.Tx)(nil)
var _ sqlfence.Handle = (*sql.Conn)(nil)

// TestPostgresRepeatableRead checks what Fence.Check says of the stricter
// isolation levels: a check whose snapshot predates another transaction's
// committed check fails with a serialization error, recording nothing.
func TestPostgresRepeatableRead(t *testing.T) {
	d := postgresDB(t)
	ctx := fencetest.Ctx(t)
	for _, level := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
		t.Run(level.String(), func(t *testing.T) {
			resource := "rr-" + level.String()
			if err := checkTx(t, d, resource, 5); err != nil {
				t.Fatal(err)
			}
			tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, _, err := d.fence.Highest(ctx, tx, resource); err != nil { // the snapshot
				t.Fatal(err)
			}
			if err := checkTx(t, d, resource, 6); err != nil {
				t.Fatal(err)
			}
			err = d.fence.Check(ctx, tx, resource, 7)
			if err == nil || errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), "40001") {
				t.Fatalf("Check at %v after a concurrent check committed: %v, want a serialization error", level, err)
			}
			tx.Rollback()
			if got, _ := highestSQL(t, d, resource); got != 6 {
				t.Errorf("highest %d, want 6", got)
			}
		})
	}
}
