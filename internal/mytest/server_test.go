package mytest_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/internal/mytest"
)

// open opens dsn, closed at the end of the test.
func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// query runs SELECT 1 on a new connection to dsn within d.
func query(dsn string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	var one int
	return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

// TestServer starts a server of the test's own, queries it, crashes it and
// starts it again: the row committed before the crash is kept; then stops
// it cleanly and starts it again.
func TestServer(t *testing.T) {
	start := time.Now()
	srv := mytest.StartServer(t)
	t.Logf("StartServer took %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := open(t, srv.DSN())
	var version, database, flush string
	if err := db.QueryRowContext(ctx, "SELECT VERSION(), DATABASE(), @@innodb_flush_log_at_trx_commit").Scan(&version, &database, &flush); err != nil {
		t.Fatal(err)
	}
	t.Logf("MariaDB %s at %s, database %s", version, srv.Addr(), database)
	if database != "simba" || flush != "1" {
		t.Errorf("database %q, innodb_flush_log_at_trx_commit %s; want simba, 1", database, flush)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE kept (v INT) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	if err := query(srv.DSN(), 2*time.Second); err == nil {
		t.Error("a killed server answered")
	}
	start = time.Now()
	srv.Start()
	t.Logf("Start after Kill (crash recovery) took %v", time.Since(start).Round(time.Millisecond))
	var v int
	if err := db.QueryRowContext(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 7 {
		t.Errorf("after a crash: %d, %v; want 7", v, err)
	}

	if _, err := db.ExecContext(ctx, "UPDATE kept SET v = 8"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := query(srv.DSN(), 2*time.Second); err == nil {
		t.Error("a stopped server answered")
	}
	srv.Start()
	if err := db.QueryRowContext(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 8 {
		t.Errorf("after a clean restart: %d, %v; want 8", v, err)
	}
}

// TestPause: a paused server answers neither a query on a connection
// opened before nor a new connection, until Resume.
func TestPause(t *testing.T) {
	srv := mytest.StartServer(t)
	db := open(t, srv.DSN())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	qctx, qcancel := context.WithTimeout(ctx, time.Second)
	_, err = conn.ExecContext(qctx, "SELECT 1")
	qcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a query on a paused server: %v; want it to time out", err)
	}
	if err := query(srv.DSN(), time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a new connection to a paused server: %v; want it to time out", err)
	}
	srv.Resume()
	resumed := time.Now()
	if err := query(srv.DSN(), 20*time.Second); err != nil {
		t.Errorf("after Resume: %v", err)
	}
	t.Logf("answered %v after Resume", time.Since(resumed).Round(time.Millisecond))
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Errorf("after Resume, on the pool: %v", err)
	}
}

// TestPausedCleanup: the clean-up kills a server left paused.
func TestPausedCleanup(t *testing.T) {
	var dsn string
	t.Run("paused", func(t *testing.T) {
		srv := mytest.StartServer(t)
		dsn = srv.DSN()
		srv.Pause()
	})
	if err := query(dsn, 2*time.Second); err == nil {
		t.Error("the server left paused still answers after its test")
	}
}
