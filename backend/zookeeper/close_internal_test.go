package zookeeper

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
)

// fakeServer is the server end of an in-memory connection: it answers the
// connect request with session id and a timeout of timeoutMs, then reads
// and drops everything until c closes, or closes c itself at once if
// hangUp.
func fakeServer(c net.Conn, id int64, timeoutMs int32, hangUp bool) {
	defer c.Close()
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(hdr[:]))); err != nil {
		return
	}
	if _, err := c.Write(connectResponse(id, timeoutMs)); err != nil || hangUp {
		return
	}
	io.Copy(io.Discard, c)
}

// stuckConn is a connection whose Close and read deadlines do nothing
// until released: a read in progress goes on blocking, as with a
// connection wrapper that passes neither on.
type stuckConn struct {
	net.Conn
	once    sync.Once
	release chan struct{}
}

func (c *stuckConn) Close() error {
	select {
	case <-c.release:
		return c.Conn.Close()
	default:
		return nil
	}
}

func (c *stuckConn) SetReadDeadline(time.Time) error { return nil }
func (c *stuckConn) SetDeadline(time.Time) error     { return nil }

func (c *stuckConn) unstick() {
	c.once.Do(func() { close(c.release) })
	c.Conn.Close()
}

// openFake opens a session of b (whose dialer serves in-memory connections)
// with a 1s TTL.
func openFake(t *testing.T, b *Backend) *session {
	t.Helper()
	s, err := b.Open(t.Context(), backend.SessionOptions{TTL: time.Second})
	require.NoError(t, err)
	return s.(*session)
}

func quiet() Option { return WithLogger(slog.New(slog.DiscardHandler)) }

// TestBackendCloseBoundedWhenShutdownHangs: a connection whose Close does
// not end go-zookeeper's read keeps the session's shutdown from finishing;
// Backend.Close returns anyway, once the session timeout plus
// shutdownSlack has passed, with an error naming the session, and
// Session.Close of another session is bounded alike.
func TestBackendCloseBoundedWhenShutdownHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var conns []*stuckConn
		var mu sync.Mutex
		b, err := New([]string{"zk:2181"}, quiet(), WithDialer(func(ctx context.Context, network, address string) (net.Conn, error) {
			c, srv := net.Pipe()
			go fakeServer(srv, 0x42, 1000, false)
			sc := &stuckConn{Conn: c, release: make(chan struct{})}
			mu.Lock()
			conns = append(conns, sc)
			mu.Unlock()
			return sc, nil
		}))
		require.NoError(t, err)
		s := openFake(t, b)
		other := openFake(t, b)

		start := time.Now()
		err = other.Close(context.Background()) // no deadline of the caller's
		assert.ErrorContains(t, err, "neither confirmed nor shut down within 6s")
		assert.Equal(t, time.Second+shutdownSlack, time.Since(start))

		start = time.Now()
		err = b.Close()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "simba/zookeeper: close: the connections of sessions 0x42")
		assert.Equal(t, s.shutdownBound(), time.Since(start), "Backend.Close waited the session timeout plus the slack")
		select {
		case <-s.Done():
		default:
			t.Error("Done open after Backend.Close")
		}

		mu.Lock()
		for _, c := range conns {
			c.unstick()
		}
		mu.Unlock()
		<-s.shutdownDone
		<-other.shutdownDone
	})
}

// TestBackendCloseWhileDialHangs: a reconnection whose DialFunc ignores its
// ctx and never returns does not hold Backend.Close up: the dial is
// abandoned when the session ends, and Close returns nil without waiting
// for its bound.
func TestBackendCloseWhileDialHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		dials := 0
		b, err := New([]string{"zk:2181"}, quiet(), WithDialer(func(ctx context.Context, network, address string) (net.Conn, error) {
			dials++
			if dials > 1 {
				<-release // ignores ctx
				return nil, io.EOF
			}
			c, srv := net.Pipe()
			go fakeServer(srv, 0x42, 1000, true) // hangs up: go-zookeeper reconnects
			return c, nil
		}))
		require.NoError(t, err)
		s := openFake(t, b)
		synctest.Wait() // the reconnection's dial hangs
		require.Equal(t, 2, dials)

		start := time.Now()
		require.NoError(t, b.Close())
		assert.Less(t, time.Since(start), s.shutdownBound())
		<-s.shutdownDone
		close(release)
	})
}

// TestConnectTimeout: the configured connect timeout until the session is
// granted; then the granted timeout shared among the servers, at least a
// second and at most the configured timeout.
func TestConnectTimeout(t *testing.T) {
	for _, c := range []struct {
		connect, granted time.Duration
		servers          int
		want             time.Duration
	}{
		{10 * time.Second, 0, 3, 10 * time.Second},
		{10 * time.Second, 6 * time.Second, 3, 2 * time.Second},
		{10 * time.Second, 6 * time.Second, 1, 6 * time.Second},
		{10 * time.Second, time.Second, 3, time.Second},
		{500 * time.Millisecond, 6 * time.Second, 3, 500 * time.Millisecond},
		{30 * time.Second, 60 * time.Second, 1, 30 * time.Second},
	} {
		l := newLink(nil, c.connect, 1000, c.servers, func(error) {})
		l.timeout = c.granted
		assert.Equal(t, c.want, l.connectTimeout(), "%+v", c)
		l.stop()
	}
}
