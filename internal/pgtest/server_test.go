package pgtest_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/simba-go/simba/internal/certs"
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

// TestServerWithPasswordAndTLS starts a server that checks the password of
// a user of its own and serves TLS with a certificate of the test's CA:
// the right password over verify-full logs in, a wrong one is refused
// (28P01), and a client that trusts another CA refuses the server.
func TestServerWithPasswordAndTLS(t *testing.T) {
	f, err := certs.Generate(t.TempDir(), "client")
	if err != nil {
		t.Fatal(err)
	}
	srv := pgtest.StartServer(t, pgtest.WithPasswordUser("alice", "right pass'word"), pgtest.WithTLS(f))
	dsn := func(password, ca string) string {
		u := url.URL{Scheme: "postgres", User: url.UserPassword("alice", password), Host: srv.Addr(), Path: "/postgres",
			RawQuery: url.Values{"sslmode": {"verify-full"}, "sslrootcert": {ca}}.Encode()}
		return u.String()
	}
	connect := func(dsn string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		var ssl bool
		if err := conn.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil {
			return err
		}
		if !ssl {
			return errors.New("the connection is not encrypted")
		}
		return nil
	}
	if err := connect(dsn("right pass'word", f.CA)); err != nil {
		t.Errorf("the right password over verify-full: %v", err)
	}
	var pe *pgconn.PgError
	if err := connect(dsn("wrong", f.CA)); !errors.As(err, &pe) || pe.Code != "28P01" {
		t.Errorf("a wrong password: %v, want SQLSTATE 28P01", err)
	}
	other, err := certs.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	otherCA := filepath.Join(t.TempDir(), "other.crt")
	if err := os.WriteFile(otherCA, other.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	var unknown x509.UnknownAuthorityError
	if err := connect(dsn("right pass'word", otherCA)); !errors.As(err, &unknown) {
		t.Errorf("another CA: %v, want an unknown authority", err)
	}
	if err := query(srv, 20*time.Second); err != nil {
		t.Errorf("the postgres user, trusted: %v", err)
	}
}

// TestPooler runs statements through a PgBouncer in transaction mode in
// front of the shared server: they work in pgx's exec mode, and a LISTEN
// through it hears nothing.
func TestPooler(t *testing.T) {
	p := pgtest.StartPooler(t, pgtest.DSN(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for i := range 3 {
		var n int
		if err := conn.QueryRow(ctx, "SELECT $1::int + 1", i).Scan(&n); err != nil || n != i+1 {
			t.Fatalf("a query through the pooler: %d, %v", n, err)
		}
	}
	if _, err := conn.Exec(ctx, "LISTEN pgtest_pooler"); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, "SELECT pg_notify('pgtest_pooler', 'hello')")
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	defer wcancel()
	if n, err := conn.WaitForNotification(wctx); err == nil {
		t.Errorf("a LISTEN through a pooler in transaction mode heard %q", n.Payload)
	}
}
