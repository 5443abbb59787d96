package mysql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/internal/mytest"
)

// bellWaitQuery is the statement of a waiter's blocked wait on a bell
// (bells.go); the bells' keeper takes a bell with "GET_LOCK(?, 0)".
const bellWaitQuery = "SELECT GET_LOCK(?, ?)"

// bellGate holds a waiter's bell wait up once the server has answered it:
// the goroutine that waited has the bell and has read the answer, and is
// not yet on to freeing the bell (a goroutine descheduled on a loaded
// machine). Armed, it holds up the next bell wait to end; got is closed
// when it does, and the wait goes on when open is closed.
type bellGate struct {
	mu    sync.Mutex
	armed bool
	got   chan struct{}
	open  chan struct{}
}

func newBellGate() *bellGate {
	return &bellGate{got: make(chan struct{}), open: make(chan struct{})}
}

func (g *bellGate) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

// take reports whether this bell wait is the one to hold up, disarming.
func (g *bellGate) take() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.armed {
		return false
	}
	g.armed = false
	return true
}

type gateConnector struct {
	driver.Connector
	g *bellGate
}

func (c gateConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return gateConn{conn.(fullConn), c.g}, nil
}

type gateConn struct {
	fullConn
	g *bellGate
}

func (c gateConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := c.fullConn.QueryContext(ctx, q, args)
	if err != nil || q != bellWaitQuery {
		return rows, err
	}
	return gateRows{rows, c.g}, nil
}

// gateRows holds up its Close, which database/sql's Row.Scan calls after
// reading the row: the driver has stopped watching the statement's ctx,
// and the caller has its answer.
type gateRows struct {
	driver.Rows
	g *bellGate
}

func (r gateRows) Close() error {
	err := r.Rows.Close()
	if r.g.take() {
		close(r.g.got)
		<-r.g.open
	}
	return err
}

// newGatedBackend returns a backend on dsn whose bell waits pass g.
func newGatedBackend(t *testing.T, dsn string, g *bellGate) *mysql.Backend {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	mysql.NeedMultiStatements(cfg)
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(gateConnector{conn, g})
	db.SetMaxOpenConns(16) // as New's pool: its idle connections are kept
	db.SetMaxIdleConns(16)
	t.Cleanup(func() { db.Close() })
	b, err := mysql.NewFromDB(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// awaitBellWaiters waits until n connections of the test's database are
// blocked on a bell (a GET_LOCK with a timeout, as the server shows it).
func awaitBellWaiters(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	deadline := time.Now().Add(opTimeout)
	for {
		var got int
		err := db.QueryRowContext(ctxT(t), `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = DATABASE() AND INFO LIKE 'SELECT GET_LOCK(%' AND INFO NOT LIKE '%, 0)'`).Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections blocked on a bell after %v, want %d", got, opTimeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type acquired struct {
	l   backend.Lease
	err error
	at  time.Time
}

func acquireAsync(ctx context.Context, s backend.Session, name string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := s.Acquire(ctx, name)
		ch <- acquired{l, err, time.Now()}
	}()
	return ch
}

// TestBellFreedByAWaiterGrantedMeanwhile: a waiter whose bell wait got
// the bell, but which was granted the lease by another route (a change of
// its own Backend woke it) before that wait freed the bell, must still
// free it. Left on a connection of the pool, the bell stays held there:
// the waiter's Backend, the next holder, cannot take it, and the waiters
// of other Backends block on it, not woken by the release, until the
// holder's expiry. The TTL is a minute: the hand-off after the waiter's
// term must take well under a second.
func TestBellFreedByAWaiterGrantedMeanwhile(t *testing.T) {
	const ttl = time.Minute
	const handOff = 5 * time.Second
	dsn := mytest.DatabaseDSN(t)
	g := newBellGate()
	procA, procB := newBackendAt(t, dsn), newGatedBackend(t, dsn, g)
	a, a2 := open(t, procA, ttl), open(t, procA, ttl)
	w, other := open(t, procB, ttl), open(t, procB, ttl)

	la, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	wGot := acquireAsync(ctxT(t), w, "x")
	awaitBellWaiters(t, procA.DB(), 1) // w blocks on a's bell

	// a releases; w's bell wait gets the bell and is held up before it
	// frees it; meanwhile a change through w's Backend (another of its
	// sessions closes) wakes w, which finds itself first and is granted.
	g.arm()
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.got:
	case <-time.After(opTimeout):
		t.Fatal("w's bell wait did not end on a's release")
	}
	if err := other.Close(ctxT(t)); err != nil {
		close(g.open)
		t.Fatal(err)
	}
	var lw backend.Lease
	select {
	case r := <-wGot:
		if r.err != nil {
			close(g.open)
			t.Fatal(r.err)
		}
		lw = r.l
	case <-time.After(opTimeout):
		close(g.open)
		t.Fatal("w was not granted after a's release and a change of its Backend")
	}
	close(g.open) // w's bell wait goes on: it must free the bell

	// a2, of the other Backend, waits on w's bell; w releases.
	a2Got := acquireAsync(ctxT(t), a2, "x")
	awaitBellWaiters(t, procA.DB(), 1)
	released := time.Now()
	if err := lw.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-a2Got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("hand-off from w to a2 in %v", r.at.Sub(released))
		if err := r.l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	case <-time.After(handOff):
		t.Fatalf("a2 not granted %v after w's release: its release rang no bell", handOff)
	}
}
