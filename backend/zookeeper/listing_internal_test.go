package zookeeper

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
)

// keys returns the keys of a listing.
func keys(list []backend.Record) []string {
	out := make([]string, 0, len(list))
	for _, r := range list {
		out = append(out, r.Key)
	}
	return out
}

// A listing answered from a watch's kept listing (no request) is as current
// as a read sent at the same instant: an operation recorded by another
// session before it released a lease is in the listing its waiter reads as
// soon as it is granted (what a term's start relies on: simba's opsView
// reads the operations between the grant and the first run), round after
// round, while the listings in between send no request.
//
// Kills the mutant that drops w.disarmLocked() from recordEventLocked (the
// kept listing outlives the watch's event): fails in the first round with
// "granted after ops/disabled/r0 was recorded, the waiter's listing misses
// it".
func TestKeptListingIsCurrentAtGrant(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	waiter := openInternal(t, addr, root)
	holder := openInternal(t, addr, root)
	ctx := t.Context()
	hints, err := waiter.WatchRecords(ctx, "ops/")
	require.NoError(t, err)
	_, err = waiter.ListRecords(ctx, "ops/")
	require.NoError(t, err)
	reads := waiter.listReads.Load()
	for range 3 {
		_, err = waiter.ListRecords(ctx, "ops/")
		require.NoError(t, err)
	}
	require.Equal(t, reads, waiter.listReads.Load(), "listings while the watch is set and has not fired send no request")

	want := []string{}
	for round := range 5 {
		held, err := holder.Acquire(ctx, "q")
		require.NoError(t, err)
		a := backendtest.AcquireAsync(ctx, waiter, "q")
		waitQueue(t, holder, "q", holder.sid, waiter.sid)
		key := fmt.Sprintf("ops/disabled/r%d", round)
		_, err = holder.PutRecord(ctx, key, []byte("x"), backend.Condition{})
		require.NoError(t, err)
		want = append(want, key)
		require.NoError(t, held.Release(ctx))
		r := await.For(t, a, 10*time.Second, "the waiter granted after the release")
		require.NoError(t, r.Err)
		list, err := waiter.ListRecords(ctx, "ops/")
		require.NoError(t, err)
		require.ElementsMatch(t, want, keys(list), "granted after %s was recorded, the waiter's listing misses it", key)
		require.NoError(t, r.Lease.Release(ctx))
		// Once the watch is set again (its hint), a listing is kept again.
		await.For(t, hints, 10*time.Second, "a hint after a record write")
		_, err = waiter.ListRecords(ctx, "ops/")
		require.NoError(t, err)
		reads := waiter.listReads.Load()
		list, err = waiter.ListRecords(ctx, "ops/")
		require.NoError(t, err)
		require.ElementsMatch(t, want, keys(list))
		require.Equal(t, reads, waiter.listReads.Load(), "round %d: the listing after the hint is kept", round)
	}
}

// A reconnection drops the kept listing (the watch's events are not relied
// on across one): the next listing is read, and kept again once the watch
// is set again. A listing of another prefix is never kept.
//
// Kills the mutant that drops w.disarmLocked() from reconnected: fails
// with "a listing after a reconnection is read".
func TestKeptListingDroppedOnReconnect(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	p, err := faultproxy.New(addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	s := openWithTTL(t, p.Addr(), root, 4*time.Second)
	ctx := t.Context()
	hints, err := s.WatchRecords(ctx, "ops/")
	require.NoError(t, err)
	_, err = s.ListRecords(ctx, "ops/")
	require.NoError(t, err)
	reads := s.listReads.Load()
	_, err = s.ListRecords(ctx, "status/")
	require.NoError(t, err)
	_, err = s.ListRecords(ctx, "ops/d")
	require.NoError(t, err)
	require.Equal(t, reads+2, s.listReads.Load(), "listings of other prefixes are read")

	reconnects := s.reconnection()
	p.Reset()
	await.For(t, reconnects, 15*time.Second, "a reconnection after the reset")
	reads = s.listReads.Load()
	_, err = s.ListRecords(ctx, "ops/")
	require.NoError(t, err)
	require.Equal(t, reads+1, s.listReads.Load(), "a listing after a reconnection is read")
	await.For(t, hints, 10*time.Second, "a hint after the reconnection")
	require.Eventually(t, func() bool {
		_, err := s.ListRecords(context.Background(), "ops/")
		require.NoError(t, err)
		n := s.listReads.Load()
		_, err = s.ListRecords(context.Background(), "ops/")
		require.NoError(t, err)
		return s.listReads.Load() == n
	}, 10*time.Second, 10*time.Millisecond, "a listing is kept again once the watch is set again")
}
