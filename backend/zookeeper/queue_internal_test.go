package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
)

// waitQueue waits until the candidacies of name are those of want, in
// order, and fails the test after 10s.
func waitQueue(t *testing.T, s *session, name string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q, err := s.Candidates(t.Context(), name)
		require.NoError(t, err)
		if len(want) == 0 && len(q) == 0 || assert.ObjectsAreEqual(want, q) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("candidates of %q: %v, want %v", name, q, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pendingOlder returns the older candidacies a waiting Acquire of s for
// name counts.
func pendingOlder(s *session, name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[name]
	if l == nil || l.state != leasePending {
		return nil
	}
	var out []string
	for p := range l.older {
		out = append(out, p)
	}
	return out
}

// A waiter counts the deletes of the candidacies older than its own, which
// it learnt from the listing behind its create: a holder's release hands
// the lease on at once, a middle one's withdrawal only shortens the count,
// and the waiter's own withdrawal (ctx ended) leaves the queue before
// Acquire returns.
func TestQueueOlderSetAndWithdrawal(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	s1, s2, s3 := openInternal(t, addr, root), openInternal(t, addr, root), openInternal(t, addr, root)
	l1, err := s1.Acquire(t.Context(), "q")
	require.NoError(t, err)
	ctx2, cancel2 := context.WithCancel(t.Context())
	defer cancel2()
	a2 := backendtest.AcquireAsync(ctx2, s2, "q")
	waitQueue(t, s1, "q", s1.sid, s2.sid)
	a3 := backendtest.AcquireAsync(t.Context(), s3, "q")
	waitQueue(t, s1, "q", s1.sid, s2.sid, s3.sid)
	require.Eventually(t, func() bool { return len(pendingOlder(s3, "q")) == 2 }, 10*time.Second, 5*time.Millisecond,
		"the third counts two older candidacies")
	// s2's candidacy shows in the queue as soon as it is created, its
	// count once the listing behind the create is read: wait for that too.
	require.Eventually(t, func() bool { return len(pendingOlder(s2, "q")) == 1 }, 10*time.Second, 5*time.Millisecond,
		"the second counts the holder's candidacy")
	assert.ElementsMatch(t, []string{CandidacyPathOf(l1)}, pendingOlder(s2, "q"))

	cancel2() // the middle one leaves
	r2 := <-a2
	require.ErrorIs(t, r2.Err, context.Canceled)
	q, err := s1.Candidates(t.Context(), "q")
	require.NoError(t, err)
	assert.Equal(t, []string{s1.sid, s3.sid}, q, "withdrawn before Acquire returned")
	require.Eventually(t, func() bool { return len(pendingOlder(s3, "q")) == 1 }, 10*time.Second, 5*time.Millisecond)
	select {
	case r := <-a3:
		t.Fatalf("the third holds while the first does: %v", r.Err)
	default:
	}

	require.NoError(t, l1.Release(t.Context()))
	r3 := <-a3
	require.NoError(t, r3.Err)
	assert.Greater(t, r3.Lease.Token(), l1.Token())
	waitQueue(t, s1, "q", s3.sid)
	require.NoError(t, r3.Lease.Release(t.Context()))
}

// CandidacyPathOf is CandidacyPath, inside the package.
func CandidacyPathOf(l backend.Lease) string { return l.(*lease).path }

// A create whose reply is lost (the connection dropped with the reply on
// its way) leaves a candidacy of the session's that the next attempt finds
// by its name, among the older ones, and deletes: the lease is held by the
// new candidacy, and only it is left.
func TestLostReplyOfSequentialCreate(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	p, err := faultproxy.New(addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	watcher := openInternal(t, addr, root)
	s := openInternal(t, p.Addr(), root)
	// The container exists, held by nobody: the watcher holds another name.
	lw, err := watcher.Acquire(t.Context(), "q")
	require.NoError(t, err)

	p.StallReplies()
	a := backendtest.AcquireAsync(t.Context(), s, "q")
	waitQueue(t, watcher, "q", watcher.sid, s.sid) // the create was applied
	p.Reset()
	p.Resume()
	require.NoError(t, lw.Release(t.Context()))
	var r backendtest.Acquired
	select {
	case r = <-a:
	case <-time.After(20 * time.Second):
		t.Fatal("Acquire did not return after the connection came back")
	}
	require.NoError(t, r.Err)
	waitQueue(t, watcher, "q", s.sid)
	assert.Equal(t, []string{CandidacyPathOf(r.Lease)}, children(t, watcher, "q"))
	require.NoError(t, r.Lease.Release(t.Context()))
}

// children returns the paths of the candidacy znodes of name.
func children(t *testing.T, s *session, name string) []string {
	t.Helper()
	ch, _, err := s.conn.Children(s.p.lease(name))
	require.NoError(t, err)
	var out []string
	for _, c := range ch {
		out = append(out, s.p.lease(name)+"/"+c)
	}
	return out
}

// ReleaseWithRecords builds its multi-operation from what the session
// last read or wrote: the status record written in the term and a slot
// read before cost no read. A stale entry (the record written by another
// client since) fails the versions, and the release reads and tries
// again; a record written with a newer token is left as it is, whether
// the cache knew of it or not.
func TestReleaseWithRecordsCache(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	s := openInternal(t, addr, root)
	c := zktest.Connect(t, addr)
	ctx := t.Context()

	// Hit: a record written in the term, and one read before. (A record
	// never written, whose directory does not exist either, is a miss:
	// the directory is created first. So is a record's first create, whose
	// new directory's version the session has not seen.)
	_, err := s.PutRecord(ctx, "status/x", []byte("an earlier term's"), backend.Condition{})
	require.NoError(t, err)
	l, err := s.Acquire(ctx, "x")
	require.NoError(t, err)
	fence := backend.Condition{Lease: "x", Token: l.Token()}
	_, err = s.PutRecord(ctx, "status/x", []byte("running"), fence)
	require.NoError(t, err)
	_, err = c.Create(s.p.root+"/rec/history", nil, 0, s.b.cfg.acl)
	require.NoError(t, err)
	_, err = c.Create(s.p.root+"/rec/history/x", nil, 0, s.b.cfg.acl)
	require.NoError(t, err)
	_, err = c.Create(s.p.recordDir("history/x/7"), nil, 0, s.b.cfg.acl) // not a container: not reaped
	require.NoError(t, err)
	_, err = s.PutRecord(ctx, "history/x/8", []byte("old"), backend.Condition{})
	require.NoError(t, err)
	// What simba does when a run starts (backend.RecordPrefetcher): the
	// slots it may end in, one absent (7), one present (8), one never
	// used, whose directory does not exist (9): prefetching creates it.
	require.NoError(t, s.PrefetchRecords(ctx, "history/x/7", "history/x/8", "history/x/9"))
	ok, _, err := c.Exists(s.p.recordDir("history/x/9"))
	require.NoError(t, err)
	require.True(t, ok, "PrefetchRecords created the directory of a slot never used")
	before := s.recordReads.Load()
	require.NoError(t, l.(backend.RecordReleaser).ReleaseWithRecords(ctx, []backend.Record{
		{Key: "status/x", Value: []byte("idle")},
		{Key: "history/x/7", Value: []byte("run 7")},
		{Key: "history/x/8", Value: []byte("run 8")},
		{Key: "history/x/9", Value: []byte("run 9")},
	}))
	assert.Equal(t, before, s.recordReads.Load(), "a release served from the cache reads nothing")
	for key, want := range map[string]string{"status/x": "idle", "history/x/7": "run 7", "history/x/8": "run 8", "history/x/9": "run 9"} {
		r, err := s.GetRecord(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, want, string(r.Value), key)
		assert.Equal(t, l.Token(), r.Token, key)
	}

	// Stale: another client wrote the record since.
	l, err = s.Acquire(ctx, "x")
	require.NoError(t, err)
	_, err = s.PutRecord(ctx, "status/x", []byte("running"), backend.Condition{Lease: "x", Token: l.Token()})
	require.NoError(t, err)
	_, err = c.Set(s.p.record("status/x"), encodeRecord(0, []byte("by hand")), -1)
	require.NoError(t, err)
	before = s.recordReads.Load()
	require.NoError(t, l.(backend.RecordReleaser).ReleaseWithRecords(ctx, []backend.Record{{Key: "status/x", Value: []byte("idle")}}))
	assert.Greater(t, s.recordReads.Load(), before, "the stale entry made it read")
	r, err := s.GetRecord(ctx, "status/x")
	require.NoError(t, err)
	assert.Equal(t, "idle", string(r.Value))

	// Newer token, unknown to the cache (written behind its back), then
	// known to it (read since).
	for _, known := range []bool{false, true} {
		l, err = s.Acquire(ctx, "x")
		require.NoError(t, err)
		_, err = s.PutRecord(ctx, "status/x", []byte("running"), backend.Condition{Lease: "x", Token: l.Token()})
		require.NoError(t, err)
		_, err = c.Set(s.p.record("status/x"), encodeRecord(l.Token()+1000, []byte("newer")), -1)
		require.NoError(t, err)
		if known {
			_, err = s.GetRecord(ctx, "status/x")
			require.NoError(t, err)
		}
		require.NoError(t, l.(backend.RecordReleaser).ReleaseWithRecords(ctx, []backend.Record{
			{Key: "status/x", Value: []byte("idle")},
			{Key: "history/x/7", Value: []byte("again")},
		}), "known %v", known)
		r, err = s.GetRecord(ctx, "status/x")
		require.NoError(t, err)
		assert.Equal(t, "newer", string(r.Value), "known %v: a newer token's record is left as it is", known)
		r, err = s.GetRecord(ctx, "history/x/7")
		require.NoError(t, err)
		assert.Equal(t, "again", string(r.Value), "known %v: the rest still happens", known)
		q, err := s.Candidates(ctx, "x")
		require.NoError(t, err)
		assert.Empty(t, q, "known %v: released", known)
		_, err = c.Set(s.p.record("status/x"), encodeRecord(0, []byte("reset")), -1)
		require.NoError(t, err)
	}
}

// TestHeldLeasesCachedByWatches: HeldLeases lists each container once and
// then only those whose child watch fired, so that listing the held
// leases of a large group costs one request while its holders stay; an
// empty container is not held, and a change made by another session is
// seen at the next call after its event.
func TestHeldLeasesCachedByWatches(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	s := openInternal(t, addr, root)
	other := openInternal(t, addr, root)
	ctx := t.Context()
	var leases []backend.Lease
	for _, n := range []string{"g.0", "g.1", "g.2"} {
		l, err := s.Acquire(ctx, n)
		require.NoError(t, err)
		leases = append(leases, l)
	}
	c := zktest.Connect(t, addr)
	_, err := c.CreateContainer(s.p.lease("g.3"), nil, zk.FlagContainer, s.b.cfg.acl) // empty: not held
	require.NoError(t, err)

	list := func(want ...string) (reads int64) {
		t.Helper()
		before := s.heldReads.Load()
		got, err := s.HeldLeases(ctx, "g.")
		require.NoError(t, err)
		assert.Equal(t, want, got)
		return s.heldReads.Load() - before
	}
	assert.Equal(t, int64(4), list("g.0", "g.1", "g.2"), "the first call lists every container")
	assert.Equal(t, int64(0), list("g.0", "g.1", "g.2"), "unchanged containers are not listed again")

	// Another session's candidacy in the empty container, and a release.
	lo, err := other.Acquire(ctx, "g.3")
	require.NoError(t, err)
	require.NoError(t, leases[1].Release(ctx))
	require.Eventually(t, func() bool {
		got, err := s.HeldLeases(ctx, "g.")
		return err == nil && assert.ObjectsAreEqual([]string{"g.0", "g.2", "g.3"}, got)
	}, 10*time.Second, 5*time.Millisecond, "HeldLeases sees the changes of the watched containers")
	assert.Equal(t, int64(0), list("g.0", "g.2", "g.3"), "settled again: nothing listed")
	require.NoError(t, lo.Release(ctx))
}
