package kubetest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/internal/certs"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/sigstop"

	"github.com/simba-go/simba/internal/servers"
)

// Environment variables read by the package.
const (
	// EnvBinary names the path of the kube-apiserver binary.
	EnvBinary = "SIMBA_KUBE_APISERVER"
	// EnvRequire, set to 1, turns a missing binary into a test failure.
	EnvRequire = "SIMBA_REQUIRE_SERVERS"
)

const (
	// startTimeout bounds the wait for a started server to be ready: a
	// start takes a few seconds, but much longer on a loaded machine.
	startTimeout = 2 * time.Minute
	// stopTimeout bounds the wait for a server asked to stop (SIGTERM) to
	// exit before it is killed.
	stopTimeout = 15 * time.Second
	// cleanupTimeout bounds the clean-up calls of Namespace.
	cleanupTimeout = 15 * time.Second
	// logTail is how many lines of the server's log a failure shows.
	logTail = 60
	// serviceRange is the --service-cluster-ip-range.
	serviceRange = "10.0.0.0/24"
	// issuer is the --service-account-issuer.
	issuer = "https://kubernetes.default.svc.cluster.local"
)

// Required reports whether tests must fail, rather than skip, without a
// kube-apiserver.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// unavailable skips t with the reason, or fails it when servers are
// required.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("kubetest: %s (%s=1: a missing kube-apiserver is a failure)", msg, EnvRequire)
	}
	t.Skipf("kubetest: %s; run the tests through scripts/with-kube-apiserver.sh (make test does) or set %s", msg, EnvBinary)
}

// Server is a kube-apiserver of one test's own, on an etcd server of its
// own. Its methods are safe for concurrent use; those that take no
// testing.TB (Start, Stop, Pause, Resume) fail the test that started the
// server, and so must be called from that test's goroutine.
type Server struct {
	t       testing.TB
	bin     string
	args    []string
	etcd    *etcdtest.Server
	addr    string // 127.0.0.1:port of the secure port
	logFile string
	caFile  string // the serving certificate the server generates
	token   string // the administrator's bearer token
	users   *certs.CA

	mu     sync.Mutex
	ca     []byte // PEM of caFile, once the server has served
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	paused bool
	// logShown: a start that failed has shown the end of the log.
	logShown bool
}

// Start starts a kube-apiserver of the test's own, on an etcd server of its
// own (internal/etcdtest), waits until it is ready (/readyz), and stops it
// when the test ends. It skips the test when the binary named by
// SIMBA_KUBE_APISERVER is missing, and fails it instead under
// SIMBA_REQUIRE_SERVERS=1. Options add to the server's arguments.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin := os.Getenv(EnvBinary)
	if bin == "" {
		unavailable(t, "no kube-apiserver: %s is not set", EnvBinary)
	}
	if info, err := os.Stat(bin); err != nil {
		unavailable(t, "no kube-apiserver: %s=%s: %v", EnvBinary, bin, err)
	} else if info.IsDir() || info.Mode()&0o111 == 0 {
		unavailable(t, "no kube-apiserver: %s=%s is not an executable file", EnvBinary, bin)
	}

	etcd := etcdtest.Start(t)
	dir := t.TempDir()
	s := &Server{
		t:       t,
		bin:     bin,
		etcd:    etcd,
		addr:    freeAddr(t),
		logFile: filepath.Join(dir, "kube-apiserver.log"),
		caFile:  filepath.Join(dir, "certs", "apiserver.crt"),
	}
	if err := s.prepare(dir); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	for _, o := range opts {
		o(s)
	}
	// Clean-ups run last first: the log is shown once the server has
	// stopped, before the directory holding it is removed.
	t.Cleanup(func() {
		s.mu.Lock()
		shown := s.logShown
		s.mu.Unlock()
		if t.Failed() && !shown {
			t.Logf("kubetest: the end of the log of the kube-apiserver on %s:\n%s", s.addr, s.logEnd())
		}
	})
	t.Cleanup(s.Stop)
	s.Start()
	return s
}

// prepare writes the server's files into dir (its token file, its client
// authority, its service-account keys) and sets its arguments.
func (s *Server) prepare(dir string) error {
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	s.token = hex.EncodeToString(token)
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(s.token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}

	users, err := certs.NewCA("simba kubetest users")
	if err != nil {
		return fmt.Errorf("client authority: %w", err)
	}
	s.users = users
	clientCA := filepath.Join(dir, "users-ca.crt")
	if err := os.WriteFile(clientCA, users.CertPEM, 0o644); err != nil {
		return err
	}

	saKey, saPub, err := writeServiceAccountKeys(dir)
	if err != nil {
		return fmt.Errorf("service-account keys: %w", err)
	}

	_, port, _ := net.SplitHostPort(s.addr)
	s.args = []string{
		"--etcd-servers=http://" + s.etcd.Endpoints()[0],
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + port,
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Dir(s.caFile),
		"--token-auth-file=" + tokens,
		"--client-ca-file=" + clientCA,
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--service-account-issuer=" + issuer,
		"--service-cluster-ip-range=" + serviceRange,
		"--authorization-mode=Node,RBAC",
		"--profiling=false",
		// Without it, a SIGTERM'd server waits for its clients' open
		// watches to end before it exits, and Stop kills it after
		// stopTimeout: 15s for every Stop with a simba backend connected.
		"--shutdown-watch-termination-grace-period=1s",
	}
	return nil
}

// Option adds to the arguments of a server that [Start] starts.
type Option func(*Server)

// WithCoordinatedLeaderElection starts the server with coordinated leader
// election on: the feature gate CoordinatedLeaderElection (beta, off by
// default: without it the server drops the Lease fields spec.strategy and
// spec.preferredHolder from every write) and the API it needs,
// coordination.k8s.io/v1beta1 (LeaseCandidate). The server then runs its
// leader-election controller too, which acts only on the Leases that
// LeaseCandidates name.
func WithCoordinatedLeaderElection() Option {
	return func(s *Server) {
		s.args = append(s.args, "--feature-gates=CoordinatedLeaderElection=true", "--runtime-config=coordination.k8s.io/v1beta1=true")
	}
}

// writeServiceAccountKeys writes an ECDSA P-256 key pair into dir, the
// private key as PKCS #8 and the public one as PKIX, and returns their
// paths.
func writeServiceAccountKeys(dir string) (keyFile, pubFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", err
	}
	keyFile, pubFile = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return "", "", err
	}
	return keyFile, pubFile, nil
}

// freeAddr returns 127.0.0.1 and a port that was free a moment ago,
// below the kernel's ephemeral range (servers.FreePort): a server
// restarts on its port.
func freeAddr(t testing.TB) string {
	t.Helper()
	a, err := servers.FreeAddr()
	if err != nil {
		t.Fatalf("kubetest: finding a free port: %v", err)
	}
	return a
}

// Addr returns the host:port of the server's secure port, the same across
// Stop and Start: the target for a proxy of internal/faultproxy (see
// [Server.ConfigVia]).
func (s *Server) Addr() string { return s.addr }

// Etcd returns the etcd server under the apiserver, for tests that act on
// it (stop it, cut it off) while the apiserver runs.
func (s *Server) Etcd() *etcdtest.Server { return s.etcd }

// Admin returns the configuration of the administrator: the bearer token
// of the token file, in group system:masters, which RBAC does not
// restrict, through [Server.Addr], trusting the server's certificate. It
// has client-go's default rate limits (QPS and Burst zero).
func (s *Server) Admin() *rest.Config {
	return &rest.Config{
		Host:            "https://" + s.addr,
		BearerToken:     s.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.serverCA()},
	}
}

// User returns the configuration of the user name, authenticated by a
// client certificate with that common name (and no group) issued by the
// server's client authority, through [Server.Addr]. The user may do
// nothing but what every authenticated user may (discovery, its own
// access reviews) until the administrator binds it a role. RBAC takes
// the name "system:serviceaccount:NS:SA" for the service account SA of
// namespace NS: a RoleBinding whose subject is that ServiceAccount binds
// it, as it binds a pod's (without the groups a service account's token
// carries). Certificates are issued at any time, with no restart; see the
// package documentation for why users are not tokens.
func (s *Server) User(t testing.TB, name string) *rest.Config {
	t.Helper()
	if name == "" {
		t.Fatal("kubetest: User: empty user name")
	}
	p, err := s.users.Client(name)
	if err != nil {
		t.Fatalf("kubetest: client certificate for %q: %v", name, err)
	}
	return &rest.Config{
		Host: "https://" + s.addr,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   s.serverCA(),
			CertData: p.CertPEM,
			KeyData:  p.KeyPEM,
		},
	}
}

// ConfigVia returns a copy of base (a configuration of [Server.Admin] or
// [Server.User]) that reaches the server through addr, a proxy's
// host:port, with the same credentials and trust. The server's certificate
// is for 127.0.0.1 and localhost, which it is checked against whatever
// host addr names.
func (s *Server) ConfigVia(addr string, base *rest.Config) *rest.Config {
	c := rest.CopyConfig(base)
	c.Host = "https://" + addr
	if c.TLSClientConfig.ServerName == "" {
		c.TLSClientConfig.ServerName = "127.0.0.1"
	}
	return c
}

var notLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// Namespace creates a namespace for the test alone, with a name made of
// its name and a random suffix, and deletes it when the test ends (unless
// the server is stopped or paused then: it goes with the server). A deleted
// namespace stays Terminating, the objects in it kept: there is no
// namespace controller to empty it.
func (s *Server) Namespace(t testing.TB) string {
	t.Helper()
	name := strings.Trim(notLabel.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(name) > 40 {
		name = strings.Trim(name[:40], "-")
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	name = fmt.Sprintf("t-%s-%x", name, suffix)

	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	err := s.withNamespaces(func(c typedcorev1.NamespaceInterface) error {
		_, err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("kubetest: creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		if !s.serving() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		err := s.withNamespaces(func(c typedcorev1.NamespaceInterface) error {
			return c.Delete(ctx, name, metav1.DeleteOptions{})
		})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("kubetest: deleting namespace %s: %v", name, err)
		}
	})
	return name
}

// withNamespaces runs f with the administrator's client of namespaces, on
// connections closed when it returns.
func (s *Server) withNamespaces(f func(typedcorev1.NamespaceInterface) error) error {
	cfg := s.Admin()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	c, err := typedcorev1.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return err
	}
	return f(c.Namespaces())
}

// serving reports whether the server runs and is not paused.
func (s *Server) serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil && !s.paused && !isClosed(s.exited)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// serverCA returns the PEM of the server's certificate (its self-signed
// serving certificate, then the authority that signed it), read once the
// server first served.
func (s *Server) serverCA() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.ca)
}

// Start starts the server again after [Server.Stop], on the same port,
// certificates and etcd (so with the same data), and waits until it is
// ready. It fails the test if the server is running, or does not get
// ready within two minutes (showing the end of its log).
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.t.Fatalf("kubetest: the kube-apiserver on %s is already running", s.addr)
	}
	out, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatalf("kubetest: %v", err)
	}
	defer out.Close()
	fmt.Fprintf(out, "--- kubetest: starting %s %s\n", s.bin, strings.Join(s.args, " "))
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("kubetest: starting %s: %v", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited, s.paused = cmd, exited, false
	if err := s.awaitReady(exited); err != nil {
		s.stopLocked(syscall.SIGKILL)
		s.logShown = true
		s.t.Fatalf("kubetest: the kube-apiserver on %s: %v; the end of its log:\n%s", s.addr, err, s.logEnd())
	}
	s.t.Logf("kubetest: kube-apiserver ready on %s in %v", s.addr, time.Since(t0).Round(time.Millisecond))
}

// awaitReady waits until the server's /readyz answers 200, the process
// exits, or startTimeout passes. It reads the server's certificate once
// the server has written it.
func (s *Server) awaitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	var last error = errors.New("no answer yet")
	for n := 0; ; n++ {
		if s.ca == nil {
			if ca, err := os.ReadFile(s.caFile); err == nil && pool(ca) != nil {
				s.ca = ca
			}
		}
		if s.ca != nil {
			if last = s.ready(5 * time.Second); last == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", startTimeout, last)
		}
		select {
		case <-exited:
			return fmt.Errorf("exited while starting (%v)", s.cmd.ProcessState)
		case <-time.After(backoff.Step(n, 20*time.Millisecond, 250*time.Millisecond)):
		}
	}
}

// pool returns a pool of the certificates of pem, or nil if it holds none.
func pool(pem []byte) *x509.CertPool {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		return nil
	}
	return p
}

// ready asks the server's /readyz, as the administrator, waiting up to
// timeout for the answer.
func (s *Server) ready(timeout time.Duration) error {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool(s.ca), MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+s.addr+"/readyz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answers %s", resp.Status)
	}
	return nil
}

// Stop stops the server and waits for it to exit, paused or not: SIGTERM,
// the apiserver's graceful shutdown, then SIGKILL if it has not exited
// after 15 seconds. Its data stay in its etcd, which keeps running, and
// its certificates in its directory, for [Server.Start]. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(syscall.SIGTERM)
}

// Crash kills the server with SIGKILL, as a machine that loses power: no
// graceful shutdown, its connections reset. [Server.Start] starts it
// again. Crashing a stopped server does nothing.
func (s *Server) Crash() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(syscall.SIGKILL)
}

func (s *Server) stopLocked(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	s.cmd.Process.Signal(syscall.SIGCONT) // a paused server handles its SIGTERM
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		s.cmd.Process.Kill()
		<-s.exited
		s.t.Logf("kubetest: the kube-apiserver on %s had not exited %v after %v: killed", s.addr, stopTimeout, sig)
	}
	s.cmd, s.paused = nil, false
}

// Pause stops the server's process with SIGSTOP, as a machine that hangs:
// its connections stay open and nothing is answered until [Server.Resume].
// Its etcd goes on, and so does the clock of every client.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP, true) }

// Resume continues a server paused by [Server.Pause] (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, paused bool) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("kubetest: the kube-apiserver on %s is not running", s.addr)
	}
	if err := sigstop.Signal(s.cmd.Process, sig); err != nil { // SIGSTOP: once it is stopped
		s.t.Fatalf("kubetest: signalling the kube-apiserver on %s: %v", s.addr, err)
	}
	s.paused = paused
}

// logEnd returns the last lines of the server's log.
func (s *Server) logEnd() string {
	data, err := os.ReadFile(s.logFile)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.SplitAfter(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > logTail {
		lines = append([]string{fmt.Sprintf("(... %d lines before)\n", len(lines)-logTail)}, lines[len(lines)-logTail:]...)
	}
	return strings.Join(lines, "")
}
