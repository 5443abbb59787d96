package zookeeper_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
)

func TestNewRefusesBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		servers []string
		opts    []zookeeper.Option
		want    string
	}{
		{nil, nil, "no server address"},
		{[]string{""}, nil, `invalid server address ""`},
		{[]string{"a:2181,b:2181"}, nil, "one address per element"},
		{[]string{"a:2181/chroot"}, nil, "use WithRoot"},
		{[]string{"a:0"}, nil, `port "0"`},
		{[]string{"a:99999"}, nil, `port "99999"`},
		{[]string{"a:http"}, nil, `port "http"`},
		{[]string{":2181"}, nil, "empty host"},
		{[]string{"a"}, []zookeeper.Option{nil}, "nil option"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithRoot("")}, "invalid root"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithRoot("/")}, "invalid root"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithRoot("simba")}, "must start with"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithRoot("/simba/")}, "must not end"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithRoot("/a//b")}, "empty path segment"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithRoot("/a/../b")}, `".."`},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithRoot("/zookeeper")}, "reserved"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithRoot("/a\x00")}, "not allowed"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithACL()}, "empty ACL"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithACL(zk.ACL{Perms: 0, Scheme: "world", ID: "anyone"})}, "invalid permissions"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithAuth("", nil)}, "empty scheme"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithDialer(nil)}, "nil dialer"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithLogger(nil)}, "nil logger"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithLeaderLag(-1)}, "negative lag"},
		{[]string{"a"}, []zookeeper.Option{zookeeper.WithMaxRequests(0)}, "max requests must be positive"},
	} {
		b, err := zookeeper.New(tc.servers, tc.opts...)
		assert.Nil(t, b)
		if assert.Error(t, err, "New(%q)", tc.servers) {
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "simba/zookeeper: "), err.Error())
		}
	}
	b, err := zookeeper.New([]string{"zk1", "[::1]:2182", "zk3:2183"})
	require.NoError(t, err)
	assert.Equal(t, zookeeper.DefaultRoot, b.Root())
	require.NoError(t, b.Close())
	require.NoError(t, b.Close())
	_, err = b.Open(t.Context(), backend.SessionOptions{TTL: time.Second})
	assert.ErrorIs(t, err, backend.ErrClosed)
}

func TestOpenRefusesBadTTL(t *testing.T) {
	t.Parallel()
	b, err := zookeeper.New([]string{"127.0.0.1:1"})
	require.NoError(t, err)
	defer b.Close()
	for _, ttl := range []time.Duration{0, -time.Second, 1 << 62} {
		_, err := b.Open(t.Context(), backend.SessionOptions{TTL: ttl})
		assert.ErrorContains(t, err, "TTL", "TTL %v", ttl)
	}
}

// Nothing listens on the address: Open reports the dial error at once.
func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	b, err := zookeeper.New([]string{addr})
	require.NoError(t, err)
	defer b.Close()
	start := time.Now()
	_, err = b.Open(t.Context(), backend.SessionOptions{TTL: time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no server of")
	assert.Contains(t, err.Error(), "connection refused")
	assert.Less(t, time.Since(start), 2*time.Second)
}

// A server that accepts connections and never answers: Open returns when
// its ctx ends, and Close leaves no goroutine behind (TestMain checks).
func TestOpenHonoursContext(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 16)
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		l.Close()
		for c := range accepted {
			c.Close()
		}
	}()
	b, err := zookeeper.New([]string{l.Addr().String()})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = b.Open(ctx, backend.SessionOptions{TTL: 10 * time.Second})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), time.Second)
	require.NoError(t, b.Close())
}

// The server clamps the requested timeout to [minSessionTimeout,
// maxSessionTimeout] = [400ms, 4s] on the test server; the session reports
// what was granted, not what was asked.
func TestNegotiatedTimeout(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	for requested, granted := range map[time.Duration]time.Duration{
		100 * time.Millisecond:  400 * time.Millisecond,
		1500 * time.Millisecond: 1500 * time.Millisecond,
		time.Minute:             4 * time.Second,
	} {
		s, err := b.Open(t.Context(), backend.SessionOptions{TTL: requested})
		require.NoError(t, err)
		assert.Equal(t, granted, s.TTL(), "requested %v", requested)
		ttl, err := s.KeepAlive(t.Context())
		require.NoError(t, err)
		assert.Equal(t, granted, ttl, "KeepAlive, requested %v", requested)
		require.NoError(t, s.Close(t.Context()))
	}

	lagged, err := zookeeper.New([]string{zktest.Addr(t)}, zookeeper.WithRoot(b.Root()), zookeeper.WithLeaderLag(300*time.Millisecond))
	require.NoError(t, err)
	defer lagged.Close()
	s, err := lagged.Open(t.Context(), backend.SessionOptions{TTL: time.Second})
	require.NoError(t, err)
	assert.Equal(t, 700*time.Millisecond, s.TTL())
	require.NoError(t, s.Close(t.Context()))
	_, err = lagged.Open(t.Context(), backend.SessionOptions{TTL: 100 * time.Millisecond}) // granted 400ms
	assert.NoError(t, err)
	tooLagged, err := zookeeper.New([]string{zktest.Addr(t)}, zookeeper.WithRoot(b.Root()), zookeeper.WithLeaderLag(time.Second))
	require.NoError(t, err)
	defer tooLagged.Close()
	_, err = tooLagged.Open(t.Context(), backend.SessionOptions{TTL: time.Second})
	assert.ErrorContains(t, err, "does not exceed the leader lag")
}

// open opens a session with a 1s timeout, closed when the test ends.
func open(t *testing.T, b backend.Backend) backend.Session {
	t.Helper()
	s, err := b.Open(t.Context(), backend.SessionOptions{TTL: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// keepAlive renews s every third of its TTL until the test ends.
func keepAlive(t *testing.T, s backend.Session) {
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
	t.Cleanup(func() { cancel(); <-done })
}

// The token is the czxid of the lease znode, which the session owns.
func TestLeaseZnode(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	c := zktest.Connect(t, addr)
	b := newBackendAt(t, addr, root)
	s := open(t, b)
	l, err := s.Acquire(t.Context(), "ingest")
	require.NoError(t, err)
	path := zookeeper.CandidacyPath(l)
	assert.True(t, strings.HasPrefix(path, root+"/lease/ingest/"+s.ID()+"-"), "%s: the candidacy's name starts with the session ID", path)
	_, st, err := c.Get(path)
	require.NoError(t, err)
	assert.Equal(t, uint64(st.Czxid), l.Token())
	assert.Equal(t, s.ID(), fmt.Sprintf("%016x", uint64(st.EphemeralOwner)))
	held, err := s.(backend.LeaseLister).HeldLeases(t.Context(), "")
	require.NoError(t, err)
	assert.Equal(t, []string{"ingest"}, held)

	require.NoError(t, l.Release(t.Context()))
	ok, _, err := c.Exists(path)
	require.NoError(t, err)
	assert.False(t, ok, "Release deletes the znode")
	ok, _, err = c.Exists(root + "/lease/ingest")
	require.NoError(t, err)
	assert.True(t, ok, "the empty container stays until the server reaps it")
	held, err = s.(backend.LeaseLister).HeldLeases(t.Context(), "")
	require.NoError(t, err)
	assert.Empty(t, held, "an empty container is no lease held")
}

// A lease znode deleted behind the holder's back: Lost closes, and Release
// deletes nothing.
func TestLostOnExternalDelete(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	c := zktest.Connect(t, addr)
	b := newBackendAt(t, addr, root)
	s, other := open(t, b), open(t, b)
	keepAlive(t, s)
	keepAlive(t, other)
	l, err := s.Acquire(t.Context(), "x")
	require.NoError(t, err)
	require.NoError(t, c.Delete(zookeeper.CandidacyPath(l), -1))
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost not closed after the znode was deleted")
	}
	lo, err := other.Acquire(t.Context(), "x")
	require.NoError(t, err)
	assert.Greater(t, lo.Token(), l.Token())
	assert.ErrorIs(t, l.Release(t.Context()), backend.ErrNotHeld)
	ok, _, err := c.Exists(zookeeper.CandidacyPath(lo))
	require.NoError(t, err)
	assert.True(t, ok, "a stale Release must not delete the new holder's znode")
	select {
	case <-lo.Lost():
		t.Fatal("the new holding was lost")
	default:
	}
}

// An Acquire that gives up while its create request is on its way leaves
// nothing behind: the proxy holds the server's replies, so the candidacy
// is created on the server after the caller has gone, and the session
// deletes it once the reply arrives. Another session holds the lease
// meanwhile, so that the container is not reaped.
func TestAcquireCancelledDuringCreate(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	c := zktest.Connect(t, addr)
	p, err := faultproxy.New(addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	slow := newBackendAt(t, p.Addr(), root)
	direct := newBackendAt(t, addr, root)
	s := open(t, slow)
	other := open(t, direct)
	keepAlive(t, other)
	l, err := other.Acquire(t.Context(), "x")
	require.NoError(t, err)

	p.StallReplies()
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(ctx, "x")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	queue := func() []string {
		q, err := other.(backend.CandidateLister).Candidates(t.Context(), "x")
		require.NoError(t, err)
		return q
	}
	assert.Equal(t, []string{other.ID(), s.ID()}, queue(), "the create reached the server")
	p.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for len(queue()) > 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.Equal(t, []string{other.ID()}, queue(), "the orphan candidacy was not deleted")
	children, _, err := c.Children(root + "/lease/x")
	require.NoError(t, err)
	assert.Len(t, children, 1)
	require.NoError(t, l.Release(t.Context()))
	s.KeepAlive(t.Context())
}

// After Close, the session's znodes are gone at once and every call
// returns ErrSessionDone.
func TestCloseDeletesZnodes(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	c := zktest.Connect(t, addr)
	b := newBackendAt(t, addr, root)
	s := open(t, b)
	_, err := s.Acquire(t.Context(), "a")
	require.NoError(t, err)
	_, err = s.Acquire(t.Context(), "b")
	require.NoError(t, err)
	require.NoError(t, s.Join(t.Context(), "g", backend.Member{ID: "n1", Data: []byte("x")}))
	left, err := zktest.Leftovers(c, root)
	require.NoError(t, err)
	assert.Len(t, left, 3, "two leases and a membership")

	require.NoError(t, s.Close(t.Context()))
	left, err = zktest.Leftovers(c, root)
	require.NoError(t, err)
	assert.Empty(t, left, "znodes left right after Close")
	_, err = s.KeepAlive(t.Context())
	assert.ErrorIs(t, err, backend.ErrSessionDone)
	require.NoError(t, s.Close(t.Context()))
}

// Backend.Close abandons open sessions: they end for the caller at once
// and expire on the server within their timeout.
func TestBackendCloseAbandons(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	c := zktest.Connect(t, addr)
	b := newBackendAt(t, addr, root)
	s, err := b.Open(t.Context(), backend.SessionOptions{TTL: 4 * time.Second}) // the server's maximum
	require.NoError(t, err)
	_, err = s.Acquire(t.Context(), "a")
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, b.Close())
	assert.Less(t, time.Since(start), 3*time.Second)
	select {
	case <-s.Done():
	default:
		t.Fatal("Done open after Backend.Close")
	}
	_, err = s.KeepAlive(t.Context())
	assert.ErrorIs(t, err, backend.ErrSessionDone)
	assert.ErrorIs(t, err, backend.ErrClosed)
	children, _, err := c.Children(root + "/lease/a")
	require.NoError(t, err)
	ok := len(children) > 0
	assert.True(t, ok, "an abandoned session's znode stays until it expires")
	deadline := time.Now().Add(6 * time.Second)
	for ok && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		children, _, err = c.Children(root + "/lease/a")
		if errors.Is(err, zk.ErrNoNode) {
			// The lease's directory is a container node: the server
			// removes it once its last child has expired.
			children, err = nil, nil
		}
		require.NoError(t, err)
		ok = len(children) > 0
	}
	assert.False(t, ok, "the abandoned session did not expire")
}

// TestMaxRequestsOfOne runs many Acquire, PutRecord and GetRecord calls at
// once on a session allowed one call in flight: they wait their turn (an
// Acquire's create and the read behind it take one slot each) and all
// complete, while keep-alives, which take none, go on; a call whose ctx
// ends while it waits sends nothing and returns ctx's error.
func TestMaxRequestsOfOne(t *testing.T) {
	b := newBackend(t, zookeeper.WithMaxRequests(1))
	s := open(t, b)
	keepAlive(t, s)
	rec := s.(backend.Records)
	const n = 40
	errs := make(chan error, 3*n)
	for i := range n {
		go func() {
			l, err := s.Acquire(t.Context(), fmt.Sprintf("l%d", i))
			if err == nil {
				_, err = rec.PutRecord(t.Context(), fmt.Sprintf("k%d", i), []byte("v"), backend.Condition{Lease: fmt.Sprintf("l%d", i), Token: l.Token()})
			}
			errs <- err
		}()
		go func() {
			_, err := rec.GetRecord(t.Context(), fmt.Sprintf("k%d", i))
			if errors.Is(err, backend.ErrNoRecord) {
				err = nil
			}
			errs <- err
		}()
		go func() {
			_, err := s.KeepAlive(t.Context())
			errs <- err
		}()
	}
	for range 3 * n {
		require.NoError(t, <-errs)
	}
	for i := range n {
		r, err := rec.GetRecord(t.Context(), fmt.Sprintf("k%d", i))
		require.NoError(t, err)
		assert.Equal(t, "v", string(r.Value))
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Acquire(ctx, "late")
	assert.ErrorIs(t, err, context.Canceled)
}

// The first Open warns when the backend has several servers, an
// ensemble, and no leader lag (see WithLeaderLag); not for one server, nor
// with a lag. (The servers here do not exist: Open fails after the
// warning.)
func TestOpenWarnsOfAnEnsembleWithoutLeaderLag(t *testing.T) {
	for _, c := range []struct {
		servers []string
		lag     time.Duration
		warns   bool
	}{
		{[]string{"a:2181", "b:2181", "c:2181"}, 0, true},
		{[]string{"a:2181"}, 0, false},
		{[]string{"a:2181", "b:2181", "c:2181"}, 2 * time.Second, false},
	} {
		var buf bytes.Buffer
		b, err := zookeeper.New(c.servers, zookeeper.WithLeaderLag(c.lag), zookeeper.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(buf.String(), "no leader lag") {
			t.Errorf("New(%v) warned before any Open: %q", c.servers, buf.String())
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // Open gives up at once, after the warning
		if _, err := b.Open(ctx, backend.SessionOptions{TTL: 10 * time.Second}); err == nil {
			t.Fatal("Open with an ended ctx succeeded")
		}
		b.Close()
		if warned := strings.Contains(buf.String(), "no leader lag"); warned != c.warns {
			t.Errorf("New(%v, lag %v): warned %v, want %v; log: %q", c.servers, c.lag, warned, c.warns, buf.String())
		}
	}
}
