package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/pgtest"
)

// smallPool returns a backend in a schema of the test's own on a pool of
// maxConns connections, named app in pg_stat_activity, with its pool.
func smallPool(t *testing.T, maxConns int32, opts ...postgres.Option) (*postgres.Backend, *pgxpool.Pool, string, string) {
	t.Helper()
	dsn, schema, app := pgtest.DSN(t), pgtest.Schema(t), pgtest.UniqueName(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b, err := postgres.NewFromPool(pool, append([]postgres.Option{postgres.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, pool, schema, app
}

// blockRegistrations locks schema's lease_names table on a connection of
// its own until the returned function runs (also at the test's end): every
// Acquire's registration then waits on the server, holding its pool
// connection.
func blockRegistrations(t *testing.T, schema string) (unblock func()) {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{schema}.Sanitize()+".lease_names IN EXCLUSIVE MODE")
	}
	if err != nil {
		conn.Close(context.Background())
		t.Fatalf("locking lease_names: %v", err)
	}
	var once sync.Once
	unblock = func() {
		once.Do(func() {
			_ = tx.Rollback(context.Background())
			conn.Close(context.Background())
		})
	}
	t.Cleanup(unblock)
	return unblock
}

// lockWaiters counts app's connections that wait for a lock on the server.
func lockWaiters(t *testing.T, app string) int {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKeepAliveNotBehindAcquires: with every connection the bound allows
// stuck in an Acquire (its registration waits on a lock) and more Acquires
// queued behind them, a keep-alive still finds a connection and renews.
// Unbounded, the Acquires took both connections of the pool and the
// keep-alive waited behind them until the lock went (at 10,000 elections
// on one client, past the session's deadline: docs/BENCHMARKS.md, Scale).
// The TTL is far above a statement's latency: the keep-alive's ctx is a
// third of it, as simba's renewals have at least.
func TestKeepAliveNotBehindAcquires(t *testing.T) {
	const ttl, acquires = 30 * time.Second, 20
	b, pool, schema, app := smallPool(t, 2)
	if got := b.MaxRequests(); got != 1 {
		t.Fatalf("MaxRequests on a pool of 2 = %d, want 1 (one connection left for renewals)", got)
	}
	s := open(t, b, ttl)
	unblock := blockRegistrations(t, schema)

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, acquires)
	leases := make(chan backend.Lease, acquires)
	for i := range acquires {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := s.Acquire(ctx, fmt.Sprintf("e%d", i))
			if err != nil {
				errs <- err
				return
			}
			leases <- l
		}()
	}
	defer wg.Wait() // after cancel and unblock, which run first
	defer unblock()
	defer cancel()
	// Every Acquire is in flight: on the server, waiting for the lock, or
	// waiting for a statement slot.
	var stuck, queued int
	if !eventually(opTimeout, func() bool {
		stuck, queued = lockWaiters(t, app), postgres.SlotWaiters(b)
		return stuck+queued == acquires
	}) {
		t.Fatalf("after %v, %d Acquires wait for the lock on the server and %d for a statement slot, want %d in all (pool: %d of %d connections in use; on the server: %q)",
			opTimeout, stuck, queued, acquires, pool.Stat().AcquiredConns(), pool.Stat().MaxConns(), activity(t, app))
	}
	if stuck > b.MaxRequests() {
		t.Fatalf("%d statements on the server, more than the bound %d", stuck, b.MaxRequests())
	}

	for i := range 3 {
		kctx, kcancel := context.WithTimeout(ctxT(t), ttl/3)
		got, err := s.KeepAlive(kctx)
		kcancel()
		if err != nil {
			t.Fatalf("keep-alive %d with %d Acquires on the server and %d waiting for a slot: %v (it waited for a pool connection: none left for renewals)", i, stuck, queued, err)
		}
		if got != ttl {
			t.Fatalf("keep-alive %d granted %v, want %v", i, got, ttl)
		}
	}
	select {
	case <-s.Done():
		t.Fatal("the session ended while its Acquires were queued")
	default:
	}

	unblock()
	wg.Wait()
	close(errs)
	close(leases)
	for err := range errs {
		t.Errorf("Acquire: %v", err)
	}
	n := 0
	for l := range leases {
		n++
		if err := l.Release(ctxT(t)); err != nil {
			t.Errorf("Release %s: %v", l.Name(), err)
		}
	}
	if n != acquires {
		t.Errorf("%d of %d Acquires held their lease once unblocked", n, acquires)
	}
}

// TestSleepingWaiterHoldsNoSlot: with a bound of one statement, an Acquire
// that waits its turn at a held lease does not keep the other statements
// out: it holds a slot only while it reads the queue.
func TestSleepingWaiterHoldsNoSlot(t *testing.T) {
	b, _, _, _ := smallPool(t, 2)
	a, c := open(t, b, 30*time.Second), open(t, b, 30*time.Second)
	l, err := a.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		l2, err := c.Acquire(ctxT(t), "x")
		if err == nil {
			err = l2.Release(ctxT(t))
		}
		res <- err
	}()
	var ids []string
	if !eventually(opTimeout, func() bool {
		ids, err = a.(backend.CandidateLister).Candidates(ctxT(t), "x")
		return err == nil && len(ids) == 2
	}) {
		t.Fatalf("the second candidacy is not queued: candidates %q, %v", ids, err)
	}
	// Bounded statements, one at a time, while c's Acquire sleeps.
	r := a.(backend.Records)
	cond := backend.Condition{Lease: "x", Token: l.Token()}
	for i := range 5 {
		if _, err := r.PutRecord(ctxT(t), "k", []byte{byte(i)}, cond); err != nil {
			t.Fatalf("PutRecord %d while another session waits for the lease: %v", i, err)
		}
		if _, err := r.GetRecord(ctxT(t), "k"); err != nil {
			t.Fatalf("GetRecord %d: %v", i, err)
		}
	}
	ly, err := a.Acquire(ctxT(t), "y")
	if err != nil {
		t.Fatalf("Acquire of another name while a waiter sleeps: %v", err)
	}
	if err := ly.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		t.Fatalf("the waiter returned while the lease was held: %v", err)
	default:
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("the waiter, once the lease was released: %v", err)
		}
	case <-time.After(opTimeout):
		t.Fatalf("the waiter did not hold within %v of the release", opTimeout)
	}
}

// TestSlotWaitEndsWithCtx: an Acquire waiting for a statement slot returns
// when its ctx ends, having sent nothing: no candidacy, no token counted.
func TestSlotWaitEndsWithCtx(t *testing.T) {
	b, pool, schema, app := smallPool(t, 2)
	s := open(t, b, 30*time.Second)
	unblock := blockRegistrations(t, schema)
	first := make(chan error, 1)
	go func() { // holds the one slot, waiting on the lock
		l, err := s.Acquire(ctxT(t), "first")
		if err == nil {
			err = l.Release(ctxT(t))
		}
		first <- err
	}()
	if !eventually(opTimeout, func() bool { return lockWaiters(t, app) == 1 }) {
		t.Fatal("the first Acquire's registration is not waiting for the lock on the server")
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	second := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, "second")
		second <- err
	}()
	if !eventually(opTimeout, func() bool { return postgres.SlotWaiters(b) == 1 }) {
		t.Fatalf("the second Acquire is not waiting for a slot (%d waiting)", postgres.SlotWaiters(b))
	}
	cancel()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire whose ctx ended while it waited for a slot: %v, want context.Canceled", err)
		}
	case <-time.After(opTimeout):
		t.Fatalf("the Acquire waiting for a slot did not return within %v of its ctx's end", opTimeout)
	}
	unblock()
	select {
	case err := <-first:
		if err != nil {
			t.Fatalf("the first Acquire, once unblocked: %v", err)
		}
	case <-time.After(opTimeout):
		t.Fatalf("the first Acquire did not hold within %v of the unblocking (%d statements wait for a slot; %d of the pool's connections in use; on the server: %q)", opTimeout, postgres.SlotWaiters(b), pool.Stat().AcquiredConns(), activity(t, app))
	}
	var rows int
	if err := pool.QueryRow(ctxT(t), "SELECT (SELECT count(*) FROM "+pgx.Identifier{schema}.Sanitize()+".candidacies WHERE name = 'second') + (SELECT count(*) FROM "+pgx.Identifier{schema}.Sanitize()+".lease_names WHERE name = 'second')").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("the Acquire that gave up before its turn left %d rows (candidacy or counter) for its name, want none", rows)
	}
}

// TestMaxRequestsOptions: the bound in effect, and the errors of a bad
// bound or a pool too small to leave a connection for renewals.
func TestMaxRequestsOptions(t *testing.T) {
	const dsn = "postgres://simba@127.0.0.1:1/none?sslmode=disable" // never connected to
	for _, tc := range []struct {
		conns int32
		opts  []postgres.Option
		want  int
	}{
		{4, nil, 3},
		{100, nil, postgres.DefaultMaxRequests},
		{10, []postgres.Option{postgres.WithMaxRequests(5)}, 5},
		{4, []postgres.Option{postgres.WithMaxRequests(5)}, 3},
		{2, []postgres.Option{postgres.WithMaxRequests(1)}, 1},
	} {
		b, err := postgres.New(fmt.Sprintf("%s&pool_max_conns=%d", dsn, tc.conns), tc.opts...)
		if err != nil {
			t.Fatalf("New, pool of %d: %v", tc.conns, err)
		}
		if got := b.MaxRequests(); got != tc.want {
			t.Errorf("MaxRequests, pool of %d: %d, want %d", tc.conns, got, tc.want)
		}
		b.Close()
	}
	for _, n := range []int{0, -1} {
		_, err := postgres.New(dsn, postgres.WithMaxRequests(n))
		if err == nil || !strings.Contains(err.Error(), "max requests must be positive") {
			t.Errorf("New with WithMaxRequests(%d): %v, want an error saying it must be positive", n, err)
		}
	}
	if _, err := postgres.New(dsn + "&pool_max_conns=1"); err == nil || !strings.Contains(err.Error(), "want at least 2") {
		t.Errorf("New on a pool of 1 connection: %v, want an error asking for 2", err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := postgres.NewFromPool(pool); err == nil || !strings.Contains(err.Error(), "want at least 2") {
		t.Errorf("NewFromPool on a pool of 1 connection: %v, want an error asking for 2", err)
	}
	if _, err := postgres.NewFromPool(pool, postgres.WithMaxRequests(0)); err == nil || !strings.Contains(err.Error(), "max requests must be positive") {
		t.Errorf("NewFromPool with WithMaxRequests(0): %v, want an error saying it must be positive", err)
	}
}

// activity describes app's connections on the server (state, wait, query),
// for a failure's message.
func activity(t *testing.T, app string) []string {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT state || ' ' || coalesce(wait_event_type,'') || ' ' || coalesce(wait_event,'') || ' ' || left(query, 60) FROM pg_stat_activity WHERE application_name = $1", app)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}
