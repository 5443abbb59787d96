// Package etcdtest runs a real etcd server inside the test process, for the
// tests of backend/etcd and of anything built on it. It imports the etcd
// server (go.etcd.io/etcd/server/v3/embed); only tests import this package,
// so the server never enters the library's import graph.
//
// The server is a single member with the fast timings of etcd's own
// integration tests (TickMs 10, ElectionMs 100, so it grants leases of at
// least one second), listening on free ports of 127.0.0.1, with its data in
// a directory of the caller's and its logs discarded but for its fatal
// errors ([FatalLogger]). It does not fsync
// unless [WithFsync] is given: on a shared test machine a stalled fsync
// holds up raft, and with it every lease renewal, for longer than a
// one-second TTL. Its data survive [Server.Stop] and [Server.Restart] either
// way, as the process does not crash.
//
// Clients reach it through a small TCP proxy in front of it
// ([Server.Endpoints]), which keeps its address across [Server.Stop] and
// [Server.Restart] and resets client connections when the server stops, as a
// real server's exit would. Without that, etcd's shutdown waits up to five
// seconds for open watch streams to end.
package etcdtest

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/simba-go/simba/internal/faultproxy"
)

// startTimeout bounds the wait for a started server to be ready.
const startTimeout = 30 * time.Second

// Option configures a [Server].
type Option func(*config)

type config struct {
	fsync bool
}

// WithFsync makes the server fsync its write-ahead log and database as a
// production server does, for measurements.
func WithFsync() Option { return func(c *config) { c.fsync = true } }

// Server is an embedded etcd server. Its methods are safe for concurrent use.
type Server struct {
	dir   string
	cfg   config
	front *faultproxy.Proxy

	mu         sync.Mutex
	e          *embed.Etcd // nil while stopped
	clientHost string      // "127.0.0.1:port", fixed at the first start
	peerHost   string
	closed     bool
}

// Start starts a server with its data in t.TempDir() and stops it when the
// test ends. It stops the test if the server cannot start.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := New(tb.TempDir(), opts...)
	if err != nil {
		tb.Fatalf("etcdtest: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("etcdtest: close: %v", err)
		}
	})
	return s
}

// New starts a server with its data in dir (created if needed). The caller
// closes it with [Server.Close].
func New(dir string, opts ...Option) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &Server{dir: dir, clientHost: "127.0.0.1:0", peerHost: "127.0.0.1:0"}
	for _, o := range opts {
		o(&s.cfg)
	}
	e, err := s.launch()
	if err != nil {
		return nil, err
	}
	s.e = e
	s.clientHost = e.Clients[0].Addr().String()
	s.peerHost = e.Peers[0].Addr().String()
	front, err := faultproxy.New(s.clientHost)
	if err != nil {
		e.Close()
		return nil, err
	}
	s.front = front
	return s, nil
}

// launch starts etcd on s's data directory and addresses.
func (s *Server) launch() (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "simba-test"
	cfg.Dir = s.dir
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	listenClient := url.URL{Scheme: "http", Host: s.clientHost}
	listenPeer := url.URL{Scheme: "http", Host: s.peerHost}
	cfg.ListenClientUrls = []url.URL{listenClient}
	cfg.ListenPeerUrls = []url.URL{listenPeer}
	// The advertised URLs are recorded in the data directory: keep them the
	// same across restarts. A single member never dials them.
	cfg.AdvertiseClientUrls = []url.URL{{Scheme: "http", Host: "127.0.0.1:2379"}}
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: "127.0.0.1:2380"}}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "simba-test"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(FatalLogger("etcd test server"))
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = !s.cfg.fsync

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd in %s: %w", s.dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd in %s failed to start: %w", s.dir, err)
	case <-time.After(startTimeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("etcd in %s not ready after %v", s.dir, startTimeout)
	}
}

// Endpoints returns the endpoints for clients: the address of the proxy in
// front of the server, the same across restarts.
func (s *Server) Endpoints() []string { return []string{s.front.Addr()} }

// DirectEndpoints returns the server's own client address, without the
// proxy: for measurements that must not include the proxy's copying. A
// server with clients connected directly takes up to five seconds to stop.
func (s *Server) DirectEndpoints() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []string{s.clientHost}
}

// Dir returns the server's data directory.
func (s *Server) Dir() string { return s.dir }

// Stop stops the server, keeping its data: client connections are reset
// and new ones refused until [Server.Restart]. It does nothing if the
// server is stopped.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e == nil {
		return
	}
	s.front.Refuse()
	s.e.Close()
	s.e = nil
}

// Restart starts the stopped server again on the same data and addresses,
// and waits until it is ready. It does nothing if the server is running.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("etcdtest: restart of a closed server")
	}
	if s.e != nil {
		return nil
	}
	e, err := s.launch()
	if err != nil {
		return err
	}
	s.e = e
	s.front.Accept()
	return nil
}

// Close stops the server and its proxy. It is idempotent.
func (s *Server) Close() error {
	s.Stop()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return s.front.Close()
}

// Config returns a client configuration for the server's endpoints, with
// logging discarded.
func (s *Server) Config() clientv3.Config {
	return clientv3.Config{Endpoints: s.Endpoints(), Logger: zap.NewNop()}
}

// Client returns a client of the server, closed when the test ends.
func (s *Server) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(s.Config())
	if err != nil {
		tb.Fatalf("etcdtest: client: %v", err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// FatalLogger is a zap logger for etcd servers and clients in tests: it
// drops everything below DPanic, and writes DPanic, Panic and Fatal entries,
// with the stack and the name given, to stderr. etcd ends the process on
// its Fatal errors (os.Exit(1)) whatever the logger writes, so with
// zap.NewNop a test process dies with status 1 and not a word of why.
func FatalLogger(name string) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), zapcore.DPanicLevel)
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.DPanicLevel), zap.ErrorOutput(zapcore.Lock(os.Stderr))).
		Named(name)
}
