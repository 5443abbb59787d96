// Package redisfence fences writes to Redis (through
// github.com/redis/go-redis/v9) with a term's token: a deposed leader's late
// write is rejected with [fence.ErrStale]. Package fence describes the
// pattern and what fencing cannot protect.
//
// [Fence.Set] and [Fence.HSet] compare, write and record in one Lua script,
// which Redis runs atomically. The token lives in a key of its own per
// resource ([Fence.TokenKey]), without a TTL:
//
//	f := redisfence.Fence{Client: rdb}
//	if err := f.Set(ctx, "ingest", term.Token(), "ingest:cursor", cursor, 0); errors.Is(err, fence.ErrStale) {
//		// A later term has written: stop.
//	}
//
// [Fence.Claim] claims the resource at the start of a term, before the term
// reads anything (see package fence and simba.WithClaim). Errors have the
// prefix "simba/fence: "; a rejected token is a [*fence.StaleError], bad
// input matches [fence.ErrInvalidArgument].
package redisfence
