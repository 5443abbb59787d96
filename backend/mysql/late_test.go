package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/mytest"
)

// TestLateRegistrationOfCancelledAcquire: a registration whose Acquire's
// ctx ended while its batch was on its way (the outcome unknown) and that
// reaches the server only after the session's next Acquire of the name
// holds it changes nothing: the holding stays, its Release frees the name,
// and no candidacy is left that the session does not know.
func TestLateRegistrationOfCancelledAcquire(t *testing.T) {
	cfg, err := gomysql.ParseDSN(mytest.DatabaseDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cfg.Addr = p.Addr()
	b := newBackendAt(t, cfg.FormatDSN())
	a, c := open(t, b, time.Minute), open(t, b, time.Minute)
	// Connections in the pool, so that the registration's batch is sent
	// at once.
	for range 3 {
		l, err := a.Acquire(ctxT(t), "warm")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	const late = 1500 * time.Millisecond
	p.DelayRequests(late)
	sent := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := a.Acquire(ctx, "x")
		res <- err
	}()
	time.Sleep(100 * time.Millisecond)
	p.DelayRequests(0) // what is sent from now on goes through at once
	if err := <-res; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the Acquire whose registration is held: %v, want DeadlineExceeded", err)
	}
	if time.Since(sent) > late {
		t.Skipf("the cancelled Acquire took %v, past the registration's arrival", time.Since(sent))
	}
	l, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatalf("the next Acquire: %v", err)
	}
	t.Logf("the next Acquire holds token %d, %v after the first was sent", l.Token(), time.Since(sent))
	// The held registration reaches the server and runs: it draws the
	// token after the holding's, whatever it does after that.
	var last uint64
	await.Until(t, opTimeout, "the late registration run", func() bool {
		err := b.DB().QueryRowContext(ctxT(t), "SELECT last FROM simba_lease_names WHERE name = 'x'").Scan(&last)
		return err == nil && last > l.Token()
	}, func() string { return fmt.Sprintf("the name's counter at %d, the holding's token %d", last, l.Token()) })
	select {
	case <-l.Lost():
		t.Errorf("the holding was lost when the cancelled registration arrived")
	default:
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Errorf("Release: %v", err)
	}
	ids, err := c.(backend.CandidateLister).Candidates(ctxT(t), "x")
	if err != nil || len(ids) != 0 {
		t.Errorf("candidacies of x after the Release: %q, %v; want none", ids, err)
	}
}

// TestRegistrationUnderTheFloor: a registration numbered at or under the
// session's floor (raised by the withdrawal of another whose outcome was
// unknown, here by hand) writes nothing and is tried again with a new
// number; one that stays under it fails with an error that says so, and
// leaves nothing.
func TestRegistrationUnderTheFloor(t *testing.T) {
	b := newBackend(t)
	a := open(t, b, time.Minute)
	// Two numbers to come are under the floor: the third attempt holds.
	exec(t, b, "UPDATE simba_sessions SET reg_floor = 2 WHERE id = ?", a.ID())
	l, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatalf("Acquire with two numbers under the floor: %v", err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	exec(t, b, "UPDATE simba_sessions SET reg_floor = 1000 WHERE id = ?", a.ID())
	if _, err := a.Acquire(ctxT(t), "x"); err == nil || !strings.Contains(err.Error(), "superseded") {
		t.Errorf("Acquire with every attempt under the floor: %v, want an error saying it was superseded", err)
	}
	var n int
	if err := b.DB().QueryRowContext(ctxT(t), "SELECT COUNT(*) FROM simba_candidacies").Scan(&n); err != nil || n != 0 {
		t.Errorf("candidacies left: %d, %v; want none", n, err)
	}
}

// TestUpgradeFromVersion1: tables of version 1 (without the registration
// numbers) are upgraded to version 2 on first use, and work.
func TestUpgradeFromVersion1(t *testing.T) {
	dsn := mytest.DatabaseDSN(t)
	old := newBackendAt(t, dsn)
	open(t, old, time.Minute) // the tables, of version 2
	for _, q := range []string{
		"ALTER TABLE simba_candidacies DROP COLUMN reg",
		"ALTER TABLE simba_sessions DROP COLUMN reg_floor",
		"UPDATE simba_meta SET v = 1 WHERE k = 'version'",
	} {
		exec(t, old, q)
	}
	b := newBackendAt(t, dsn)
	a := open(t, b, time.Minute)
	l, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatalf("Acquire on upgraded tables: %v", err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := b.DB().QueryRowContext(ctxT(t), "SELECT v FROM simba_meta WHERE k = 'version'").Scan(&v); err != nil || v != 2 {
		t.Errorf("version after the upgrade: %d, %v; want 2", v, err)
	}
}
