package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/mytest"
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

// exec runs a statement on b's pool, failing t on an error.
func exec(t *testing.T, b *mysql.Backend, query string, args ...any) {
	t.Helper()
	if _, err := b.DB().ExecContext(ctxT(t), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// TestSchemaSQL: the SQL a DBA applies by hand makes tables the backend
// takes as they are, creating nothing.
func TestSchemaSQL(t *testing.T) {
	dsn := mytest.DatabaseDSN(t)
	text, err := mysql.SchemaSQL("hand_")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for stmt := range strings.SplitSeq(strings.TrimSpace(text), ";\n") {
		if _, err := db.ExecContext(ctxT(t), strings.TrimSuffix(stmt, ";")); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	b := newBackendAt(t, dsn, mysql.WithTablePrefix("hand_"))
	s := open(t, b, 2*time.Second)
	l, err := s.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != 1 {
		t.Errorf("first token %d, want 1", l.Token())
	}
	if _, err := mysql.SchemaSQL("Bad"); err == nil {
		t.Error("SchemaSQL(\"Bad\"): no error")
	}
}

// TestTokenCounter: sessions racing for one name on two backends get
// strictly increasing tokens in the order they hold it, none reused, and
// the name's counter is the number of registrations. Nobody renews the
// sessions: their TTL is far longer than the test, so that a hand-off that
// stalls fails the Acquire's own timeout rather than ending in a session
// that expired (a lost bell: TestBellFreedByAWaiterGrantedMeanwhile).
func TestTokenCounter(t *testing.T) {
	dsn := mytest.DatabaseDSN(t)
	bs := []*mysql.Backend{newBackendAt(t, dsn), newBackendAt(t, dsn)}
	const workers, rounds = 4, 10
	const ttl = time.Minute
	var mu sync.Mutex
	var order []uint64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		s := open(t, bs[i%2], ttl)
		wg.Go(func() {
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
		})
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
	if err := bs[0].DB().QueryRowContext(ctxT(t), `SELECT last FROM simba_lease_names WHERE name = 'counter'`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if last != workers*rounds {
		t.Errorf("counter of the name = %d, want %d (one per registration)", last, workers*rounds)
	}
}

// TestLateRenewalDoesNotRevive: a session whose row expired by the
// database's clock is not brought back by a KeepAlive that comes late; its
// lease passes on, no sooner than the holder's own deadline, and its
// fenced writes are refused.
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
	exec(t, b, `UPDATE simba_sessions SET expires_us = expires_us - ttl_us WHERE id = ?`, a.ID())
	if _, err := a.KeepAlive(ctxT(t)); !errors.Is(err, backend.ErrSessionDone) {
		t.Fatalf("late KeepAlive: error %v, want one wrapping ErrSessionDone", err)
	}
	var alive bool
	err = b.DB().QueryRowContext(ctxT(t), `SELECT expires_us > TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) FROM simba_sessions WHERE id = ?`, a.ID()).Scan(&alive)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
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
	for what, ch := range map[string]<-chan struct{}{"Lost of the lease": la.Lost(), "Done of the session": a.Done()} {
		select {
		case <-ch:
		case <-time.After(opTimeout):
			t.Errorf("%s not closed within %v", what, opTimeout)
		}
	}
	if _, err := a.(backend.Records).PutRecord(ctxT(t), "k", []byte("late"), backend.Condition{Lease: "x", Token: la.Token()}); err == nil {
		t.Error("a fenced write of the expired session was accepted")
	}
}

// TestBellWakesAnotherProcess: a waiter of another Backend (another
// process, as far as the server can tell) gets the lease on the holder's
// Release, long before the holder's session could expire (TTL 60 s; the
// test waits 5 s): the
// holder's bell woke it. Without bells it waits for the expiry (the
// control).
func TestBellWakesAnotherProcess(t *testing.T) {
	for _, bells := range []bool{true, false} {
		name := map[bool]string{true: "Bells", false: "WithoutBells"}[bells]
		t.Run(name, func(t *testing.T) {
			dsn := mytest.DatabaseDSN(t)
			var opts []mysql.Option
			if !bells {
				opts = append(opts, mysql.WithoutBells())
			}
			holder, waiter := newBackendAt(t, dsn, opts...), newBackendAt(t, dsn, opts...)
			const ttl = 60 * time.Second
			a, c := open(t, holder, ttl), open(t, waiter, ttl)
			la, err := a.Acquire(ctxT(t), "x")
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			go func() {
				_, err := c.Acquire(ctx, "x")
				got <- err
			}()
			waitQueued(t, c, "x", 2)
			time.Sleep(200 * time.Millisecond) // the waiter blocks on the bell
			released := time.Now()
			if err := la.Release(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			err = <-got
			switch {
			case bells && err != nil:
				t.Fatalf("the waiter of another Backend was not granted the lease within 5 s of the release (TTL 60 s): %v", err)
			case !bells && err == nil:
				t.Fatal("without bells the waiter of another Backend was granted before the holder's expiry: the control shows nothing")
			}
			if bells {
				t.Logf("granted %v after the release", time.Since(released).Round(time.Millisecond))
			}
		})
	}
}

// waitQueued waits until name has n candidacies.
func waitQueued(t *testing.T, s backend.Session, name string, n int) {
	t.Helper()
	end := time.Now().Add(opTimeout)
	for {
		ids, err := s.(backend.CandidateLister).Candidates(ctxT(t), name)
		if err == nil && len(ids) == n {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: %d candidacies (%v), want %d", name, len(ids), err, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSchemaVersionRefused: tables of a newer version than the code knows
// are refused with a clear error.
func TestSchemaVersionRefused(t *testing.T) {
	dsn := mytest.DatabaseDSN(t)
	b := newBackendAt(t, dsn)
	open(t, b, time.Second)
	exec(t, b, `UPDATE simba_meta SET v = 7 WHERE k = 'version'`)
	b2 := newBackendAt(t, dsn)
	_, err := b2.Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
	want := `simba/mysql: the tables simba_* are version 7, this code knows up to 2: upgrade simba`
	if err == nil || err.Error() != want {
		t.Fatalf("Open on newer tables: error %v, want %q", err, want)
	}
	if _, err := b2.View(ctxT(t)); err == nil || err.Error() != want {
		t.Fatalf("View on newer tables: error %v, want %q", err, want)
	}
}

// withUser returns dsn with its user and password replaced.
func withUser(t *testing.T, dsn, user, password string) string {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, password
	return cfg.FormatDSN()
}

// dbName returns the database dsn names.
func dbName(t *testing.T, dsn string) string {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.DBName
}

// tablesOf lists the tables of the database of dsn.
func tablesOf(t *testing.T, dsn string) []string {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out []string
	rows, err := db.QueryContext(ctxT(t), "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// newUser creates a MySQL user with the grants given (statements with
// %s for the user), dropped at the end of the test.
func newUser(t *testing.T, grants ...string) (user, password string) {
	user, password = mytest.UniqueName(t), "pw"
	if len(user) > 32 {
		user = user[len(user)-32:]
	}
	mytest.Exec(t, "CREATE USER '"+user+"'@'%' IDENTIFIED BY '"+password+"'")
	t.Cleanup(func() { mytest.Exec(t, "DROP USER IF EXISTS '"+user+"'@'%'") })
	for _, g := range grants {
		mytest.Exec(t, strings.ReplaceAll(g, "%s", "'"+user+"'@'%'"))
	}
	return user, password
}

// TestBadInput: what a user can get wrong gives an error naming it, no
// panic, and nothing half-created.
func TestBadInput(t *testing.T) {
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
	t.Run("DSNDoesNotParse", func(t *testing.T) {
		for _, bad := range []string{"user@tcp(h:3306", "postgres://u@h/db", "u:p@tcp(h)/db?parseTime=maybe"} {
			_, err := mysql.New(bad)
			wantErr(t, err, "simba/mysql: the DSN does not parse")
		}
		_, err := mysql.New("u:p@tcp(127.0.0.1:1)/")
		wantErr(t, err, "names no database")
		_, err = mysql.New("u:p@tcp(127.0.0.1:1)/db", mysql.WithTablePrefix("Bad-Name"))
		wantErr(t, err, `table prefix "Bad-Name"`)
		_, err = mysql.NewFromDB(nil)
		wantErr(t, err, "nil *sql.DB")
		_, err = mysql.New("u:p@tcp(127.0.0.1:1)/db", mysql.WithPollInterval(0))
		wantErr(t, err, "WithPollInterval")
	})
	t.Run("LoginRefused", func(t *testing.T) {
		b := newBackendAt(t, withUser(t, mytest.DatabaseDSN(t), "simba_no_such_user", "x"))
		_, err := b.Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
		wantErr(t, err, "simba/mysql: connecting: the server refused the login", "simba_no_such_user")
	})
	t.Run("TablesNotCreatable", func(t *testing.T) {
		dsn := mytest.DatabaseDSN(t)
		user, pw := newUser(t, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+dbName(t, dsn)+"`.* TO %s")
		b := newBackendAt(t, withUser(t, dsn, user, pw))
		_, err := b.Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
		wantErr(t, err, "creating table simba_meta", "CREATE command denied", "nothing of simba's was left behind")
		if got := tablesOf(t, dsn); len(got) != 0 {
			t.Errorf("tables %v exist after a refused creation", got)
		}
	})
	t.Run("CreationFailsMidway", func(t *testing.T) {
		// CREATE on the first two tables only: they are made, the third
		// is refused, and the two are dropped.
		dsn := mytest.DatabaseDSN(t)
		db := dbName(t, dsn)
		user, pw := newUser(t, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+db+"`.* TO %s",
			"GRANT CREATE, DROP, REFERENCES ON `"+db+"`.simba_meta TO %s", "GRANT CREATE, DROP, REFERENCES ON `"+db+"`.simba_sessions TO %s")
		b := newBackendAt(t, withUser(t, dsn, user, pw))
		_, err := b.Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
		wantErr(t, err, "creating table simba_lease_names", "CREATE command denied", "nothing of simba's was left behind")
		if got := tablesOf(t, dsn); len(got) != 0 {
			t.Errorf("tables %v exist after a creation refused midway", got)
		}
	})
	t.Run("MyISAM", func(t *testing.T) {
		dsn := mytest.DatabaseDSN(t)
		b := newBackendAt(t, dsn)
		open(t, b, time.Second)
		exec(t, b, "SET FOREIGN_KEY_CHECKS = 0")
		b2db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer b2db.Close()
		conn, err := b2db.Conn(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, q := range []string{"SET FOREIGN_KEY_CHECKS = 0", "DROP TABLE simba_records", "CREATE TABLE simba_records (rkey VARCHAR(512) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, value MEDIUMBLOB NOT NULL, version BIGINT NOT NULL, token BIGINT NOT NULL, deleted BOOLEAN NOT NULL) ENGINE=MyISAM"} {
			if _, err := conn.ExecContext(ctxT(t), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		_, err = newBackendAt(t, dsn).Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
		wantErr(t, err, "table simba_records uses the MyISAM engine: the backend needs InnoDB")
	})
	t.Run("TableAltered", func(t *testing.T) {
		dsn := mytest.DatabaseDSN(t)
		b := newBackendAt(t, dsn)
		open(t, b, time.Second)
		exec(t, b, "ALTER TABLE simba_records DROP COLUMN token")
		_, err := newBackendAt(t, dsn).Open(ctxT(t), backend.SessionOptions{TTL: time.Second})
		wantErr(t, err, "table simba_records has columns", "altered by hand")
	})
	t.Run("TableDropped", func(t *testing.T) {
		dsn := mytest.DatabaseDSN(t)
		b := newBackendAt(t, dsn)
		open(t, b, time.Second)
		exec(t, b, "DROP TABLE simba_members")
		b2 := newBackendAt(t, dsn)
		// The backend finds the missing table and makes it again.
		s := open(t, b2, time.Second)
		if err := s.Join(ctxT(t), "g", backend.Member{ID: "m"}); err != nil {
			t.Fatalf("Join after the members table was made again: %v", err)
		}
	})
}

// TestCreateRace: backends starting together on one new database all
// succeed; the tables are created once.
func TestCreateRace(t *testing.T) {
	dsn := mytest.DatabaseDSN(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			b, err := mysql.New(dsn)
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
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestReadOnlyUser: a user who may only SELECT reads through a View; the
// View writes nothing.
func TestReadOnlyUser(t *testing.T) {
	dsn := mytest.DatabaseDSN(t)
	b := newBackendAt(t, dsn)
	s := open(t, b, 5*time.Second)
	if _, err := s.(backend.Records).PutRecord(ctxT(t), "a/b", []byte("v"), backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Join(ctxT(t), "g", backend.Member{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	user, pw := newUser(t, "GRANT SELECT ON `"+dbName(t, dsn)+"`.* TO %s")
	ro := newBackendAt(t, withUser(t, dsn, user, pw))
	v, err := ro.View(ctxT(t))
	if err != nil {
		t.Fatalf("View as a read-only user: %v", err)
	}
	defer v.Close()
	r, err := v.GetRecord(ctxT(t), "a/b")
	if err != nil || string(r.Value) != "v" {
		t.Fatalf("GetRecord through the View: %v, %v", r, err)
	}
	ms, _, err := v.MembersWithSkipped(ctxT(t), "g")
	if err != nil || len(ms) != 1 {
		t.Fatalf("Members through the View: %v, %v", ms, err)
	}
	if _, err := ro.Open(ctxT(t), backend.SessionOptions{TTL: time.Second}); err == nil || !strings.Contains(err.Error(), "denied") {
		t.Errorf("Open as a read-only user: error %v, want the server's refusal", err)
	}
}

// TestWithoutBellsReadsAtExpiry: without bells, a waiter still gets the
// lease of a holder that stopped renewing, at its expiry: it reads the
// queue at the expiry time the database computed, not at a fixed poll.
func TestWithoutBellsReadsAtExpiry(t *testing.T) {
	b := newBackend(t, mysql.WithoutBells(), mysql.WithPollInterval(time.Hour))
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
		t.Fatalf("Acquire after the holder stopped renewing: %v", err)
	}
	if since := time.Since(start); since < a.TTL() {
		t.Errorf("lease passed on %v after the holder's last renewal began, before its TTL %v", since, a.TTL())
	}
	if lc.Token() <= la.Token() {
		t.Errorf("token %d, want > %d", lc.Token(), la.Token())
	}
}

// TestCloseWithWaiter: Backend.Close ends a waiting Acquire with an error
// wrapping ErrSessionDone; Open and View after Close return ErrClosed, and
// a Release ErrClosed (or ErrNotHeld), not the pool's own error.
func TestCloseWithWaiter(t *testing.T) {
	b, err := mysql.New(mytest.DatabaseDSN(t))
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
	waitQueued(t, c, "x", 2)
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
// of their registration leave no candidacy behind: the name is free for
// another session at once.
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
	// A withdrawal may go on in the background for a moment.
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

// TestOnLost: a candidacy deleted by someone else (an operator) is noticed
// at the holder's next renewal, which counts the session's candidacies:
// OnLost runs once, its stop reports whether it ran, and a function
// registered after the loss runs at once.
func TestOnLost(t *testing.T) {
	b := newBackend(t)
	a := open(t, b, 3*time.Second)
	renew(t, a)
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
	time.Sleep(300 * time.Millisecond) // the monitor's look at the new holding is over
	exec(t, b, "DELETE FROM simba_candidacies WHERE name = 'x'")
	deleted := time.Now()
	select {
	case <-ran:
		t.Logf("OnLost ran %v after the candidacy's deletion (renewals every TTL/3 = 1s)", time.Since(deleted).Round(time.Millisecond))
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
// that expiry by itself (the poll interval is an hour), and Members no
// longer lists it.
func TestMemberExpiryHint(t *testing.T) {
	b := newBackend(t, mysql.WithPollInterval(time.Hour))
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
