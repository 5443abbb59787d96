package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
)

// An Acquire whose ctx ends withdraws its candidacy; when the delete is
// lost with the connection (go-zookeeper answers it ErrConnectionClosed),
// the withdrawal tries again once the connection is back, so that the
// candidacy does not stay at the head of the queue, ahead of every later
// candidate, for as long as the session lives.
//
// The waiter's requests are held back by the proxy before its ctx ends, so
// that its delete never reaches the server; once Acquire has returned (it
// waits withdrawWait for the delete), the connection is reset, which drops
// the held requests and fails the delete. The candidacy must be gone
// within 10s, while the session lives on (renewed, on a 4s timeout).
//
// Kills the mutant backend/zookeeper/lease.go:533:11 "==" → "!=" (withdraw
// returns on any error, and retries after a success): fails with
// "candidates of "q": [<watcher> <waiter>], want [<watcher>]" after 10s.
func TestWithdrawRetriesALostDelete(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	p, err := faultproxy.New(addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	watcher := openInternal(t, addr, root)
	waiter := openWithTTL(t, p.Addr(), root, 4*time.Second)
	lw, err := watcher.Acquire(t.Context(), "q")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	a := backendtest.AcquireAsync(ctx, waiter, "q")
	waitQueue(t, watcher, "q", watcher.sid, waiter.sid)
	require.Eventually(t, func() bool { return len(pendingOlder(waiter, "q")) == 1 }, 10*time.Second, 5*time.Millisecond,
		"the waiter counts the holder's candidacy")

	p.DelayRequests(time.Minute)
	cancel()
	var r backendtest.Acquired
	select {
	case r = <-a:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return within 10s of its ctx's end")
	}
	require.ErrorIs(t, r.Err, context.Canceled)
	// The delete has been sent (Acquire waited withdrawWait for it): it is
	// held in the proxy, and the reset drops it and fails it.
	p.DelayRequests(0)
	p.Reset()

	waitQueue(t, watcher, "q", watcher.sid)
	select {
	case <-waiter.Done():
		t.Fatalf("the waiter's session ended (%v): the withdrawal was not what removed its candidacy", waiter.live("check"))
	default:
	}
	require.NoError(t, lw.Release(t.Context()))
}
