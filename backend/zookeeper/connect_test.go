package zookeeper_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
)

// slowConnect is longer than go-zookeeper's one-second connect timeout and
// than the 1s sessions asked for below: as a TLS handshake with a loaded
// JVM can be.
const slowConnect = 1500 * time.Millisecond

// slowDialer dials addr once slowConnect has passed, honouring ctx.
func slowDialer(addr string) zookeeper.DialFunc {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		select {
		case <-time.After(slowConnect):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}

// TestSlowDialOpens: a dial (a TLS handshake, say) that takes longer than
// a second and than the session timeout asked for still opens a session,
// within the connect timeout; with a connect timeout shorter than the dial,
// Open fails saying so (the negative control).
func TestSlowDialOpens(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	b := newBackendAt(t, addr, root, zookeeper.WithDialer(slowDialer(addr)))
	s, err := b.Open(t.Context(), backend.SessionOptions{TTL: time.Second})
	require.NoError(t, err, "a dial of %v with the default connect timeout", slowConnect)
	_, err = s.KeepAlive(t.Context())
	require.NoError(t, err)
	require.NoError(t, s.Close(t.Context()))

	short := newBackendAt(t, addr, root, zookeeper.WithDialer(slowDialer(addr)), zookeeper.WithConnectTimeout(slowConnect/3))
	_, err = short.Open(t.Context(), backend.SessionOptions{TTL: time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not connected within 500ms")
}

// TestSlowConnectResponseOpens: a server whose answer to the session
// request comes later than a second and than the session timeout asked
// for (replies delayed in a proxy) still grants a session, within the
// connect timeout; with a shorter connect timeout Open fails.
func TestSlowConnectResponseOpens(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	p, err := faultproxy.New(addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	p.DelayReplies(slowConnect)

	short := newBackendAt(t, p.Addr(), root, zookeeper.WithConnectTimeout(slowConnect/3))
	_, err = short.Open(t.Context(), backend.SessionOptions{TTL: time.Second})
	require.Error(t, err, "a connect response %v late with a connect timeout of %v", slowConnect, slowConnect/3)

	b := newBackendAt(t, p.Addr(), root)
	s, err := b.Open(t.Context(), backend.SessionOptions{TTL: time.Second})
	require.NoError(t, err, "a connect response %v late with the default connect timeout", slowConnect)
	// Replies as late as this cost a 1s session its connection (the
	// watchdog), maybe the session: Close may fail; the grant is the point.
	p.DelayReplies(0)
	s.Close(t.Context())
}

func TestWithConnectTimeoutRefusesNonPositive(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := zookeeper.New([]string{"localhost"}, zookeeper.WithConnectTimeout(d))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "simba/zookeeper: WithConnectTimeout: timeout must be positive")
	}
}
