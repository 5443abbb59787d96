package fence

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A claim closes the one window that fencing each write leaves open: the
// new leader's reads. A deposed leader's write that had already passed the
// token check when it was paused (a SQL transaction between Check and
// COMMIT, a Redis script or an etcd transaction on its way) is accepted
// when it lands, as long as no higher token has been recorded yet. If the
// new leader loaded its state (a cursor, a counter) before that write
// landed and then writes a value computed from it, the deposed leader's
// accepted write is overwritten: an update lost with no stale write
// accepted. A claim is a fenced write of its own, made at the start of a
// term before anything is read: it records the term's token, waits for
// and orders after any older write still in flight, and from then on
// every write with an older token is rejected. docs/FENCING.md has the
// timeline.
//
// Run the claim once at the start of every term, before the task reads
// anything, with simba.WithClaim:
//
//	client.Election("ingest").RunWhileLeader(work, simba.WithClaim(func(ctx context.Context, term *simba.Term) error {
//		return f.Claim(ctx, db, "ingest", term.Token())
//	}))

// TxBeginner begins transactions: *sql.DB and *sql.Conn.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Claim records token as resource's highest in a transaction of its own
// and commits it, so that from then on every transaction checked with a
// lower token is rejected; it returns a [*StaleError], matching
// [ErrStale], when a higher token is recorded already. Call it at the
// start of a term, before reading the state the term's writes depend on
// (see simba.WithClaim).
//
// Claim waits for any transaction that has checked the same resource and
// not ended yet (PostgreSQL: the fence row's lock; SQLite: the write lock,
// within the busy timeout), so a deposed leader's transaction that had
// passed its check commits before the claim, and is seen by what the new
// leader reads afterwards, or fails its check after it. A leader paused
// inside such a transaction delays the claim until it resumes or its
// connection ends: on PostgreSQL bound that with the server's
// idle_in_transaction_session_timeout, and bound the wait with ctx.
//
// Errors are those of [SQL.Check] and of the database's BeginTx and
// Commit, wrapped, and [ErrInvalidArgument] for a nil db.
func (s SQL) Claim(ctx context.Context, db TxBeginner, resource string, token uint64) error {
	if _, err := s.table(); err != nil {
		return err
	}
	if db == nil {
		return invalid("nil database handle")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("simba/fence: claim %q: %w", resource, err)
	}
	defer tx.Rollback() // a no-op after Commit
	if err := s.Check(ctx, tx, resource, token); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("simba/fence: claim %q: commit: %w", resource, err)
	}
	return nil
}

// claimScript: KEYS[1] the token key; ARGV[1] the token.
var claimScript = redis.NewScript(scriptPrelude + `
redis.call('SET', KEYS[1], ARGV[1])
return {1, ARGV[1]}
`)

// Claim records token as resource's highest, in one script, so that from
// then on every write with a lower token is rejected; it returns a
// [*StaleError], matching [ErrStale], when a higher token is recorded
// already. Call it at the start of a term, before reading the keys the
// term's writes depend on (see simba.WithClaim). Redis runs scripts one at
// a time, so a deposed leader's write either ran before the claim, and is
// seen by what the new leader reads afterwards, or is rejected.
//
// Errors are those of [Redis.Set].
func (r Redis) Claim(ctx context.Context, resource string, token uint64) error {
	if r.Client == nil {
		return invalid("nil Redis client")
	}
	return r.runKeys(ctx, claimScript, resource, token, []string{r.TokenKey(resource)}, "claim")
}

// Claim records token as resource's highest in a transaction of its own
// ([Etcd.Commit] with no operations), so that from then on every guarded
// transaction with a lower token fails; it returns a [*StaleError],
// matching [ErrStale], when a higher token is recorded already. Call it at
// the start of a term, before reading the keys the term's writes depend on
// (see simba.WithClaim). etcd applies transactions one at a time, so a
// deposed leader's transaction either was applied before the claim, and is
// seen by what the new leader reads afterwards (at a later revision), or
// fails its guard.
//
// Errors are those of [Etcd.Commit].
func (e Etcd) Claim(ctx context.Context, kv clientv3.KV, resource string, token uint64) error {
	_, err := e.Commit(ctx, kv, resource, token)
	return err
}
