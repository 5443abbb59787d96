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
// seconds for open watch streams to end. The proxy also stands in for a
// paused server ([Server.Pause], [Server.Resume]).
//
// [WithTLS] makes it serve its clients with TLS (the proxy passes TLS
// through), and [Server.EnableAuth] turns on etcd's authentication with a
// root user and users of the test's, each with a role on a key prefix.
package etcdtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"golang.org/x/crypto/bcrypt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/simba-go/simba/internal/certs"
	"github.com/simba-go/simba/internal/faultproxy"
)

// startTimeout bounds the wait for a started server to be ready.
const startTimeout = 30 * time.Second

// Option configures a [Server].
type Option func(*config)

type config struct {
	fsync bool
	tls   *certs.Files
	// clientCerts: the server asks clients for a certificate.
	clientCerts bool
}

// WithFsync makes the server fsync its write-ahead log and database as a
// production server does, for measurements.
func WithFsync() Option { return func(c *config) { c.fsync = true } }

// WithTLS makes the server serve its clients with TLS only, presenting
// f's server certificate; with clientCerts it also requires every client
// to present a certificate signed by f's CA (etcd's --client-cert-auth,
// which then also takes the certificate's common name for the user when
// authentication is on and the client gives no password). [Server.Config]
// and [Server.Client] trust f's CA and, with clientCerts, present f's
// client certificate.
func WithTLS(f certs.Files, clientCerts bool) Option {
	return func(c *config) { c.tls, c.clientCerts = &f, clientCerts }
}

// Server is an embedded etcd server. Its methods are safe for concurrent use.
type Server struct {
	dir   string
	cfg   config
	front *faultproxy.Proxy

	mu         sync.Mutex
	root       string      // the root user's password once EnableAuth ran
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
	scheme := "http"
	if f := s.cfg.tls; f != nil {
		scheme = "https"
		cfg.ClientTLSInfo = transport.TLSInfo{
			CertFile: f.ServerCert, KeyFile: f.ServerKey,
			TrustedCAFile: f.CA, ClientCertAuth: s.cfg.clientCerts,
		}
	}
	listenClient := url.URL{Scheme: scheme, Host: s.clientHost}
	listenPeer := url.URL{Scheme: "http", Host: s.peerHost}
	cfg.ListenClientUrls = []url.URL{listenClient}
	cfg.ListenPeerUrls = []url.URL{listenPeer}
	// The advertised URLs are recorded in the data directory: keep them the
	// same across restarts. A single member never dials them.
	cfg.AdvertiseClientUrls = []url.URL{{Scheme: scheme, Host: "127.0.0.1:2379"}}
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: "127.0.0.1:2380"}}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.InitialClusterToken = "simba-test"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(FatalLogger("etcd test server"))
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = !s.cfg.fsync
	// The least bcrypt cost: etcd checks the password of every stream a
	// client opens (each session's keep-alive), and the default cost makes
	// each check take tens of milliseconds of CPU.
	cfg.BcryptCost = uint(bcrypt.MinCost)

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

// Pause makes the server look, to its clients, like an etcd process
// stopped with SIGSTOP: it blackholes the proxy in front of it
// ([faultproxy.Proxy.Blackhole]), so connections stay open and new ones are
// accepted, but nothing a client sends is answered until [Server.Resume].
// The embedded server itself runs on (it shares the test's process, which
// cannot be stopped); only what goes through [Server.Endpoints] is held, so
// a client of [Server.DirectEndpoints] is not paused. It does nothing if the
// server is paused already.
func (s *Server) Pause() { s.front.Blackhole() }

// Resume ends a [Server.Pause]: what clients sent meanwhile is delivered,
// in order, and the server answers again. It does nothing if the server is
// not paused.
func (s *Server) Resume() { s.front.Heal() }

// Close stops the server and its proxy. It is idempotent.
func (s *Server) Close() error {
	s.Stop()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return s.front.Close()
}

// Config returns a client configuration for the server's endpoints, with
// logging discarded: with [WithTLS], its TLS configuration
// ([Server.ClientTLS]); once [Server.EnableAuth] has run, the root
// user's credentials.
func (s *Server) Config() clientv3.Config {
	cfg := clientv3.Config{Endpoints: s.Endpoints(), Logger: zap.NewNop(), TLS: s.ClientTLS()}
	s.mu.Lock()
	if s.root != "" {
		cfg.Username, cfg.Password = "root", s.root
	}
	s.mu.Unlock()
	return cfg
}

// ClientTLS returns the TLS configuration of a client of a server started
// [WithTLS]: trusting its CA and, when it asks for client certificates,
// presenting the client certificate of its files. Without WithTLS it
// returns nil.
func (s *Server) ClientTLS() *tls.Config {
	f := s.cfg.tls
	if f == nil {
		return nil
	}
	cfg := &tls.Config{RootCAs: f.Authority.Pool(), MinVersion: tls.VersionTLS12}
	if s.cfg.clientCerts {
		pair, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err == nil {
			cfg.Certificates = []tls.Certificate{pair}
		}
	}
	return cfg
}

// User is a user that [Server.EnableAuth] creates, with a role of its own
// (named after it, "-role" appended) granted Perm on the keys under
// Prefix.
type User struct {
	Name, Password string
	Prefix         string // no permission at all when empty
	Perm           clientv3.PermissionType
}

// EnableAuth creates the root user (password rootPassword, granted the
// root role) and the users given, with their roles, and turns on
// authentication. From then on [Server.Config] and [Server.Client] use
// the root user. It stops the test on failure.
func (s *Server) EnableAuth(tb testing.TB, rootPassword string, users ...User) {
	tb.Helper()
	if rootPassword == "" {
		tb.Fatal("etcdtest: EnableAuth: empty root password")
	}
	cli := s.Client(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	step := func(what string, err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("etcdtest: EnableAuth: %s: %v", what, err)
		}
	}
	_, err := cli.UserAdd(ctx, "root", rootPassword)
	step("adding root", err)
	_, err = cli.UserGrantRole(ctx, "root", "root")
	step("granting root the root role", err)
	for _, u := range users {
		role := u.Name + "-role"
		_, err := cli.UserAdd(ctx, u.Name, u.Password)
		step("adding "+u.Name, err)
		_, err = cli.RoleAdd(ctx, role)
		step("adding "+role, err)
		if u.Prefix != "" {
			_, err = cli.RoleGrantPermission(ctx, role, u.Prefix, clientv3.GetPrefixRangeEnd(u.Prefix), u.Perm)
			step("granting "+role+" its permission", err)
		}
		_, err = cli.UserGrantRole(ctx, u.Name, role)
		step("granting "+u.Name+" "+role, err)
	}
	_, err = cli.AuthEnable(ctx)
	step("enabling authentication", err)
	s.mu.Lock()
	s.root = rootPassword
	s.mu.Unlock()
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
