// Package mytest gives tests a MariaDB server: the DSN of the one that
// scripts/with-mariadb.sh started (SIMBA_MYSQL_DSN, in go-sql-driver/mysql's
// format), skipping the test when there is none (a failure under
// SIMBA_REQUIRE_SERVERS=1); a database of a test's own, dropped at its end
// ([Database], [DatabaseDSN]); connections ended by the server, a fault
// ([Kill], [MustKill]); and, for the fault tests that crash, restart or
// pause a server, a [Server] of a test's own ([StartServer]).
package mytest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/internal/servers"
)

// Environment of the tests, set by scripts/with-mariadb.sh.
const (
	// EnvDSN names the variable holding the MariaDB server's DSN, in
	// go-sql-driver/mysql's format
	// (user:password@tcp(127.0.0.1:port)/database?parseTime=true).
	EnvDSN = "SIMBA_MYSQL_DSN"
	// EnvRequire set to 1 makes a missing server a failure.
	EnvRequire = servers.EnvRequire
)

// timeout bounds each of the helpers' own statements and connections.
const timeout = 20 * time.Second

// DSN returns the test server's DSN, or skips t (fails it under
// SIMBA_REQUIRE_SERVERS=1) when SIMBA_MYSQL_DSN is not set.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		servers.Unavailable(t, "MariaDB", EnvDSN)
	}
	return dsn
}

// UniqueName returns a name for the test's own database, table or user:
// lower-case letters, digits and underscores, at most 50 characters.
func UniqueName(t testing.TB) string { return servers.UniqueName(t) }

// WithDatabase returns dsn with its database replaced by db, every other
// setting kept.
func WithDatabase(dsn, db string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("mytest: parsing the DSN: %w", err)
	}
	cfg.DBName = db
	return cfg.FormatDSN(), nil
}

// DSNFor returns the test server's DSN (see DSN) with database db in place
// of its own.
func DSNFor(t testing.TB, db string) string {
	t.Helper()
	dsn, err := WithDatabase(DSN(t), db)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return dsn
}

// Database creates, on the test server, a database of the test's own (see
// UniqueName) and returns its name; at the end of the test it is dropped
// with everything in it.
func Database(t testing.TB) string {
	t.Helper()
	dsn := DSN(t)
	name := UniqueName(t)
	if err := execOn(dsn, []string{"CREATE DATABASE " + quoteName(name)}); err != nil {
		t.Fatalf("mytest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// A transaction left open on one of its tables would hold the
		// drop: give up on the server's side too, after 10s.
		if err := execOn(dsn, []string{"SET SESSION lock_wait_timeout = 10", "DROP DATABASE IF EXISTS " + quoteName(name)}); err != nil {
			t.Errorf("mytest: dropping database %s: %v", name, err)
		}
	})
	return name
}

// DatabaseDSN returns the test server's DSN pointing at a database of the
// test's own (see Database), dropped at the end of the test.
func DatabaseDSN(t testing.TB) string {
	t.Helper()
	return DSNFor(t, Database(t))
}

// Exec runs sql on a connection of its own to the test server (for a
// test's set-up or its faults), failing t on an error.
func Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if err := execOn(DSN(t), []string{sql}, args...); err != nil {
		t.Fatalf("mytest: %s: %v", sql, err)
	}
}

// execOn runs stmts, one after the other, on a connection of its own to
// the server of dsn, within timeout; args are the last one's.
func execOn(dsn string, stmts []string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("opening the DSN: %w", err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close()
	for i, s := range stmts {
		var a []any
		if i == len(stmts)-1 {
			a = args
		}
		if _, err := conn.ExecContext(ctx, s, a...); err != nil {
			return err
		}
	}
	return nil
}

// quoteName quotes an identifier (a database's or table's name) for
// MariaDB.
func quoteName(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// Kill ends, with KILL CONNECTION, every connection whose database
// (information_schema.PROCESSLIST.DB, the database named by its DSN or
// chosen with USE) is database, on the server db is connected to (a fault:
// the server culling a client's connections), and returns how many it
// ended. It runs on one connection of db, which it spares; db's other
// connections, if they are to database, are ended too: use a *sql.DB of
// its own (MustKill does). A connection that ends by itself in between is
// not counted.
//
// The database, a test's own (see Database), is what picks a test's
// connections out: MariaDB lists a connection's attributes (such as
// go-sql-driver's program_name, from connectionAttributes in the DSN) only
// in performance_schema, which the servers of these tests run without.
func Kill(ctx context.Context, db *sql.DB, database string) (int, error) {
	return kill(ctx, db, "DB", database)
}

// KillUser is Kill for the connections of user (PROCESSLIST.USER).
func KillUser(ctx context.Context, db *sql.DB, user string) (int, error) {
	return kill(ctx, db, "USER", user)
}

// kill ends the connections whose PROCESSLIST column is value.
func kill(ctx context.Context, db *sql.DB, column, value string) (int, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("mytest: connecting to kill the connections of %s %s: %w", column, value, err)
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE "+column+" = ? AND ID <> CONNECTION_ID()", value)
	if err != nil {
		return 0, fmt.Errorf("mytest: listing the connections of %s %s: %w", column, value, err)
	}
	var ids []uint64
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("mytest: listing the connections of %s %s: %w", column, value, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("mytest: listing the connections of %s %s: %w", column, value, err)
	}
	n := 0
	for _, id := range ids {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
			var me *mysql.MySQLError
			if errors.As(err, &me) && me.Number == errNoSuchThread {
				continue // it ended by itself
			}
			return n, fmt.Errorf("mytest: KILL CONNECTION %d (of %s %s): %w", id, column, value, err)
		}
		n++
	}
	return n, nil
}

// errNoSuchThread is MariaDB's ER_NO_SUCH_THREAD: KILL of a connection
// that is gone.
const errNoSuchThread = 1094

// MustKill ends every connection to database on the server of dsn (see
// Kill), through a connection of its own, and fails t if it cannot or if
// there was none to end.
func MustKill(t testing.TB, dsn, database string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("mytest: opening the DSN to kill the connections to %s: %v", database, err)
	}
	defer db.Close()
	n, err := Kill(ctx, db, database)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if n == 0 {
		t.Fatalf("mytest: no connection to database %s to kill", database)
	}
}
