package etcdtest

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/certs"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/proc"

	"github.com/simba-go/simba/internal/servers"
)

const (
	// startTimeout bounds the wait for a started server to be ready.
	startTimeout = 30 * time.Second
	// stopTimeout bounds the wait for a server to exit after SIGTERM; it
	// is killed then.
	stopTimeout = 10 * time.Second
	// startTries is how many times New tries free ports when another
	// process took one before the server could listen on it.
	startTries = 3
	// memberName is the member's name, the same at every start: etcd
	// refuses a data directory of another member.
	memberName = "simba-test"
	// LogName is the name of the server's log in its directory: what the
	// process writes (its warnings and errors), across restarts.
	LogName = "etcd.log"
	// dataName is the name of the data directory in the server's.
	dataName = "data"
)

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
// authentication is on and the client gives no password).
// [Server.ClientTLS] trusts f's CA and, with clientCerts, presents f's
// client certificate.
func WithTLS(f certs.Files, clientCerts bool) Option {
	return func(c *config) { c.tls, c.clientCerts = &f, clientCerts }
}

// Server is an etcd server running as a process of its own. Its methods
// are safe for concurrent use.
type Server struct {
	dir   string
	bin   string
	cfg   config
	front *faultproxy.Proxy
	// report says that the process exited while nobody stopped it.
	report func(msg string)

	mu         sync.Mutex
	root       string   // the root user's password once EnableAuth ran
	proc       *process // nil while stopped
	clientHost string   // "127.0.0.1:port", behind front: another after a Restart that found it taken
	peerHost   string
	closed     bool
}

// process is one run of the etcd binary.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process is reaped
	// ready is set once it serves: an exit before is start's error, not
	// one to report.
	ready atomic.Bool
	// stopping is set when it is asked to end: its exit is no news.
	stopping atomic.Bool
}

// Start starts a server with its data and log in t.TempDir() and stops it
// when the test ends. It skips the test (fails it under
// SIMBA_REQUIRE_SERVERS=1) when there is no etcd binary ([ErrNoBinary]),
// and stops the test if the server cannot start. If the server's process
// exits while the test runs without [Server.Stop] or [Server.Close], the
// test fails with the end of its log.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := newServer(tb.TempDir(), func(msg string) { tb.Error(msg) }, opts...)
	if errors.Is(err, ErrNoBinary) {
		Unavailable(tb, "%v", err)
	}
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

// New starts a server with its data and log in dir (created if needed).
// The caller closes it with [Server.Close]. The error wraps [ErrNoBinary]
// when there is no etcd binary. If the server's process exits before
// Stop or Close, New's server says so on the standard error, with the end
// of its log.
func New(dir string, opts ...Option) (*Server, error) {
	return newServer(dir, func(msg string) { fmt.Fprintln(os.Stderr, msg) }, opts...)
}

func newServer(dir string, report func(string), opts ...Option) (*Server, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, report: report}
	for _, o := range opts {
		o(&s.cfg)
	}
	if s.proc, err = s.launchOnFreePorts(true); err != nil {
		return nil, err
	}
	front, err := faultproxy.New(s.clientHost)
	if err != nil {
		s.proc.stop()
		return nil, err
	}
	s.front = front
	return s, nil
}

// launchOnFreePorts launches the server (see launch), on free ports first
// if pick, else on its ports, and again on other free ports, up to
// startTries times in all, while it fails because another process took
// one of them before the server listened on it: a listener of another
// test, or the source port of any connection, which the kernel picks from
// the same range (so a port a stopped server leaves may be gone when it
// restarts).
func (s *Server) launchOnFreePorts(pick bool) (*process, error) {
	for try := 1; ; try++ {
		if pick {
			var err error
			if s.clientHost, err = servers.FreeAddr(); err != nil {
				return nil, err
			}
			if s.peerHost, err = servers.FreeAddr(); err != nil {
				return nil, err
			}
		}
		p, err := s.launch()
		if err == nil || try == startTries || !strings.Contains(err.Error(), "address already in use") {
			return p, err
		}
		pick = true
	}
}

func (s *Server) scheme() string {
	if s.cfg.tls != nil {
		return "https"
	}
	return "http"
}

// args returns the server's command line.
func (s *Server) args() []string {
	scheme := s.scheme()
	args := []string{
		"--name", memberName,
		"--data-dir", filepath.Join(s.dir, dataName),
		"--listen-client-urls", scheme + "://" + s.clientHost,
		"--listen-peer-urls", "http://" + s.peerHost,
		// The advertised URLs are recorded in the data directory: keep
		// them the same across restarts. A single member never dials them.
		"--advertise-client-urls", scheme + "://127.0.0.1:2379",
		"--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", memberName + "=http://127.0.0.1:2380",
		"--initial-cluster-token", "simba-test",
		"--heartbeat-interval", "10",
		"--election-timeout", "100",
		// The least bcrypt cost: etcd checks the password of every stream
		// a client opens (each session's keep-alive), and the default cost
		// makes each check take tens of milliseconds of CPU.
		"--bcrypt-cost", "4",
		"--log-level", "warn",
	}
	if !s.cfg.fsync {
		args = append(args, "--unsafe-no-fsync")
	}
	if f := s.cfg.tls; f != nil {
		args = append(args, "--cert-file", f.ServerCert, "--key-file", f.ServerKey, "--trusted-ca-file", f.CA)
		if s.cfg.clientCerts {
			args = append(args, "--client-cert-auth")
		}
	}
	return args
}

// environ is the server's environment: this process's, but for the ETCD_
// variables, which etcd would take for flags.
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	return env
}

// launch starts etcd on s's directory and addresses and waits until it is
// ready, for up to startTimeout.
func (s *Server) launch() (*process, error) {
	logPath := filepath.Join(s.dir, LogName)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	args := s.args()
	fmt.Fprintf(logf, "=== etcdtest %s: %s %s\n", time.Now().Format(time.RFC3339Nano), s.bin, strings.Join(args, " "))
	cmd := exec.Command(s.bin, args...)
	cmd.Env = environ()
	cmd.Stdout, cmd.Stderr = logf, logf
	reaped, err := proc.StartTied(cmd)
	logf.Close()
	if err != nil {
		return nil, fmt.Errorf("etcdtest: starting %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	client := s.clientHost // which a later Restart may change
	go func() {
		err := cmd.Wait()
		reaped()
		unexpected := p.ready.Load() && !p.stopping.Load()
		// Closed before the report, so that whoever acts on the report
		// (a Restart) finds the process exited.
		close(p.exited)
		if unexpected {
			s.report(fmt.Sprintf("etcdtest: etcd on %s (%s) exited while nobody stopped it (%v); %s", client, s.dir, err, s.logTail()))
		}
	}()
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.health()
		if err == nil {
			p.ready.Store(true)
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("etcdtest: etcd on %s (%s) exited while starting (%v); %s", s.clientHost, s.dir, cmd.ProcessState, s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stopping.Store(true)
			cmd.Process.Kill()
			<-p.exited
			return nil, fmt.Errorf("etcdtest: etcd on %s (%s) not ready after %v (last check: %v); %s", s.clientHost, s.dir, startTimeout, err, s.logTail())
		}
	}
}

// stop ends the process with SIGTERM, which etcd handles by shutting down
// cleanly, and waits for it; it kills it if it has not exited after
// stopTimeout. It does nothing to a process that has exited.
func (p *process) stop() {
	p.stopping.Store(true)
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// httpClient returns a client of the server's HTTP endpoints, with
// [Server.ClientTLS], that keeps no idle connection (and so leaves no
// goroutine behind).
func (s *Server) httpClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{TLSClientConfig: s.ClientTLS(), DisableKeepAlives: true},
	}
}

// health asks the server itself (not through the proxy) for /health, and
// returns nil once it reports itself healthy: it has a leader and serves
// requests.
func (s *Server) health() error {
	resp, err := s.httpClient(2 * time.Second).Get(s.scheme() + "://" + s.clientHost + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	var h struct{ Health string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &h) != nil || h.Health != "true" {
		return fmt.Errorf("/health: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Log returns what the server has written to its log so far, across
// restarts, for failure messages.
func (s *Server) Log() string {
	b, err := os.ReadFile(filepath.Join(s.dir, LogName))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// logTail returns the end of the server's log, introduced.
func (s *Server) logTail() string {
	path := filepath.Join(s.dir, LogName)
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("no log: %v", err)
	}
	return fmt.Sprintf("its log %s ends:\n%s", path, tail(b, 30))
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

// Dir returns the server's directory, which holds its data (data/) and
// its log ([LogName]).
func (s *Server) Dir() string { return s.dir }

// Stop stops the server, keeping its data: client connections are reset
// and new ones refused until [Server.Restart]; the process is sent SIGTERM
// and waited for (killed if it has not exited after 10 seconds). It does
// nothing if the server is stopped.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	s.front.Refuse()
	s.proc.stop()
	s.proc = nil
}

// Restart starts the stopped server again on the same data, member name and
// addresses, and waits until it is ready; if another process took one of
// its ports meanwhile, it listens on others, behind the same
// [Server.Endpoints] ([Server.DirectEndpoints] then changes). It does
// nothing if the server is running; a server whose process exited by
// itself is started again.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("etcdtest: restart of a closed server")
	}
	if s.proc != nil {
		select {
		case <-s.proc.exited:
			s.front.Refuse()
			s.proc = nil
		default:
			return nil
		}
	}
	p, err := s.launchOnFreePorts(false)
	if err != nil {
		return err
	}
	s.proc = p
	s.front.Retarget(s.clientHost) // the same, unless its port was taken
	s.front.Accept()
	return nil
}

// Pause makes the server look, to its clients, like an etcd process
// stopped with SIGSTOP: it blackholes the proxy in front of it
// ([faultproxy.Proxy.Blackhole]), so connections stay open and new ones are
// accepted, but nothing a client sends is answered until [Server.Resume].
// The server's process runs on; only what goes through [Server.Endpoints]
// is held, so a client of [Server.DirectEndpoints] is not paused. It does
// nothing if the server is paused already.
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
