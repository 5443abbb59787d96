package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/console"
	"github.com/simba-go/simba/internal/await"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// consoleRun is a simba console command running.
type consoleRun struct {
	t         *testing.T
	url       string // as printed
	out, errb *lockedBuffer
	cancel    context.CancelFunc
	done      chan int
}

// servedAt matches the line that says where the console serves.
var servedAt = regexp.MustCompile(`simba console at (https?://\S+)/ on `)

// onTerminal, set in startConsole's env, makes the console's standard
// output a terminal.
const onTerminal = "TEST_ON_TERMINAL"

// startConsole runs simba console with args on b, with env as its
// environment (besides the backend's), and waits until it says where it
// serves. A command that exits instead is returned with url "".
func startConsole(t *testing.T, b *memory.Backend, env map[string]string, args ...string) *consoleRun {
	t.Helper()
	r := &consoleRun{t: t, out: &lockedBuffer{}, errb: &lockedBuffer{}, done: make(chan int, 1)}
	c := &cli{
		stdout: r.out, stderr: r.errb,
		getenv: func(k string) string {
			if k == envEtcd {
				return "memory:2379"
			}
			return env[k]
		},
		open: func(target) (backend.Backend, error) {
			return b.Node(fmt.Sprintf("console-%d", invocations.Add(1))), nil
		},
		terminal: func(io.Writer) bool { return env[onTerminal] != "" },
	}
	return startConsoleCLI(t, c, r, args...)
}

// startConsoleCLI runs simba console with args as c, printing into r's
// buffers, and waits until it says where it serves (see startConsole).
func startConsoleCLI(t *testing.T, c *cli, r *consoleRun, args ...string) *consoleRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- c.run(ctx, append([]string{"console"}, args...)) }()
	t.Cleanup(func() { r.stop() })
	deadline := time.Now().Add(20 * time.Second)
	for r.url == "" {
		if m := servedAt.FindStringSubmatch(r.out.String()); m != nil {
			r.url = m[1]
			break
		}
		select {
		case code := <-r.done:
			r.done <- code
			return r
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console did not say where it serves within 20s:\n%s\n%s", r.out, r.errb)
		}
	}
	return r
}

// stop interrupts the console and returns its exit status.
func (r *consoleRun) stop() int {
	r.t.Helper()
	r.cancel()
	code := await.For(r.t, r.done, 10*time.Second, "the console did not stop\n%s\n%s", r.out, r.errb)
	r.done <- code // for another stop
	return code
}

// exited returns the exit status of a console that stopped by itself.
func (r *consoleRun) exited() int {
	r.t.Helper()
	code := await.For(r.t, r.done, 10*time.Second, "the console did not exit\n%s\n%s", r.out, r.errb)
	r.done <- code
	return code
}

// operate posts an operation to the console with the token, and returns
// the status and the answer.
func operate(t *testing.T, cl *http.Client, url, op, target, token string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/api/ops/"+op, strings.NewReader(fmt.Sprintf(`{"target":%q}`, target)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if token != "" {
		req.Header.Set(console.TokenHeader, token)
	}
	resp, err := cl.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var reply map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&reply))
	return resp.StatusCode, reply
}

// tokenFileLine matches the line that names the file of a generated token.
var tokenFileLine = regexp.MustCompile(`operations need the token in (\S+) \(mode 0600`)

func TestConsoleCommandServesAndStops(t *testing.T) {
	b := memory.New()
	defer b.Close()
	runtime := t.TempDir()
	r := startConsole(t, b, map[string]string{"XDG_RUNTIME_DIR": runtime}, "--listen", "127.0.0.1:0")
	require.NotEmpty(t, r.url, "%s\n%s", r.out, r.errb)
	assert.True(t, strings.HasPrefix(r.url, "http://127.0.0.1:"), r.url)

	// Not a terminal: the generated token is in a file only its owner reads.
	m := tokenFileLine.FindStringSubmatch(r.out.String())
	require.NotNil(t, m, "no token file named:\n%s", r.out)
	assert.Equal(t, runtime, filepath.Dir(m[1]), "in $XDG_RUNTIME_DIR")
	fi, err := os.Stat(m[1])
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	raw, err := os.ReadFile(m[1])
	require.NoError(t, err)
	token := strings.TrimSpace(string(raw))
	require.GreaterOrEqual(t, len(token), console.MinTokenLen)

	cl := &http.Client{Timeout: 10 * time.Second}
	defer cl.CloseIdleConnections()
	resp, err := cl.Get(r.url + "/elections")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), "<html")
	resp, err = cl.Get(r.url + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "/healthz")

	code, _ := operate(t, cl, r.url, "disable", "x", "")
	assert.Equal(t, http.StatusUnauthorized, code, "an operation without the token")
	code, reply := operate(t, cl, r.url, "disable", "nothing", token)
	assert.Equal(t, http.StatusNotFound, code, "with the token, an unknown name: %v", reply)

	assert.Equal(t, exitOK, r.stop(), "stopped cleanly\n%s", r.errb)
	_, err = os.Stat(m[1])
	assert.ErrorIs(t, err, os.ErrNotExist, "the token file is removed at exit")
	for _, out := range []string{r.out.String(), r.errb.String()} {
		assert.NotContains(t, out, token, "the token is neither printed nor logged")
	}
	assert.Regexp(t, `level=WARN msg="operation refused" op=disable target=x operator="" reason="" remote=127\.0\.0\.1:\d+ outcome=refused status=401`, r.errb.String())
	assert.Regexp(t, `level=WARN msg="operation refused" op=disable target=nothing .* status=404`, r.errb.String())
}

func TestConsoleCommandPrintsATokenOnATerminal(t *testing.T) {
	b := memory.New()
	defer b.Close()
	runtime := t.TempDir()
	r := startConsole(t, b, map[string]string{"XDG_RUNTIME_DIR": runtime, onTerminal: "1"}, "--listen", "127.0.0.1:0")
	require.NotEmpty(t, r.url, "%s\n%s", r.out, r.errb)
	assert.Regexp(t, `operations need this token \(.*\): \S{26}\n`, r.out.String())
	left, err := os.ReadDir(runtime)
	require.NoError(t, err)
	assert.Empty(t, left, "no token file")
	assert.Equal(t, exitOK, r.stop())
}

func TestConsoleCommandWritesTheTokenFileGiven(t *testing.T) {
	b := memory.New()
	defer b.Close()
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte("old\n"), 0o644))
	r := startConsole(t, b, nil, "--listen", "127.0.0.1:0", "--token-file", path)
	require.NotEmpty(t, r.url, "%s\n%s", r.out, r.errb)
	assert.Contains(t, r.out.String(), "operations need the token in "+path+" (mode 0600")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "made 0600 although it was 0644")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Len(t, strings.TrimSpace(string(raw)), 26)
	assert.Equal(t, exitOK, r.stop())

	r = startConsole(t, b, nil, "--listen", "127.0.0.1:0", "--token-file", path, "--token", "given-token-0123456789")
	assert.Equal(t, exitUsage, r.exited(), "a token given and a file for a generated one")
	assert.Contains(t, r.errb.String(), "--token-file is where a generated token goes")

	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(path, link))
	r = startConsole(t, b, nil, "--listen", "127.0.0.1:0", "--token-file", link)
	assert.Equal(t, exitUsage, r.exited(), "a symbolic link")
	assert.Contains(t, r.errb.String(), "is not a regular file")
}

func TestConsoleCommandRefusesAWeakToken(t *testing.T) {
	b := memory.New()
	defer b.Close()
	h := newHarness(t, b)
	r := h.run("console", "--listen", "127.0.0.1:0", "--token", "short")
	requireCode(t, r, exitUsage, fmt.Sprintf("at least %d characters", 16))
}

func TestConsoleCommandRefusesPlainHTTPBeyondLoopback(t *testing.T) {
	b := memory.New()
	defer b.Close()
	h := newHarness(t, b)
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0"} {
		r := h.run("console", "--listen", listen)
		requireCode(t, r, exitUsage, "--listen "+listen+" is not a loopback address")
		assert.Contains(t, r.stderr, "give --tls-cert and --tls-key to serve HTTPS, or --insecure-listen", listen)
		assert.NotContains(t, r.stdout, "simba console at", "%s: nothing served", listen)
	}
	r := h.run("console", "--listen", "127.0.0.1:0", "--tls-cert", "x.pem")
	requireCode(t, r, exitUsage, "--tls-cert and --tls-key go together")
	r = h.run("console", "--listen", "127.0.0.1:0", "--tls-cert", "missing.pem", "--tls-key", "missing.key")
	requireCode(t, r, exitUsage, "--tls-cert missing.pem --tls-key missing.key: open missing.pem")

	// localhost is loopback, by name.
	rl := startConsole(t, b, nil, "--listen", "localhost:0", "--read-only")
	require.NotEmpty(t, rl.url, "%s\n%s", rl.out, rl.errb)
	assert.Equal(t, exitOK, rl.stop())
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key to
// dir, and returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "simba console test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	return certFile, keyFile, pool
}

func TestConsoleCommandServesHTTPS(t *testing.T) {
	b := memory.New()
	defer b.Close()
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	r := startConsole(t, b, nil, "--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile, "--token", "given-token-0123456789")
	require.NotEmpty(t, r.url, "%s\n%s", r.out, r.errb)
	require.True(t, strings.HasPrefix(r.url, "https://127.0.0.1:"), r.url)

	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer cl.CloseIdleConnections()
	resp, err := cl.Get(r.url + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotNil(t, resp.TLS)
	assert.GreaterOrEqual(t, resp.TLS.Version, uint16(tls.VersionTLS12))
	assert.NotEmpty(t, resp.Header.Get("Strict-Transport-Security"))
	code, reply := operate(t, cl, r.url, "disable", "nothing", "given-token-0123456789")
	assert.Equal(t, http.StatusNotFound, code, "an operation over HTTPS: %v", reply)

	old := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11}}}
	_, err = old.Get(r.url + "/healthz")
	assert.Error(t, err, "TLS 1.1 is refused")
	plain := &http.Client{Timeout: 10 * time.Second}
	resp, err = plain.Get("http://" + strings.TrimPrefix(r.url, "https://") + "/healthz")
	if err == nil {
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP to the HTTPS port")
	}
	assert.Equal(t, exitOK, r.stop())
}

func TestConsoleCommandOperatorsTokens(t *testing.T) {
	b := memory.New()
	defer b.Close()
	path := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(path, []byte("# who may operate\nalice:alice-token-0123456789\nbob:bob-token-0123456789ab\n"), 0o644))
	h := newHarness(t, b)
	r := h.run("console", "--listen", "127.0.0.1:0", "--tokens-file", path)
	requireCode(t, r, exitUsage, "mode 0644 lets others read or change the tokens: chmod 600")
	require.NoError(t, os.Chmod(path, 0o600))
	require.NoError(t, os.WriteFile(path+".bad", []byte("alice alice-token-0123456789\n"), 0o600))
	r = h.run("console", "--listen", "127.0.0.1:0", "--tokens-file", path+".bad")
	requireCode(t, r, exitUsage, "--tokens-file "+path+".bad: line 1: want name:token")

	rc := startConsole(t, b, nil, "--listen", "127.0.0.1:0", "--tokens-file", path)
	require.NotEmpty(t, rc.url, "%s\n%s", rc.out, rc.errb)
	assert.Contains(t, rc.out.String(), "operations need an operator's token from "+path)
	cl := &http.Client{Timeout: 10 * time.Second}
	defer cl.CloseIdleConnections()
	code, reply := operate(t, cl, rc.url, "drain", "m1", "alice-token-0123456789")
	assert.Equal(t, http.StatusNotFound, code, "%v", reply)
	code, _ = operate(t, cl, rc.url, "drain", "m1", "given-token-0123456789")
	assert.Equal(t, http.StatusUnauthorized, code, "no shared token")
	assert.Equal(t, exitOK, rc.stop())
	assert.Contains(t, rc.errb.String(), `op=drain target=m1 operator=alice`)
	assert.NotContains(t, rc.errb.String(), "alice-token")
}

// TestConsoleCommandOnABusyPort: a port in use is one line and exit status
// 1, before the console reads the backend or says it is ready (no "console
// ready", no "console closed").
func TestConsoleCommandOnABusyPort(t *testing.T) {
	b := memory.New()
	defer b.Close()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	h := newHarness(t, b)
	r := h.run("console", "--listen", busy.Addr().String(), "--read-only")
	assert.Equal(t, exitFailed, r.code, "%v", r)
	assert.Equal(t, "simba: --listen "+busy.Addr().String()+": the address is in use (another console?): stop what serves there, or pass --listen with another port\n", r.stderr, "one line, and nothing logged before it")
	assert.Empty(t, r.stdout)
	assert.Empty(t, h.opened, "the backend is not opened for a console that cannot serve")
}
