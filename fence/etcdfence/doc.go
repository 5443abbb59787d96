// Package etcdfence fences writes to etcd (through go.etcd.io/etcd/client/v3)
// with a term's token: a deposed leader's late transaction fails, and is
// reported as [fence.ErrStale]. Package fence describes the pattern and what
// fencing cannot protect.
//
// [Fence.Guard] returns a compare and two operations for the caller's own
// etcd transaction; [Fence.Commit] runs such a transaction, and
// [Fence.Stale] tells a stale token from the caller's own compares failing:
//
//	_, err := etcdfence.Fence{}.Commit(ctx, cli, "ingest", term.Token(), clientv3.OpPut("/ingest/cursor", cursor))
//	if errors.Is(err, fence.ErrStale) {
//		// A later term has written: stop.
//	}
//
// [Fence.Claim] claims the resource at the start of a term, before the term
// reads anything (see package fence and simba.WithClaim). Errors have the
// prefix "simba/fence: "; a rejected token is a [*fence.StaleError], bad
// input matches [fence.ErrInvalidArgument].
package etcdfence
