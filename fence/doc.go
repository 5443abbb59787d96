// Package fence turns a term's fencing token into a check on the resources
// leaders write to, so that a deposed leader's late writes are rejected.
//
// A leader can be paused (a GC pause, a stopped VM, SIGSTOP) or cut off for
// longer than its lease, while another node is elected and starts writing.
// simba ends the paused leader's term on its own clock, but a write already
// on its way when the pause began still arrives afterwards. Only the
// resource can refuse it, and it can because every term's token
// (simba.Term.Token) is higher than the tokens of the terms before it: the
// resource records the highest token it has accepted and rejects lower
// ones. This package does that for SQL databases, Redis and etcd, as one
// step of the write itself, so that the check and the write cannot be
// separated by a pause:
//
//	err := fence.SQL{Dialect: fence.Postgres}.Check(ctx, tx, "ingest", term.Token())
//	if errors.Is(err, fence.ErrStale) {
//		// A later term has written: roll back, and stop.
//	}
//
// A resource is a name chosen by the application, any string: all the writes
// fenced with one resource name form one fenced resource, however many rows
// or keys they touch. Fence every write of a task with the same resource
// name (the election's name is a good one), so that once the new leader has
// written anything, the old one can write nothing. Tokens equal to the
// highest recorded are accepted: a leader writes many times in one term.
//
// # SQL
//
// [SQL.Check] runs inside the caller's *sql.Tx: it records the token in a
// fence table (one row per resource; [SQL.CreateTable] or [SQL.DDL]) and
// fails with [ErrStale] when a higher one is recorded, so the check and the
// caller's writes commit or roll back together. It is correct under
// concurrent transactions at the default isolation level of PostgreSQL and
// SQLite; [SQL.Check] explains why, and how SQLite's locking wants the
// transaction begun.
//
// # Redis
//
// [Redis.Set] and [Redis.HSet] compare, write and record in one Lua script,
// which Redis runs atomically. The token lives in a key of its own per
// resource ([Redis.TokenKey]), without a TTL.
//
// # etcd
//
// [Etcd.Guard] returns a compare and two operations for the caller's own
// etcd transaction; [Etcd.Commit] runs such a transaction, and [Etcd.Stale]
// tells a stale token from the caller's own compares failing.
//
// # What fencing cannot protect
//
// Only writes to the fenced resource are checked. A deposed leader's other
// effects still happen: an e-mail sent, a message published to a broker, a
// call to a payment API, a file written next to the database. Make those
// idempotent, or route them through the fenced resource (an outbox table
// written in the fenced transaction and drained by the current leader).
// A rejected write is not retried by this package: the caller must stop
// working in a term that is over (simba cancels its ctx), not retry.
// Fencing orders leaders; it does not make one leader's retries idempotent.
// A write whose reply was lost may have been applied: write it again with
// the same token, which the fence accepts, and make the write itself
// idempotent.
//
// # Errors
//
// A rejected token is a [*StaleError], which matches [ErrStale]; bad input
// matches [ErrInvalidArgument]. Errors from the database or server are
// wrapped, with the prefix "simba/fence: ". Test them with errors.Is.
package fence
