package mysql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/internal/mytest"
)

// countingConnector counts the statements its connections send (an Exec,
// a Query, or an Exec or Query of a prepared statement).
type countingConnector struct {
	driver.Connector
	n *atomic.Int64
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return countingConn{conn.(fullConn), c.n}, nil
}

// fullConn is what go-sql-driver/mysql's connections implement, which the
// counting one passes on.
type fullConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

type countingConn struct {
	fullConn
	n *atomic.Int64
}

func (c countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.n.Add(1)
	return c.fullConn.ExecContext(ctx, q, args)
}

func (c countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.n.Add(1)
	return c.fullConn.QueryContext(ctx, q, args)
}

func (c countingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	c.n.Add(1)
	return c.fullConn.PrepareContext(ctx, q)
}

// TestRenewalCost: a session holding many leases, renewed every TTL/3
// for twice its TTL, sends one statement per renewal and nothing else: no
// read per lease, no poll (counted on the backend's pool: a pool of the
// test's own whose connections count what they send; a statement with
// arguments, prepared by the driver, counts as one).
func TestRenewalCost(t *testing.T) {
	cfg, err := gomysql.ParseDSN(mytest.DatabaseDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	mysql.NeedMultiStatements(cfg)
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	db := sql.OpenDB(countingConnector{conn, &n})
	defer db.Close()
	b, err := mysql.NewFromDB(db, mysql.WithPollInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const ttl = 3 * time.Second
	s := open(t, b, ttl)
	for i := range 100 {
		if _, err := s.Acquire(ctxT(t), fmt.Sprintf("p.%d", i)); err != nil {
			t.Fatalf("acquiring p.%d: %v", i, err)
		}
		if i%20 == 19 {
			if _, err := s.KeepAlive(ctxT(t)); err != nil {
				t.Fatalf("renewing after %d acquisitions: %v", i+1, err)
			}
		}
	}
	time.Sleep(ttl / 3) // the bells taken, the monitor's looks at the new holdings over
	before := n.Load()
	t.Logf("%d statements to open the session and acquire 100 leases", before)
	const renewals = 6
	for range renewals {
		time.Sleep(ttl / 3)
		if _, err := s.KeepAlive(ctxT(t)); err != nil {
			t.Fatalf("renewal (every TTL/3 of %v): %v", ttl, err)
		}
	}
	if got := n.Load() - before; got != renewals {
		t.Errorf("%d statements for %d renewals of a session holding 100 leases, want one per renewal", got, renewals)
	}
	if held, err := s.(backend.LeaseLister).HeldLeases(ctxT(t), "p."); err != nil || len(held) != 100 {
		t.Errorf("HeldLeases = %d names, %v; want 100", len(held), err)
	}
}
