package zookeeper_test

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/zktest"
)

// records opens a renewed session on b and returns it as Records.
func records(t *testing.T, b backend.Backend) (backend.Session, backend.Records) {
	t.Helper()
	s := open(t, b)
	keepAlive(t, s)
	r, ok := s.(backend.Records)
	require.True(t, ok, "the session implements backend.Records")
	return s, r
}

// A record is the leaf "=" under the container directory of its key, so
// that "a" and "a/b" can both be records; "." and ".." segments are
// escaped; the data is the token, then the value; the version is the
// leaf's mzxid.
func TestRecordZnodes(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	c := zktest.Connect(t, addr)
	s, r := records(t, newBackendAt(t, addr, root))
	l, err := s.Acquire(t.Context(), "owner")
	require.NoError(t, err)
	fence := backend.Condition{Lease: "owner", Token: l.Token()}

	keys := []string{"a", "a/b", "a/b/c", "x/./y", "x/../y", "x/.../y", "a.b"}
	written := map[string]backend.Record{}
	for _, k := range keys {
		rec, err := r.PutRecord(t.Context(), k, []byte("v:"+k), fence)
		require.NoError(t, err, k)
		written[k] = rec
	}
	for k, path := range map[string]string{
		"a":       "/rec/a/=",
		"a/b":     "/rec/a/b/=",
		"a/b/c":   "/rec/a/b/c/=",
		"x/./y":   "/rec/x/%2E/y/=",
		"x/../y":  "/rec/x/%2E%2E/y/=",
		"x/.../y": "/rec/x/.../y/=",
		"a.b":     "/rec/a.b/=",
	} {
		data, st, err := c.Get(root + path)
		require.NoError(t, err, "%s at %s", k, path)
		assert.Equal(t, l.Token(), binary.BigEndian.Uint64(data), k)
		assert.Equal(t, "v:"+k, string(data[8:]), k)
		assert.Equal(t, uint64(st.Mzxid), written[k].Version, k)
		assert.Zero(t, st.EphemeralOwner, k)
	}
	assert.True(t, strings.HasPrefix(zktest.RecordsDir, "/rec"), "zktest knows where the records are")

	list, err := r.ListRecords(t.Context(), "")
	require.NoError(t, err)
	var got []string
	for _, rec := range list {
		got = append(got, rec.Key)
		assert.Equal(t, written[rec.Key], rec)
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	assert.Equal(t, want, got)

	// Deleting "a" leaves "a/b" and "a/b/c".
	require.NoError(t, r.DeleteRecord(t.Context(), "a", fence))
	_, err = r.GetRecord(t.Context(), "a")
	assert.ErrorIs(t, err, backend.ErrNoRecord)
	list, err = r.ListRecords(t.Context(), "a")
	require.NoError(t, err)
	require.Len(t, list, 3)
	assert.Equal(t, []string{"a.b", "a/b", "a/b/c"}, []string{list[0].Key, list[1].Key, list[2].Key})
	require.NoError(t, l.Release(t.Context()))
}

// ListRecords takes a prefix of any characters, not only whole segments:
// it returns what the memory backend returns for the same records.
func TestListRecordsLikeMemory(t *testing.T) {
	t.Parallel()
	_, r := records(t, newBackend(t))
	m := memory.New()
	defer m.Close()
	ms, err := m.Open(t.Context(), backend.SessionOptions{TTL: time.Minute})
	require.NoError(t, err)
	defer ms.Close(context.Background())
	mr := ms.(backend.Records)
	keys := []string{"a", "ab", "a/b", "a/bc", "a/b/c", "a-b/c", "b/./c", "b/../c", "status/ingest", "status/billing.1", "status/billing.10", "ops/disabled/x", "ops/trigger/x"}
	for _, k := range keys {
		_, err := r.PutRecord(t.Context(), k, []byte(k), backend.Condition{})
		require.NoError(t, err)
		_, err = mr.PutRecord(t.Context(), k, []byte(k), backend.Condition{})
		require.NoError(t, err)
	}
	for _, prefix := range []string{"", "a", "a/", "a/b", "a/b/", "a/bc", "ab", "a-", "b/.", "b/./", "b/..", "status/", "status/billing.1", "ops/", "ops/d", "o", "zz", "a//", "/", "ä/", "a b"} {
		got, err := r.ListRecords(t.Context(), prefix)
		require.NoError(t, err, prefix)
		want, err := mr.ListRecords(t.Context(), prefix)
		require.NoError(t, err, prefix)
		keysOf := func(rs []backend.Record) []string {
			out := []string{}
			for _, x := range rs {
				out = append(out, x.Key)
			}
			return out
		}
		assert.Equal(t, keysOf(want), keysOf(got), "prefix %q", prefix)
	}
}

// A record deleted and written again has a new version: a compare-and-set
// with the version read before the deletion fails.
func TestRecordVersionNeverReused(t *testing.T) {
	t.Parallel()
	_, r := records(t, newBackend(t))
	for _, key := range []string{"solo", "st/x"} {
		r1, err := r.PutRecord(t.Context(), key, []byte("1"), backend.Condition{IfVersion: true})
		require.NoError(t, err)
		require.NoError(t, r.DeleteRecord(t.Context(), key, backend.Condition{IfVersion: true, Version: r1.Version}))
		r2, err := r.PutRecord(t.Context(), key, []byte("2"), backend.Condition{IfVersion: true})
		require.NoError(t, err)
		assert.NotEqual(t, r1.Version, r2.Version, key)
		_, err = r.PutRecord(t.Context(), key, []byte("stale"), backend.Condition{IfVersion: true, Version: r1.Version})
		assert.ErrorIs(t, err, backend.ErrConflict, key)
		r3, err := r.PutRecord(t.Context(), key, []byte("3"), backend.Condition{IfVersion: true, Version: r2.Version})
		require.NoError(t, err, key)
		got, err := r.GetRecord(t.Context(), key)
		require.NoError(t, err)
		assert.Equal(t, r3, got, key)
	}
}

// Concurrent compare-and-set increments of one record, by sessions of
// their own: each applied exactly once.
func TestRecordWritesRace(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	const writers, each = 4, 10
	increment := func(r backend.Records) error {
		for {
			var n byte
			cur, err := r.GetRecord(t.Context(), "counter/x")
			switch {
			case err == nil:
				n = cur.Value[0]
			case !errors.Is(err, backend.ErrNoRecord):
				return err
			}
			_, err = r.PutRecord(t.Context(), "counter/x", []byte{n + 1}, backend.Condition{IfVersion: true, Version: cur.Version})
			if !errors.Is(err, backend.ErrConflict) {
				return err
			}
		}
	}
	done := make(chan error, writers)
	for range writers {
		_, r := records(t, b)
		go func() {
			for range each {
				if err := increment(r); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range writers {
		require.NoError(t, <-done)
	}
	_, r := records(t, b)
	got, err := r.GetRecord(t.Context(), "counter/x")
	require.NoError(t, err)
	assert.Equal(t, byte(writers*each), got.Value[0], "every increment applied once")
}

// A watch hints every change under its prefix, however deep, and is set
// again before each hint: a read after the hint sees the change.
func TestWatchRecordsNested(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	b := newBackendAt(t, addr, root)
	_, r := records(t, b)
	_, w := records(t, b)
	for _, prefix := range []string{"ops/", "ops/trigger/", "o", ""} {
		t.Run(strings.ReplaceAll(prefix, "/", "_"), func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			hints, err := r.WatchRecords(ctx, prefix)
			require.NoError(t, err)
			for i, key := range []string{"ops/trigger/a", "ops/trigger/a", "ops/trigger/b/c", "ops/trigger/a"} {
				del := i == 3
				if del {
					require.NoError(t, w.DeleteRecord(t.Context(), key, backend.Condition{}))
				} else {
					_, err := w.PutRecord(t.Context(), key, []byte{byte(i)}, backend.Condition{})
					require.NoError(t, err)
				}
				// Hints may come from earlier writes: read until the
				// change is seen, each read after a hint.
				deadline := time.After(10 * time.Second)
				for {
					select {
					case <-hints:
					case <-deadline:
						t.Fatalf("write %d of %s under %q not seen after 10s of hints", i, key, prefix)
					}
					got, err := r.GetRecord(t.Context(), key)
					if del && err != nil || !del && err == nil && got.Value[0] == byte(i) {
						break
					}
				}
			}
			cancel()
			for range hints { // closed when ctx ends
			}
			require.NoError(t, w.DeleteRecord(t.Context(), "ops/trigger/b/c", backend.Condition{}))
		})
	}

	// The first-segment directory is deleted by the server once empty; the
	// watch then waits for it to come back.
	if d := zktest.ContainerCheckInterval(); d > 0 {
		c := zktest.Connect(t, addr)
		hints, err := r.WatchRecords(t.Context(), "ops/")
		require.NoError(t, err)
		deadline := time.Now().Add(3*d + 5*time.Second)
		for {
			ok, _, err := c.Exists(root + "/rec/ops")
			require.NoError(t, err)
			if !ok {
				break
			}
			require.True(t, time.Now().Before(deadline), "the empty directories were not deleted")
			time.Sleep(100 * time.Millisecond)
		}
		for len(hints) > 0 {
			<-hints
		}
		_, err = w.PutRecord(t.Context(), "ops/disabled/x", []byte("1"), backend.Condition{})
		require.NoError(t, err)
		select {
		case <-hints:
		case <-time.After(10 * time.Second):
			t.Fatal("no hint for a write after the directory was deleted")
		}
		require.NoError(t, w.DeleteRecord(t.Context(), "ops/disabled/x", backend.Condition{}))
	}
}

// A fenced write by a holding that is over fails without writing.
func TestFencedRecordAfterLoss(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	c := zktest.Connect(t, addr)
	s, r := records(t, newBackendAt(t, addr, root))
	l, err := s.Acquire(t.Context(), "x")
	require.NoError(t, err)
	fence := backend.Condition{Lease: "x", Token: l.Token()}
	_, err = r.PutRecord(t.Context(), "st/x", []byte("1"), fence)
	require.NoError(t, err)
	require.NoError(t, c.Delete(zookeeper.CandidacyPath(l), -1))
	<-l.Lost()
	_, err = r.PutRecord(t.Context(), "st/x", []byte("2"), fence)
	assert.ErrorIs(t, err, backend.ErrConflict)
	assert.ErrorIs(t, r.DeleteRecord(t.Context(), "st/x", fence), backend.ErrConflict)
	_, err = r.PutRecord(t.Context(), "st/x", []byte("2"), backend.Condition{Lease: "nonesuch", Token: 1})
	assert.ErrorIs(t, err, backend.ErrConflict)
	got, err := r.GetRecord(t.Context(), "st/x")
	require.NoError(t, err)
	assert.Equal(t, "1", string(got.Value))
}

// OnLost runs once when the lease is lost, not after stop, at once on a
// lease already lost, and not on Release.
func TestLeaseOnLost(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	c := zktest.Connect(t, addr)
	s := open(t, newBackendAt(t, addr, root))
	keepAlive(t, s)
	l, err := s.Acquire(t.Context(), "x")
	require.NoError(t, err)
	n, ok := l.(backend.LostNotifier)
	require.True(t, ok, "the lease implements backend.LostNotifier")
	called := make(chan string, 3)
	n.OnLost(func() { called <- "a" })
	stop := n.OnLost(func() { called <- "b" })
	assert.True(t, stop(), "stopped before the loss")
	require.NoError(t, c.Delete(zookeeper.CandidacyPath(l), -1))
	select {
	case who := <-called:
		assert.Equal(t, "a", who)
	case <-time.After(10 * time.Second):
		t.Fatal("OnLost not called after the znode was deleted")
	}
	<-l.Lost()
	n.OnLost(func() { called <- "c" })
	assert.Equal(t, "c", <-called, "called at once on a lost lease")
	assert.Empty(t, called)

	l2, err := s.Acquire(t.Context(), "x")
	require.NoError(t, err)
	stop = l2.(backend.LostNotifier).OnLost(func() { called <- "d" })
	require.NoError(t, l2.Release(t.Context()))
	assert.True(t, stop(), "not called on Release")
	assert.Empty(t, called)
}

// TestMalformedRecordsAndMembersAreSkipped: a record leaf or a member
// znode whose data this backend did not write (set by another client) is
// skipped by ListRecords and Members, named by SkipReporter, and returned
// by GetRecord as a *backend.MalformedError; the rest is listed.
func TestMalformedRecordsAndMembersAreSkipped(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	c := zktest.Connect(t, addr)
	s, r := records(t, newBackendAt(t, addr, root))
	for _, k := range []string{"status/a", "status/x", "status/z"} {
		_, err := r.PutRecord(t.Context(), k, []byte(`{}`), backend.Condition{})
		require.NoError(t, err)
	}
	_, err := c.Set(root+"/rec/status/x/=", []byte("garbage"), -1)
	require.NoError(t, err)
	require.NoError(t, s.Join(t.Context(), "g", backend.Member{ID: "a"}))
	const planted = "00000000000000ff" // a session ID, not a member record
	_, err = c.Create(root+"/group/g/"+planted, []byte("garbage"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	list, err := r.ListRecords(t.Context(), "status/")
	require.NoError(t, err)
	assert.Equal(t, []string{"status/a", "status/z"}, recordKeys(list))
	sr, ok := s.(backend.SkipReporter)
	require.True(t, ok, "the session implements backend.SkipReporter")
	list, skipped, err := sr.ListRecordsWithSkipped(t.Context(), "status/")
	require.NoError(t, err)
	assert.Equal(t, []string{"status/a", "status/z"}, recordKeys(list))
	require.Len(t, skipped, 1)
	assert.Equal(t, "status/x", skipped[0].Key)
	assert.Contains(t, skipped[0].Reason, `"garbage" of 7 bytes`)

	_, err = r.GetRecord(t.Context(), "status/x")
	var me *backend.MalformedError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, "status/x", me.Key)
	assert.NotErrorIs(t, err, backend.ErrNoRecord)

	ms, err := s.Members(t.Context(), "g")
	require.NoError(t, err)
	require.Len(t, ms, 1)
	assert.Equal(t, "a", ms[0].ID)
	ms, skippedMembers, err := sr.MembersWithSkipped(t.Context(), "g")
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Len(t, skippedMembers, 1)
	assert.Equal(t, planted, skippedMembers[0].Key)
	assert.Contains(t, skippedMembers[0].Reason, `"garbage"`)
}

// recordKeys returns the keys of list.
func recordKeys(list []backend.Record) []string {
	out := make([]string, len(list))
	for i, rec := range list {
		out[i] = rec.Key
	}
	return out
}
