package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/pgtest"
)

// counter is a pgx tracer that counts the statements sent.
type counter struct{ n atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestRenewalCost: a session holding many leases, renewed every TTL/3
// for twice its TTL, sends one statement per renewal and nothing else:
// no read per lease, no poll (the backend's own pool, on the caller's
// pool, counted by a tracer; without LISTEN so that no notification of the
// test's own acquisitions makes a holder read).
func TestRenewalCost(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	tr := &counter{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b, err := postgres.NewFromPool(pool, postgres.WithSchema(pgtest.Schema(t)), postgres.WithoutListen(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// A TTL long enough that a loaded machine, where 100 acquisitions
	// can take a second, does not let the session lapse before the
	// count starts; the acquisitions renew it as they go.
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
	before := tr.n.Load()
	const renewals = 6
	for range renewals {
		time.Sleep(ttl / 3)
		if _, err := s.KeepAlive(ctxT(t)); err != nil {
			t.Fatalf("renewal (every TTL/3 of %v): %v", ttl, err)
		}
	}
	if got := tr.n.Load() - before; got != renewals {
		t.Errorf("%d statements for %d renewals of a session holding 100 leases, want one per renewal", got, renewals)
	}
	if held, err := s.(backend.LeaseLister).HeldLeases(ctxT(t), "p."); err != nil || len(held) != 100 {
		t.Errorf("HeldLeases = %d names, %v; want 100", len(held), err)
	}
}
