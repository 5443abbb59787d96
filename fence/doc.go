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
// ones. The packages under fence do that for SQL databases, Redis and etcd,
// as one step of the write itself, so that the check and the write cannot be
// separated by a pause:
//
//	err := sqlfence.Fence{Dialect: sqlfence.Postgres}.Check(ctx, tx, "ingest", term.Token())
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
// # The kinds of resource
//
// Each kind is a package of its own, so that a program compiles only the
// client of the resource it fences (fencing SQL writes does not compile the
// etcd client or go-redis):
//
//   - [github.com/simba-go/simba/fence/sqlfence]: PostgreSQL and SQLite,
//     through database/sql. The check runs inside the caller's *sql.Tx and
//     records the token in a fence table, so the check and the caller's
//     writes commit or roll back together.
//   - [github.com/simba-go/simba/backend/postgres/pglease]: PostgreSQL with
//     simba's PostgreSQL backend, through pgx or database/sql. The check
//     reads simba's own lease row inside the caller's transaction and locks
//     it until the commit, so a deposed holder's write is refused even
//     when no newer holder has written yet; no fence table.
//   - [github.com/simba-go/simba/fence/redisfence]: Redis, through go-redis.
//     A fenced SET or HSET compares, writes and records in one Lua script,
//     which Redis runs atomically.
//   - [github.com/simba-go/simba/fence/etcdfence]: etcd, through its Go
//     client. A guard (a compare and two operations) goes into the caller's
//     own etcd transaction.
//
// This package holds what they share: the errors, and this description of
// the pattern.
//
// # Claims
//
// Fencing each write leaves one window open: the new leader's reads. A
// deposed leader's write that had already passed the token check when it
// was paused (a SQL transaction between the check and COMMIT, a Redis
// script or an etcd transaction on its way) is accepted when it lands, as
// long as no higher token has been recorded yet. If the new leader loaded
// its state (a cursor, a counter) before that write landed and then writes
// a value computed from it, the deposed leader's accepted write is
// overwritten: an update lost with no stale write accepted. A claim is a
// fenced write of its own, made at the start of a term before anything is
// read: it records the term's token, waits for and orders after any older
// write still in flight, and from then on every write with an older token
// is rejected. docs/FENCING.md has the timeline. Every kind has a Claim
// method; run it once at the start of every term, before the task reads
// anything, with simba.WithClaim:
//
//	client.Election("ingest").RunWhileLeader(work, simba.WithClaim(func(ctx context.Context, term *simba.Term) error {
//		return f.Claim(ctx, db, "ingest", term.Token())
//	}))
//
// # What fencing cannot protect
//
// Only writes to the fenced resource are checked. A deposed leader's other
// effects still happen: an e-mail sent, a message published to a broker, a
// call to a payment API, a file written next to the database. Make those
// idempotent, or route them through the fenced resource (an outbox table
// written in the fenced transaction and drained by the current leader).
// A rejected write is not retried by the fence: the caller must stop
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
