package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/pgtest"
)

const opTimeout = 20 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, b backend.Backend, ttl time.Duration) backend.Session {
	t.Helper()
	s, err := b.Open(ctxT(t), backend.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// TestSchemaSQLInDoc: the SQL in the package documentation is the SQL the
// backend runs.
func TestSchemaSQLInDoc(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var doc []string
	in := false
	for _, line := range strings.Split(string(src), "\n") {
		switch {
		case strings.HasPrefix(line, "//\tCREATE SCHEMA"):
			in = true
		case in && !strings.HasPrefix(line, "//\t"):
			in = false
		}
		if in {
			doc = append(doc, strings.TrimPrefix(line, "//\t"))
		}
	}
	want := strings.TrimSpace(postgres.SchemaSQL("simba"))
	if got := strings.Join(doc, "\n"); got != want {
		t.Errorf("the schema in doc.go differs from SchemaSQL(\"simba\"):\n--- doc.go\n%s\n--- SchemaSQL\n%s", got, want)
	}
}

// TestTokenCounter: sessions racing for one name on two backends get
// strictly increasing tokens in the order they hold it, none reused, and
// the name's counter is the number of registrations.
func TestTokenCounter(t *testing.T) {
	dsn, schema := pgtest.DSN(t), pgtest.Schema(t)
	var bs []*postgres.Backend
	for range 2 {
		b, err := postgres.New(dsn, postgres.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		bs = append(bs, b)
	}
	const workers, rounds = 4, 10
	var mu sync.Mutex
	var order []uint64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		s := open(t, bs[i%2], 10*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := s.Acquire(ctxT(t), "counter")
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				order = append(order, l.Token())
				mu.Unlock()
				if err := l.Release(ctxT(t)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Errorf("holding %d has token %d after token %d: tokens must strictly increase in holding order", i, order[i], order[i-1])
		}
	}
	var last int64
	if err := bs[0].Pool().QueryRow(ctxT(t), `SELECT last FROM "`+schema+`".lease_names WHERE name = 'counter'`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if last != workers*rounds {
		t.Errorf("counter of the name = %d, want %d (one per registration)", last, workers*rounds)
	}
}

// TestLateRenewalDoesNotRevive: a session whose row expired by the
// database's clock is not brought back by a KeepAlive that comes late; its
// lease passes on and its fenced writes are refused.
func TestLateRenewalDoesNotRevive(t *testing.T) {
	b := newBackend(t)
	a, c := open(t, b, 10*time.Second), open(t, b, 10*time.Second)
	la, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	w := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctxT(t), "x")
		if err == nil && l.Token() <= la.Token() {
			err = errors.New("token did not increase")
		}
		w <- err
	}()
	// The renewal comes late: the row expired by the database's clock (as
	// if its TTL had run out), though a's own deadline has not.
	if _, err := b.Pool().Exec(ctxT(t), `UPDATE "`+b.Schema()+`".sessions SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE id = $1`, a.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.KeepAlive(ctxT(t)); !errors.Is(err, backend.ErrSessionDone) {
		t.Fatalf("late KeepAlive: error %v, want one wrapping ErrSessionDone", err)
	}
	var alive bool
	err = b.Pool().QueryRow(ctxT(t), `SELECT expires_at > clock_timestamp() FROM "`+b.Schema()+`".sessions WHERE id = $1`, a.ID()).Scan(&alive)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	if alive {
		t.Fatalf("the late KeepAlive revived session %s", a.ID())
	}
	select {
	case err := <-w:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(opTimeout):
		t.Fatalf("the waiter did not get the lease of the expired session within %v", opTimeout)
	}
	select {
	case <-la.Lost():
	case <-time.After(opTimeout):
		t.Errorf("Lost of the expired session's lease not closed within %v", opTimeout)
	}
	select {
	case <-a.Done():
	case <-time.After(opTimeout):
		t.Errorf("Done of the expired session not closed within %v", opTimeout)
	}
}

// TestSchemaVersionRefused: a schema of a newer version than the code
// knows is refused with a clear error, and nothing is changed.
func TestSchemaVersionRefused(t *testing.T) {
	b := newBackend(t)
	open(t, b, time.Second)
	if _, err := b.Pool().Exec(ctxT(t), `UPDATE "`+b.Schema()+`".meta SET value = 7 WHERE key = 'version'`); err != nil {
		t.Fatal(err)
	}
	b2, err := postgres.New(pgtest.DSN(t), postgres.WithSchema(b.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	_, err = b2.Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
	want := `simba/postgres: schema "` + b.Schema() + `" is version 7, this code knows up to 1`
	if err == nil || err.Error() != want {
		t.Fatalf("Open on a newer schema: error %v, want %q", err, want)
	}
	if _, err := b2.View(ctxT(t)); err == nil || err.Error() != want {
		t.Fatalf("View on a newer schema: error %v, want %q", err, want)
	}
}

// withUser returns dsn with its user (and password) replaced.
func withUser(t *testing.T, dsn, user, password string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// TestBadInput: what a user can get wrong gives an error naming it, no
// panic, and nothing half-created.
func TestBadInput(t *testing.T) {
	dsn := pgtest.DSN(t)
	wantErr := func(t *testing.T, err error, parts ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("no error, want one containing %q", parts)
		}
		for _, p := range parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not contain %q", err, p)
			}
		}
	}
	schemaExists := func(t *testing.T, schema string) bool {
		var ok bool
		c, err := pgx.Connect(ctxT(t), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if err := c.QueryRow(ctxT(t), "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	t.Run("DSNDoesNotParse", func(t *testing.T) {
		for _, bad := range []string{"postgres://u@h:99999999/db", "postgres://%zz", "host=h port=x"} {
			_, err := postgres.New(bad)
			wantErr(t, err, "simba/postgres: the DSN does not parse")
		}
		_, err := postgres.New(dsn, postgres.WithSchema("Bad-Name"))
		wantErr(t, err, `schema name "Bad-Name"`)
		_, err = postgres.NewFromPool(nil)
		wantErr(t, err, "nil pool")
	})
	t.Run("LoginRefused", func(t *testing.T) {
		b, err := postgres.New(withUser(t, dsn, "simba_no_such_role", "x"))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		_, err = b.Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
		wantErr(t, err, "simba/postgres: connecting", "simba_no_such_role")
	})
	t.Run("SchemaNotCreatable", func(t *testing.T) {
		role := pgtest.UniqueName(t)
		pgtest.Exec(t, "CREATE ROLE "+role+" LOGIN")
		t.Cleanup(func() { pgtest.Exec(t, "DROP ROLE IF EXISTS "+role) })
		schema := pgtest.Schema(t)
		b, err := postgres.New(withUser(t, dsn, role, ""), postgres.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		_, err = b.Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
		wantErr(t, err, `creating the tables in schema "`+schema+`"`, "permission denied")
		if schemaExists(t, schema) {
			t.Errorf("schema %s exists after a refused creation", schema)
		}
	})
	t.Run("TableAltered", func(t *testing.T) {
		b := newBackend(t)
		open(t, b, time.Second)
		pgtest.Exec(t, `ALTER TABLE "`+b.Schema()+`".records DROP COLUMN token`)
		b2, err := postgres.New(dsn, postgres.WithSchema(b.Schema()))
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close()
		_, err = b2.Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
		wantErr(t, err, "table "+b.Schema()+".records was altered", "want key text, token bigint")
	})
	t.Run("TableDropped", func(t *testing.T) {
		b := newBackend(t)
		open(t, b, time.Second)
		pgtest.Exec(t, `DROP TABLE "`+b.Schema()+`".members`)
		b2, err := postgres.New(dsn, postgres.WithSchema(b.Schema()))
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close()
		_, err = b2.Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
		wantErr(t, err, "has no table members")
	})
}

// TestCreateRace: backends starting together on one new schema all
// succeed; the schema is created once.
func TestCreateRace(t *testing.T) {
	dsn, schema := pgtest.DSN(t), pgtest.Schema(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := postgres.New(dsn, postgres.WithSchema(schema))
			if err != nil {
				errs <- err
				return
			}
			defer b.Close()
			s, err := b.Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
			if err != nil {
				errs <- err
				return
			}
			errs <- s.Close(ctxT(t))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestWithoutListenReadsAtExpiry: without LISTEN and with a poll interval
// far beyond the test, a waiter still gets the lease of a holder that
// stopped renewing, at its expiry: it reads the queue at the expiry time
// the database computed, not at a fixed poll.
func TestWithoutListenReadsAtExpiry(t *testing.T) {
	b := newBackend(t, postgres.WithoutListen(time.Hour))
	a, c := open(t, b, time.Second), open(t, b, 10*time.Second)
	la, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := a.KeepAlive(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	lc, err := c.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatalf("Acquire after the holder stopped renewing, without LISTEN: %v", err)
	}
	if since := time.Since(start); since < a.TTL() {
		t.Errorf("lease passed on %v after the holder's last renewal began, before its TTL %v", since, a.TTL())
	}
	if lc.Token() <= la.Token() {
		t.Errorf("token %d, want > %d", lc.Token(), la.Token())
	}
}
