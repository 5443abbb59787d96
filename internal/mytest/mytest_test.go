package mytest_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/internal/mytest"
)

// exists reports whether database name exists on the shared server.
func exists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestDatabase: a test's own database exists during the test, is the one
// of DSNFor's DSN, and is dropped at its end.
func TestDatabase(t *testing.T) {
	shared := open(t, mytest.DSN(t))
	var name string
	t.Run("own", func(t *testing.T) {
		name = mytest.Database(t)
		if !exists(t, shared, name) {
			t.Fatalf("database %s does not exist", name)
		}
		dsn := mytest.DSNFor(t, name)
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.DBName != name || !cfg.ParseTime {
			t.Errorf("DSNFor: %s; want database %s and parseTime kept", dsn, name)
		}
		db := open(t, dsn)
		mytest.Exec(t, "CREATE TABLE "+name+".t (v INT)")
		var got string
		if err := db.QueryRow("SELECT DATABASE()").Scan(&got); err != nil || got != name {
			t.Errorf("DATABASE() = %q, %v; want %s", got, err, name)
		}
	})
	if exists(t, shared, name) {
		t.Errorf("database %s outlived its test", name)
	}
}

// TestMustKill: MustKill ends the connections to a test's database: the
// next query on a killed *sql.Conn fails, and the pool connects again.
func TestMustKill(t *testing.T) {
	name := mytest.Database(t)
	db := open(t, mytest.DSNFor(t, name))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var id1 int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id1); err != nil {
		t.Fatal(err)
	}
	mytest.MustKill(t, mytest.DSN(t), name)
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err == nil {
		t.Error("a killed connection answered")
	} else {
		t.Logf("on the killed connection: %v", err)
	}
	conn.Close()
	var id2 int64
	if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id2); err != nil {
		t.Fatalf("the pool after the kill: %v", err)
	}
	if id2 == id1 {
		t.Errorf("the pool answered on connection %d, which was killed", id1)
	}
	// Nothing left to kill: Kill says none, MustKill would fail.
	killer := open(t, mytest.DSN(t))
	db.Close()
	if n, err := mytest.Kill(ctx, killer, name); err != nil || n != 0 {
		t.Errorf("Kill with no connection left: %d, %v; want 0", n, err)
	}
}

// TestKillUser ends the connections of a user of the test's own.
func TestKillUser(t *testing.T) {
	user := mytest.UniqueName(t)
	if len(user) > 32 { // MariaDB's limit on user names
		user = user[len(user)-32:]
	}
	mytest.Exec(t, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'") // UniqueName: [a-z0-9_]
	t.Cleanup(func() { mytest.Exec(t, "DROP USER IF EXISTS '"+user+"'@'%'") })
	cfg, err := mysql.ParseDSN(mytest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd, cfg.DBName = user, "pw", ""
	db := open(t, cfg.FormatDSN())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	killer := open(t, mytest.DSN(t))
	if n, err := mytest.KillUser(ctx, killer, user); err != nil || n != 1 {
		t.Errorf("KillUser: %d, %v; want 1", n, err)
	}
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err == nil {
		t.Error("a killed connection answered")
	}
}
