package zookeeper_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/certs"
	"github.com/simba-go/simba/internal/zktest"
)

// tlsDialer is a backend's dialer that speaks TLS with cfg and counts the
// handshakes it completed.
type tlsDialer struct {
	cfg        *tls.Config
	handshakes atomic.Int32
}

func (d *tlsDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&tls.Dialer{Config: d.cfg}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if c.(*tls.Conn).ConnectionState().HandshakeComplete {
		d.handshakes.Add(1)
	}
	return c, nil
}

// startTLS starts a ZooKeeper server of the test's own that serves TLS,
// asking clients for certificates as auth says, and returns it with its
// certificates (the client's is for "app").
func startTLS(t *testing.T, auth zktest.ClientAuth) (*zktest.Server, certs.Files) {
	t.Helper()
	f, err := certs.Generate(t.TempDir(), "app")
	require.NoError(t, err)
	srv := zktest.StartTLSServer(t, f, auth)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server's log:\n%s", srv.Log())
		}
	})
	return srv, f
}

// clientTLS returns the client side of f: its CA, and its client
// certificate when withCert.
func clientTLS(t *testing.T, f certs.Files, withCert bool) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: f.Authority.Pool(), MinVersion: tls.VersionTLS12}
	if withCert {
		pair, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		require.NoError(t, err)
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// overTLS runs a short slice of the backend's behaviour through d to the
// server's TLS port: a session, a lease acquired and released, a record
// written and read, and a View of a second backend that reads both.
func overTLS(t *testing.T, srv *zktest.Server, d *tlsDialer) {
	t.Helper()
	root := zktest.Root(t, srv.Addr) // checked over the plain port
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	writer := newBackendAt(t, srv.SecureAddr, root, zookeeper.WithDialer(d.dial))
	reader := newBackendAt(t, srv.SecureAddr, root, zookeeper.WithDialer(d.dial))

	s, err := writer.Open(ctx, backend.SessionOptions{TTL: 4 * time.Second})
	require.NoError(t, err, "opening a session over TLS")
	defer s.Close(context.Background())
	keepAlive(t, s)
	l, err := s.Acquire(ctx, "tls-job")
	require.NoError(t, err, "acquiring a lease over TLS")
	rec := s.(backend.Records)
	put, err := rec.PutRecord(ctx, "tls/a", []byte("over TLS"), backend.Condition{Lease: "tls-job", Token: l.Token()})
	require.NoError(t, err, "writing a record over TLS")
	got, err := rec.GetRecord(ctx, "tls/a")
	require.NoError(t, err, "reading the record over TLS")
	assert.Equal(t, put, got)

	v, err := reader.View(ctx)
	require.NoError(t, err, "opening a View over TLS")
	defer v.Close()
	got, err = v.GetRecord(ctx, "tls/a")
	require.NoError(t, err, "reading the record with the View")
	assert.Equal(t, "over TLS", string(got.Value))
	held, err := v.HeldLeases(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"tls-job"}, held, "the View sees the lease held")

	require.NoError(t, l.Release(ctx), "releasing the lease over TLS")
	held, err = v.HeldLeases(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, held, "the View sees the lease released")
	require.NoError(t, rec.DeleteRecord(ctx, "tls/a", backend.Condition{}))
	require.NoError(t, s.Close(ctx))
	assert.GreaterOrEqual(t, d.handshakes.Load(), int32(2), "each backend's connections are TLS connections")
}

// The backend works through a crypto/tls dialer against a ZooKeeper that
// serves TLS (secureClientPort, Netty, PEM stores): with the server's
// certificate checked only, and with client certificates required
// (ssl.clientAuth=need).
func TestTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real ZooKeeper")
	}
	t.Run("ServerCertificate", func(t *testing.T) {
		srv, f := startTLS(t, zktest.ClientCertNone)
		overTLS(t, srv, &tlsDialer{cfg: clientTLS(t, f, false)})
	})
	t.Run("ClientCertificate", func(t *testing.T) {
		srv, f := startTLS(t, zktest.ClientCertNeed)
		overTLS(t, srv, &tlsDialer{cfg: clientTLS(t, f, true)})
	})
}

// A TLS server that refuses the client, or a client and a server that do
// not speak the same protocol: Open fails at once, with the reason, long
// before its ctx ends, and leaves nothing behind (TestMain checks the
// goroutines).
func TestTLSRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real ZooKeeper")
	}
	srv, f := startTLS(t, zktest.ClientCertNeed)
	dir := t.TempDir()
	expired, err := f.Authority.Expired(certs.Template{CommonName: "app"})
	require.NoError(t, err)
	other, err := certs.NewCA("another CA")
	require.NoError(t, err)
	foreign, err := other.Client("app")
	require.NoError(t, err)
	_, _, err = foreign.Write(dir, "foreign")
	require.NoError(t, err)
	withCert := func(p *certs.Pair) *tls.Config {
		cfg := clientTLS(t, f, false)
		cfg.Certificates = []tls.Certificate{p.TLS()}
		return cfg
	}
	wrongCA := clientTLS(t, f, true)
	wrongCA.RootCAs = other.Pool()

	var plain net.Dialer
	for _, tc := range []struct {
		name string
		addr string
		dial zookeeper.DialFunc
		// check judges Open's error.
		check func(t *testing.T, err error)
	}{
		{"no client certificate", srv.SecureAddr, (&tlsDialer{cfg: clientTLS(t, f, false)}).dial, remoteAlert},
		{"an expired client certificate", srv.SecureAddr, (&tlsDialer{cfg: withCert(expired)}).dial,
			func(t *testing.T, err error) {
				remoteAlert(t, err)
				// The server logs why after it has sent the alert.
				assert.Eventually(t, func() bool { return strings.Contains(srv.Log(), "CertificateExpiredException") },
					10*time.Second, 10*time.Millisecond, "the server's log says it refused the certificate as expired")
			}},
		{"a client certificate of another CA", srv.SecureAddr, (&tlsDialer{cfg: withCert(foreign)}).dial, remoteAlert},
		{"a CA that did not sign the server's certificate", srv.SecureAddr, (&tlsDialer{cfg: wrongCA}).dial,
			func(t *testing.T, err error) {
				var unknown x509.UnknownAuthorityError
				assert.True(t, errors.As(err, &unknown), "want an unknown authority: %v", err)
			}},
		// The plain port reads the ClientHello as the length of a
		// request, too long, and hangs up; the TLS port hangs up on a
		// connect request that is no ClientHello.
		{"TLS to the plain port", srv.Addr, (&tlsDialer{cfg: clientTLS(t, f, true)}).dial, hungUp},
		{"plain TCP to the TLS port", srv.SecureAddr, plain.DialContext, hungUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := zookeeper.New([]string{tc.addr}, zookeeper.WithDialer(tc.dial))
			require.NoError(t, err)
			defer b.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			start := time.Now()
			s, err := b.Open(ctx, backend.SessionOptions{TTL: 4 * time.Second})
			if err == nil {
				s.Close(context.Background())
				t.Fatalf("Open succeeded")
			}
			t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
			assert.NoError(t, ctx.Err(), "Open gave up only when its ctx ended")
			assert.Contains(t, err.Error(), "simba/zookeeper: ")
			tc.check(t, err)
		})
	}
}

// hungUp checks that err is the server closing the connection.
func hungUp(t *testing.T, err error) {
	t.Helper()
	assert.ErrorIs(t, err, io.EOF, "want the server to hang up")
}

// remoteAlert checks that err is the TLS alert the server sent.
func remoteAlert(t *testing.T, err error) {
	t.Helper()
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" {
		t.Errorf("want the server's TLS alert (a remote error), got %v", err)
	}
}
