package sqlfence_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	_ "modernc.org/sqlite"             // the "sqlite" driver

	"github.com/simba-go/simba/fence/sqlfence"
	"github.com/simba-go/simba/internal/fencetest"
)

// sqlDB is a database for one test, with a fence table of its own.
type sqlDB struct {
	db    *sql.DB
	fence sqlfence.Fence
	// table is a name for a data table of the test's own.
	table string
}

// postgresDB opens the PostgreSQL server of SIMBA_PG_DSN (skipping the test
// without one) and makes a fence table for the test, dropped when it ends.
func postgresDB(t testing.TB) *sqlDB {
	t.Helper()
	dsn := os.Getenv(fencetest.EnvPG)
	if dsn == "" {
		fencetest.Unavailable(t, "PostgreSQL", fencetest.EnvPG)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	name := fencetest.UniqueName(t)
	d := &sqlDB{db: db, fence: sqlfence.Fence{Dialect: sqlfence.Postgres, Table: name + "_fence"}, table: name}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), fencetest.OpTimeout)
		defer cancel()
		for _, tbl := range []string{d.fence.Table, d.table} {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+tbl); err != nil {
				t.Errorf("drop %s: %v", tbl, err)
			}
		}
		db.Close()
	})
	if err := d.fence.CreateTable(fencetest.Ctx(t), db); err != nil {
		t.Fatal(err)
	}
	return d
}

// sqliteDSN returns the DSN of the SQLite database file path: WAL, a busy
// timeout, no fsync at commit, and BEGIN in mode txlock.
func sqliteDSN(path, txlock string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)&_pragma=synchronous(normal)&_txlock=" + txlock
}

// sqliteDB opens a SQLite database in a file of the test's own and makes a
// fence table in it. txlock is "immediate" or "deferred".
func sqliteDB(t testing.TB, txlock string) *sqlDB {
	t.Helper()
	return sqliteAt(t, filepath.Join(t.TempDir(), "fence.db"), txlock)
}

// sqliteAt is sqliteDB on the database file path.
func sqliteAt(t testing.TB, path, txlock string) *sqlDB {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(path, txlock))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	t.Cleanup(func() { db.Close() })
	d := &sqlDB{db: db, fence: sqlfence.Fence{Dialect: sqlfence.SQLite}, table: fencetest.UniqueName(t)}
	if err := d.fence.CreateTable(fencetest.Ctx(t), db); err != nil {
		t.Fatal(err)
	}
	return d
}

// sqlDialects runs f for SQLite and, when there is a server, PostgreSQL.
func sqlDialects(t *testing.T, f func(t *testing.T, d *sqlDB)) {
	t.Run("sqlite", func(t *testing.T) { f(t, sqliteDB(t, "immediate")) })
	t.Run("postgres", func(t *testing.T) { f(t, postgresDB(t)) })
}
