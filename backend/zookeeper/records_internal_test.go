package zookeeper

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/zktest"
)

// openInternal opens a session on the shared server under root, closed
// when the test ends; a goroutine renews it.
func openInternal(t *testing.T, addr, root string) *session {
	t.Helper()
	return openWithTTL(t, addr, root, time.Second)
}

// openWithTTL is openInternal with a TTL of the test's (the backend stops
// go-zookeeper's own pings: KeepAlive alone keeps a session), and opts.
func openWithTTL(t *testing.T, addr, root string, ttl time.Duration, opts ...Option) *session {
	t.Helper()
	b, err := New([]string{addr}, append([]Option{WithRoot(root)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	bs, err := b.Open(t.Context(), backend.SessionOptions{TTL: ttl})
	require.NoError(t, err)
	s := bs.(*session)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.TTL() / 3):
			}
			s.KeepAlive(ctx)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := s.Close(context.Background()); err != nil && !errors.Is(err, backend.ErrSessionDone) {
			t.Logf("closing the session: %v", err)
		}
	})
	return s
}

// A write compares what it read with what is there when it writes, in one
// multi-operation: a record deleted and created again in between (its
// data version is back to what was read) is caught by its directory's
// version; a lease znode deleted in between is caught by the lease's
// check. Each step is run by hand, with the changes made between the read
// and the write.
func TestRecordWriteSeesChangesSinceItsRead(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	s := openInternal(t, addr, root)
	other := openInternal(t, addr, root)
	ctx := t.Context()

	for _, key := range []string{"st/x", "solo"} {
		for _, put := range []bool{true, false} {
			_, err := s.PutRecord(ctx, key, []byte("one"), backend.Condition{})
			require.NoError(t, err)
			w := &recordWrite{s: s, op: "test", key: key, put: put, value: []byte("stale")}
			r, err := w.read(s.conn)
			require.NoError(t, err)
			require.True(t, r.present)
			// A znode of the test's own keeps the record's directory (a
			// container) from being deleted by the server while it is
			// empty, so that this checks the directory's version;
			// TestRecordWriteSeesItsDirectoryRecreated checks a directory
			// deleted and created again.
			pin := s.p.recordDir(key) + "/pin"
			_, err = s.conn.Create(pin, nil, 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			require.NoError(t, other.DeleteRecord(ctx, key, backend.Condition{}))
			two, err := other.PutRecord(ctx, key, []byte("two"), backend.Condition{})
			require.NoError(t, err)
			_, st, err := s.conn.Get(s.p.record(key))
			require.NoError(t, err)
			require.Equal(t, r.st.Version, st.Version, "the record's data version is back to the one read")

			res, err := w.write(s.conn, r)
			require.NoError(t, err)
			assert.True(t, res.again, "%s (put %v): a write over a record deleted and created again since the read", key, put)
			got, err := s.GetRecord(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, two, got, "%s (put %v)", key, put)
			require.NoError(t, s.conn.Delete(pin, -1))
			require.NoError(t, s.DeleteRecord(ctx, key, backend.Condition{}))
		}
	}

	// The lease znode is deleted between the read and the write.
	for _, put := range []bool{true, false} {
		l, err := s.Acquire(ctx, "fenced")
		require.NoError(t, err)
		fence := backend.Condition{Lease: "fenced", Token: l.Token()}
		_, err = s.PutRecord(ctx, "st/fenced", []byte("one"), fence)
		require.NoError(t, err)
		w := &recordWrite{s: s, op: "test", key: "st/fenced", put: put, value: []byte("two"), cond: fence, fence: l.(*lease).path}
		r, err := w.read(s.conn)
		require.NoError(t, err)
		done, err := w.check(r)
		require.NoError(t, err)
		require.False(t, done)
		require.NoError(t, s.conn.Delete(l.(*lease).path, -1))
		_, err = w.write(s.conn, r)
		assert.ErrorIs(t, err, backend.ErrConflict, "put %v", put)
		got, err := s.GetRecord(ctx, "st/fenced")
		require.NoError(t, err)
		assert.Equal(t, "one", string(got.Value), "put %v", put)
		<-l.Lost()
	}
	require.NoError(t, s.DeleteRecord(ctx, "st/fenced", backend.Condition{}))
}

// A record deleted, its directory deleted by the server (a container,
// empty), and the record created again between a write's read and its
// write: the new directory's versions and the new leaf's start again and
// match what was read, and only the marker named by the directory's czxid
// tells the two lives apart. Without it the write went through, over a
// record it had never read (the ABA of the closing note of issue 22).
func TestRecordWriteSeesItsDirectoryRecreated(t *testing.T) {
	every := zktest.ContainerCheckInterval()
	if every == 0 || every > 5*time.Second {
		t.Skipf("the server deletes empty containers every %v (0: unknown); scripts/with-zookeeper.sh starts one that does every second", every)
	}
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	s := openInternal(t, addr, root)
	other := openInternal(t, addr, root)
	ctx := t.Context()
	// reaped waits until the server has deleted the empty directory dir.
	reaped := func(dir string) {
		t.Helper()
		deadline := time.Now().Add(10 * every)
		for {
			ok, _, err := s.conn.Exists(dir)
			require.NoError(t, err)
			if !ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the empty directory %s was not deleted by the server within %v", dir, 10*every)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, key := range []string{"st/y", "lone"} {
		for _, put := range []bool{true, false} {
			dir := s.p.recordDir(key)
			reaped(dir) // the last round's: each life starts at version 0
			_, err := s.PutRecord(ctx, key, []byte("one"), backend.Condition{})
			require.NoError(t, err)
			w := &recordWrite{s: s, op: "test", key: key, put: put, value: []byte("stale")}
			r, err := w.read(s.conn)
			require.NoError(t, err)
			require.True(t, r.present && r.dirOK)
			require.NoError(t, other.DeleteRecord(ctx, key, backend.Condition{}))
			reaped(dir)
			two, err := other.PutRecord(ctx, key, []byte("two"), backend.Condition{})
			require.NoError(t, err)
			again, err := w.read(s.conn)
			require.NoError(t, err)
			require.NotEqual(t, r.dir.Czxid, again.dir.Czxid, "%s: a new directory", key)
			require.Equal(t, r.dir.Version, again.dir.Version, "%s: the new directory's version is the one read", key)
			require.Equal(t, r.st.Version, again.st.Version, "%s: the new leaf's version is the one read", key)

			res, err := w.write(s.conn, r)
			require.NoError(t, err)
			assert.True(t, res.again, "%s (put %v): a write over a record whose directory was deleted and created again since the read", key, put)
			got, err := s.GetRecord(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, two, got, "%s (put %v)", key, put)
			require.NoError(t, s.DeleteRecord(ctx, key, backend.Condition{}))
		}
	}
}

// A record written before directories had markers (a leaf alone), with a
// stray marker of another life beside it: a put adds the marker of the
// directory's life, and the delete takes every marker with the record, so
// the server deletes the directory.
func TestRecordMarkersOfAnOlderLayout(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	s := openInternal(t, addr, root)
	ctx := t.Context()
	dir := s.p.recordDir("old/x")
	require.NoError(t, s.ensureDir(s.conn, dir))
	acl := zk.WorldACL(zk.PermAll)
	_, err := s.conn.Create(s.p.record("old/x"), encodeRecord(0, []byte("one")), 0, acl)
	require.NoError(t, err)
	_, err = s.conn.Create(dir+"/"+recordMark(1), nil, 0, acl)
	require.NoError(t, err)

	got, err := s.GetRecord(ctx, "old/x")
	require.NoError(t, err)
	_, err = s.PutRecord(ctx, "old/x", []byte("two"), backend.Condition{IfVersion: true, Version: got.Version})
	require.NoError(t, err)
	_, dst, err := s.conn.Exists(dir)
	require.NoError(t, err)
	names, _, err := s.conn.Children(dir)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{recordLeaf, recordMark(1), recordMark(dst.Czxid)}, names, "the put added this life's marker")

	require.NoError(t, s.DeleteRecord(ctx, "old/x", backend.Condition{}))
	names, _, err = s.conn.Children(dir)
	require.NoError(t, err)
	assert.Empty(t, names, "the delete left znodes in the record's directory")
}

// The listing that Acquire sends right behind its create sees the create,
// and the watch behind Lost is set before Acquire returns: the token is
// the czxid of the candidacy created, whose name starts with the session
// ID.
func TestAcquireListsBehindItsCreate(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	s := openInternal(t, addr, root)
	c := zktest.Connect(t, addr)
	for range 20 {
		bl, err := s.Acquire(t.Context(), "x")
		require.NoError(t, err)
		l := bl.(*lease)
		children, _, err := c.Children(root + "/lease/x")
		require.NoError(t, err)
		require.Len(t, children, 1)
		assert.Equal(t, root+"/lease/x/"+children[0], l.path)
		assert.True(t, strings.HasPrefix(children[0], s.sid+"-"), children[0])
		_, st, err := c.Get(l.path)
		require.NoError(t, err)
		assert.Equal(t, uint64(st.Czxid), l.Token())
		assert.Equal(t, s.id, st.EphemeralOwner)
		require.NoError(t, c.Delete(l.path, -1)) // no read after Acquire: the watch was set by then
		select {
		case <-l.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("Lost not closed: no watch was set")
		}
	}
}

// A Join whose caller gave up while its request was on its way is
// superseded by a Leave called after it: when the Leave's request reaches
// the member lock first, the Join's request, run after it, writes nothing.
// (Without the check it would make the session a member again until the
// session ends.) The Leave's request is played by hand, so that it runs
// first.
func TestJoinGivenUpDoesNotOutliveLeave(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	s := openInternal(t, addr, root)
	require.NoError(t, s.Join(t.Context(), "g", backend.Member{ID: "m"}))

	s.memberMu.Lock() // holds the Join's request on its way
	ctx, cancel := context.WithCancel(t.Context())
	joined := make(chan error, 1)
	go func() { joined <- s.Join(ctx, "g", backend.Member{ID: "m", Data: []byte("again")}) }()
	time.Sleep(50 * time.Millisecond) // the Join's request is running
	cancel()
	require.ErrorIs(t, <-joined, context.Canceled)
	// Leave, its request first: what Leave counts, then what its request
	// does under the lock.
	s.mu.Lock()
	s.leaves["g"]++
	s.mu.Unlock()
	require.NoError(t, s.conn.Delete(s.p.member("g", s.sid), -1))
	s.memberMu.Unlock()

	require.Eventually(t, func() bool { // the Join's request has run
		s.memberMu.Lock()
		defer s.memberMu.Unlock()
		return true
	}, time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	members, err := s.Members(t.Context(), "g")
	require.NoError(t, err)
	assert.Empty(t, members, "a member after Leave")

	// A Join after the Leave joins.
	require.NoError(t, s.Join(t.Context(), "g", backend.Member{ID: "m"}))
	members, err = s.Members(t.Context(), "g")
	require.NoError(t, err)
	assert.Len(t, members, 1)
}
