package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/pgtest"
)

// A waiter whose own session looks expired in its queue read, while the
// deletion of its row (clearExpired) fails, reads again rather than give
// up: its ctx is alive, and the session may have been renewed meanwhile.
// The test holds a lock on the waiter's session row (FOR UPDATE, taken
// once its candidacy is registered) while the row expires unrenewed, so
// that every clearExpired blocks and times out after withdrawTimeout (1s);
// 4s after the expiry the lock goes, the row is deleted, and Acquire must
// end with ErrSessionDone. (The waiter's TTL, 3s, leaves the set-up time
// to lock the row before it expires: at 1s, a loaded machine's set-up took
// longer, the row was gone before the lock, and Acquire ended at once.)
//
// Kills the mutant that gives up on any clearExpired error (in Ahead,
// "if over {" → "if over || err != nil {"; once "&&" → "||" at
// lease.go:134:25): Acquire then returns at the first failed clearExpired,
// while the row is still locked, and the test fails with "Acquire: ...,
// want it still waiting while its expired row is locked" (tried by hand).
func TestWaiterRetriesAFailedClearExpired(t *testing.T) {
	dsn, schema := pgtest.DSN(t), pgtest.Schema(t)
	b := newBackendIn(t, dsn, schema, postgres.WithoutListen(200*time.Millisecond))
	const ttl = 3 * time.Second
	h, opened, w := open(t, b, 20*time.Second), time.Now(), open(t, b, ttl)
	renew(t, h)
	lh, err := h.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	a := backendtest.AcquireAsync(ctx, w, "x")
	var ids []string
	await.Until(t, 10*time.Second, "the waiter's candidacy registered", func() bool {
		var err error
		if ids, err = h.(backend.CandidateLister).Candidates(ctxT(t), "x"); err != nil {
			t.Fatal(err)
		}
		return len(ids) == 2
	}, func() string { return fmt.Sprintf("candidates %q", ids) })
	conn, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	tag, err := tx.Exec(ctxT(t), "SELECT 1 FROM "+pgx.Identifier{schema, "sessions"}.Sanitize()+" WHERE id = $1 FOR UPDATE", w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("the waiter's session row was gone when the test locked it, %v after its Open (TTL %v): the set-up took too long", time.Since(opened), ttl)
	}
	// The row expires a TTL after Open; clearExpired fails from then on.
	select {
	case r := <-a:
		tx.Rollback(context.Background())
		t.Fatalf("Acquire: %v, %v after the waiter's Open (TTL %v), want it still waiting while its expired row is locked", r.Err, time.Since(opened), ttl)
	case <-time.After(time.Until(opened.Add(ttl + 4*time.Second))):
	}
	if err := tx.Rollback(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-a:
		if !errors.Is(r.Err, backend.ErrSessionDone) {
			t.Fatalf("Acquire: %v, want an error wrapping ErrSessionDone", r.Err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Acquire still waiting 20s after the lock on its expired session's row went")
	}
	if err := lh.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}
