package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/await"
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
// lease passes on and its fenced writes are refused. The row expired
// before a's own deadline (as if the database's clock had stepped), so the
// lease passes on no sooner than that deadline (see clock.go).
func TestLateRenewalDoesNotRevive(t *testing.T) {
	const ttl = 3 * time.Second
	b := newBackend(t)
	opened := time.Now()
	a, c := open(t, b, ttl), open(t, b, ttl)
	renew(t, c)
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
		if err == nil && time.Now().Before(opened.Add(ttl)) {
			err = errors.New("granted before the holder's own deadline")
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
	want := `simba/postgres: schema "` + b.Schema() + `" is version 7, this code knows up to 2`
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

// TestCloseWithWaiter: Backend.Close ends a waiting Acquire with an error
// wrapping ErrSessionDone; Open after Close returns ErrClosed, and a
// Release ErrClosed (or ErrNotHeld), not the pool's own error.
func TestCloseWithWaiter(t *testing.T) {
	b, err := postgres.New(pgtest.DSN(t), postgres.WithSchema(pgtest.Schema(t)))
	if err != nil {
		t.Fatal(err)
	}
	a, c := open(t, b, 10*time.Second), open(t, b, 10*time.Second)
	la, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctxT(t), "x")
		res <- err
	}()
	for end := time.Now().Add(opTimeout); ; { // until C waits in the queue
		ids, err := c.(backend.CandidateLister).Candidates(ctxT(t), "x")
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == 2 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("C not queued within %v: candidates %q", opTimeout, ids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Close()
	select {
	case err := <-res:
		if !errors.Is(err, backend.ErrSessionDone) {
			t.Errorf("waiting Acquire after Backend.Close: error %v, want one wrapping ErrSessionDone", err)
		}
	case <-time.After(opTimeout):
		t.Fatalf("waiting Acquire did not return within %v of Backend.Close", opTimeout)
	}
	if _, err := b.Open(ctxT(t), backend.SessionOptions{TTL: time.Second}); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Open after Close: error %v, want one wrapping ErrClosed", err)
	}
	if _, err := b.View(ctxT(t)); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("View after Close: error %v, want one wrapping ErrClosed", err)
	}
	if err := la.Release(ctxT(t)); !errors.Is(err, backend.ErrClosed) && !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("Release after Backend.Close: error %v, want one wrapping ErrClosed or ErrNotHeld", err)
	}
}

// TestCancelledAcquireLeavesNothing: Acquires whose ctx ends at any point
// of their registration or of their wait (0-9.5 ms), between others of the
// same session that hold and release (the sequence in which a late
// registration once took a later holding's candidacy: see
// TestLateRegistrationOfCancelledAcquire), leave no candidacy behind: the
// name is free for another session at once. (At 0-2.5 ms, as it was, no
// Acquire ever held on this project's machines.)
func TestCancelledAcquireLeavesNothing(t *testing.T) {
	b := newBackend(t)
	a, c := open(t, b, 10*time.Second), open(t, b, 10*time.Second)
	// Renewed as a client's are: on a loaded machine the rounds outlast
	// the TTL (PostgreSQL's took 11 s).
	renew(t, a)
	renew(t, c)
	var got, cancelled int
	for i := range 60 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Duration(i%20)*time.Millisecond/2)
		l, err := a.Acquire(ctx, "x")
		cancel()
		switch {
		case err == nil:
			got++
			if err := l.Release(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		case errors.Is(err, context.DeadlineExceeded):
			cancelled++
		default:
			t.Fatalf("Acquire: %v", err)
		}
	}
	t.Logf("%d acquired, %d cancelled", got, cancelled)
	// A withdrawal that did not finish within withdrawTimeout goes on in
	// the background (a loaded machine): wait for it, as long as a
	// statement may take.
	var ids []string
	var err error
	await.Until(t, opTimeout, "no candidacy left after the cancelled Acquires", func() bool {
		ids, err = c.(backend.CandidateLister).Candidates(ctxT(t), "x")
		return err == nil && len(ids) == 0
	}, func() string { return fmt.Sprintf("candidacies %q, %v", ids, err) })
	ctx, cancel := context.WithTimeout(t.Context(), a.TTL()/2)
	defer cancel()
	if _, err := c.Acquire(ctx, "x"); err != nil {
		t.Errorf("Acquire by another session after the cancelled ones: %v", err)
	}
}

// TestOnLost: OnLost runs once when the lease is lost (here: its
// candidacy deleted by hand, which the NOTIFY trigger reports), its stop
// reports whether it ran, and a function registered after the loss runs
// at once.
func TestOnLost(t *testing.T) {
	b := newBackend(t)
	a := open(t, b, 10*time.Second)
	l, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.(backend.LostNotifier)
	ran := make(chan struct{}, 2)
	stop := ln.OnLost(func() { ran <- struct{}{} })
	stopped := ln.OnLost(func() { t.Error("a stopped OnLost function ran") })
	if !stopped() {
		t.Error("stop of a pending OnLost reported false")
	}
	pgtest.Exec(t, `DELETE FROM "`+b.Schema()+`".candidacies WHERE name = 'x'`)
	select {
	case <-ran:
	case <-time.After(opTimeout):
		t.Fatalf("OnLost did not run within %v of the candidacy's deletion", opTimeout)
	}
	select {
	case <-l.Lost():
	default:
		t.Error("Lost is open after OnLost ran")
	}
	if stop() {
		t.Error("stop after OnLost ran reported true")
	}
	ln.OnLost(func() { ran <- struct{}{} })
	select {
	case <-ran:
	default:
		t.Error("OnLost of a lost lease did not run before returning")
	}
	if err := l.Release(ctxT(t)); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("Release of a lost lease: error %v, want one wrapping ErrNotHeld", err)
	}
	select {
	case <-a.Done():
		t.Error("the session ended with the loss of one lease")
	default:
	}
}

// TestMemberExpiryHint: a member whose session stops renewing leaves the
// group at its expiry, which writes nothing: the member watch wakes at
// that expiry by itself, and Members no longer lists it.
func TestMemberExpiryHint(t *testing.T) {
	b := newBackend(t)
	a, c := open(t, b, 700*time.Millisecond), open(t, b, 10*time.Second)
	if err := a.Join(ctxT(t), "g", backend.Member{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	watch, err := c.WatchMembers(ctxT(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(opTimeout)
	for {
		select {
		case <-watch:
		case <-time.After(time.Until(end)):
			t.Fatalf("member of an expired session still listed after %v", opTimeout)
		}
		ms, err := c.Members(ctxT(t), "g")
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			return
		}
	}
}

// TestReadOnlyUser: a user who may only read the tables gets a working
// View (it writes nothing), and a clear error from Open.
func TestReadOnlyUser(t *testing.T) {
	b := newBackend(t)
	s := open(t, b, 10*time.Second)
	if _, err := s.(backend.Records).PutRecord(ctxT(t), "st/a", []byte("a"), backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	role := pgtest.UniqueName(t)
	pgtest.Exec(t, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		pgtest.Exec(t, `DROP OWNED BY `+role)
		pgtest.Exec(t, "DROP ROLE IF EXISTS "+role)
	})
	q := `"` + b.Schema() + `"`
	pgtest.Exec(t, "GRANT USAGE ON SCHEMA "+q+" TO "+role)
	pgtest.Exec(t, "GRANT SELECT ON ALL TABLES IN SCHEMA "+q+" TO "+role)
	ro, err := postgres.New(withUser(t, pgtest.DSN(t), role, ""), postgres.WithSchema(b.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	v, err := ro.View(ctxT(t))
	if err != nil {
		t.Fatalf("View of a read-only user: %v", err)
	}
	defer v.Close()
	if r, err := v.GetRecord(ctxT(t), "st/a"); err != nil || string(r.Value) != "a" {
		t.Errorf("View.GetRecord = %+v, %v", r, err)
	}
	_, err = ro.Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("Open by a read-only user: error %v, want permission denied", err)
	}
}
