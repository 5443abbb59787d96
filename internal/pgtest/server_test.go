package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/internal/pgtest"
)

// query runs SELECT 1 on a new connection to srv within d.
func query(srv *pgtest.Server, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}

// TestServer starts a server of the test's own, pauses it (nothing
// answers), resumes it, and restarts it: what was committed is kept.
func TestServer(t *testing.T) {
	srv := pgtest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	if err := query(srv, time.Second); err == nil {
		t.Error("a paused server answered a new connection")
	}
	qctx, qcancel := context.WithTimeout(ctx, time.Second)
	_, err = conn.Exec(qctx, "SELECT 1")
	qcancel()
	if err == nil {
		t.Error("a paused server answered on a connection opened before the pause")
	}
	srv.Resume()
	if err := query(srv, 20*time.Second); err != nil {
		t.Errorf("after Resume: %v", err)
	}
	conn.Close(ctx) // cancelled mid-query: unusable
	if conn, err = pgx.Connect(ctx, srv.DSN()); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("a connection outlived Stop")
	}
	conn.Close(ctx)
	srv.Start()
	conn, err = pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 7 {
		t.Errorf("after a restart: %d, %v; want 7", v, err)
	}
}
