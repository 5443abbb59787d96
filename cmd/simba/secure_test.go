package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/certs"
	"github.com/simba-go/simba/internal/etcdtest"
)

// The tests of secured clusters run the command in-process (run's cli,
// with the real openBackend) against a real etcd serving TLS only, with
// client certificates required and authentication on, and a real
// ZooKeeper with digest credentials and ACLs (zk_secure_test.go).

// securedTTL is the nodes' TTL on the secured etcd: each renewal opens a
// keep-alive stream, and etcd's client authenticates every stream anew
// with the password (a bcrypt on the server), which under the race
// detector on a loaded machine can take longer than a third of etcd's
// least TTL.
const securedTTL = 3 * time.Second

// Passwords of the secured etcd's users.
const (
	rootPassword   = "root-secret"
	appPassword    = "app-secret"
	viewerPassword = "viewer-secret"
	otherPassword  = "other-secret"
)

// securedEtcd is an etcd serving TLS to clients with certificates, with
// authentication on: root, app (read and write under prefix), viewer
// (read under prefix only) and other (read and write under another
// prefix).
type securedEtcd struct {
	srv    *etcdtest.Server
	files  certs.Files
	prefix string
	root   *clientv3.Client
}

func startSecuredEtcd(t *testing.T) *securedEtcd {
	t.Helper()
	f, err := certs.Generate(t.TempDir(), "simba")
	if err != nil {
		t.Fatal(err)
	}
	srv := etcdtest.Start(t, etcdtest.WithTLS(f, true))
	prefix := fmt.Sprintf("/secured-%08x/", rand.Uint32())
	srv.EnableAuth(t, rootPassword,
		etcdtest.User{Name: "app", Password: appPassword, Prefix: prefix, Perm: etcdtest.ReadWrite},
		etcdtest.User{Name: "viewer", Password: viewerPassword, Prefix: prefix, Perm: etcdtest.Read},
		etcdtest.User{Name: "other", Password: otherPassword, Prefix: "/elsewhere/", Perm: etcdtest.ReadWrite},
	)
	return &securedEtcd{srv: srv, files: f, prefix: prefix, root: newEtcdClient(t, srv)}
}

// tlsArgs are the command's flags for the server's TLS.
func (s *securedEtcd) tlsArgs() []string {
	return []string{"--etcd", s.srv.Endpoints()[0], "--prefix", s.prefix,
		"--cacert", s.files.CA, "--cert", s.files.ClientCert, "--key", s.files.ClientKey}
}

// nodeBackend opens a backend for a node, as app, closed when the test
// ends.
func (s *securedEtcd) nodeBackend(t *testing.T) backend.Backend {
	t.Helper()
	b, err := etcd.New(s.srv.Endpoints(), etcd.WithPrefix(s.prefix), etcd.WithTLS(s.srv.ClientTLS()), etcd.WithAuth("app", appPassword))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// revision returns the store's revision, which every write moves.
func (s *securedEtcd) revision(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := s.root.Get(ctx, "/no-such-key")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// passwordPrompts replaces the terminal for the test: each prompt answers
// with password, or, when password is "", as if standard input were no
// terminal. It returns the prompts shown.
func passwordPrompts(t *testing.T, password string) *[]string {
	var mu sync.Mutex
	prompts := new([]string)
	saved := readPassword
	readPassword = func(_ io.Writer, prompt string) (string, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		*prompts = append(*prompts, prompt)
		return password, password != "", nil
	}
	t.Cleanup(func() { readPassword = saved })
	return prompts
}

// runIn runs the command in-process with the real backends and the
// environment given (nothing else of the process's).
func runIn(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	c := &cli{stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }, open: openBackend, probe: probe}
	// A generous --timeout by default, before the command: TLS and an
	// authentication per stream are slow on a loaded machine; a --timeout
	// in args comes after it and wins.
	code := c.run(t.Context(), append([]string{"--timeout", "30s"}, args...))
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// requireOneLine fails the test unless r exited with code, printing
// nothing on standard output and one line on standard error that holds
// every want, and no secret.
func requireOneLine(t *testing.T, what string, r result, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("%s: exit %d, want %d\n%v", what, r.code, code, r)
		return
	}
	if strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "simba: ") || r.stdout != "" {
		t.Errorf("%s: want one line on stderr and nothing on stdout\n%v", what, r)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("%s: stderr lacks %q\n%v", what, w, r)
		}
	}
	for _, secret := range []string{rootPassword, appPassword, viewerPassword, otherPassword, "wrong-password"} {
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("%s: a password is printed\n%v", what, r)
		}
	}
	for _, bad := range []string{"goroutine ", "panic"} {
		if strings.Contains(r.stderr, bad) {
			t.Errorf("%s: %q on stderr\n%v", what, bad, r)
		}
	}
}

// readCommands are the commands that only read.
var readCommands = [][]string{
	{"status"}, {"status", "report"}, {"elections"}, {"groups"}, {"groups", "billing"}, {"jobs"}, {"history", "report"},
	{"audit"}, {"audit", "report"},
}

// everyCommand is readCommands and every operation, in an order that
// leaves what the nodes run as it was; wait bounds the operations that
// wait for the nodes.
func everyCommand(wait string) [][]string {
	return append(slices.Clone(readCommands),
		[]string{"trigger", "report"},
		[]string{"disable", "report", "--reason", "secured e2e"},
		[]string{"enable", "report"},
		[]string{"resign", "ingest", "--wait", "--timeout", wait},
		[]string{"drain", "a", "--wait", "--timeout", wait},
		[]string{"undrain", "a"},
	)
}

// requireExitOK runs each of commands with creds (as who, for the
// messages) and fails the test for each that does not exit 0.
func requireExitOK(t *testing.T, who string, commands [][]string, creds []string) {
	t.Helper()
	for _, args := range commands {
		if r := runIn(t, nil, append(args, creds...)...); r.code != exitOK {
			t.Errorf("simba %s as %s: %v", strings.Join(args, " "), who, r)
		}
	}
}

// Every command works against a secured etcd with the right TLS files and
// credentials given by flags, the environment or a config file, while
// nodes run on the same server; the read-only user reads; a user without
// permission on the prefix is refused.
func TestSecuredEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real etcd")
	}
	s := startSecuredEtcd(t)
	rec := &recorder{}
	a := startNode(t, s.nodeBackend(t), "a", securedTTL, rec)
	a.schedule(t, "report", simba.FixedRate(time.Hour))
	a.whileLeader(t, "ingest")
	a.group(t, "billing", 4)
	startNode(t, s.nodeBackend(t), "z", securedTTL, rec).whileLeader(t, "ingest")
	app := append(s.tlsArgs(), "--user", "app:"+appPassword)
	eventually(t, 30*time.Second, "report has run and billing is held", func() bool {
		r := runIn(t, nil, append([]string{"status", "--json"}, app...)...)
		if r.code != exitOK {
			return false
		}
		o := decode[overview](t, r.stdout)
		return o.Jobs.Total == 1 && o.Groups.Held == 4
	})

	t.Run("ReadWriteUser", func(t *testing.T) {
		requireExitOK(t, "app", everyCommand("20s"), app)
	})

	t.Run("PasswordFromTheEnvironmentAndThePrompt", func(t *testing.T) {
		r := runIn(t, map[string]string{envPassword: appPassword}, append([]string{"jobs"}, append(s.tlsArgs(), "--user", "app")...)...)
		if r.code != exitOK {
			t.Errorf("jobs with $%s: %v", envPassword, r)
		}
		prompts := passwordPrompts(t, appPassword)
		r = runIn(t, nil, append([]string{"jobs"}, append(s.tlsArgs(), "--user", "app")...)...)
		if r.code != exitOK || len(*prompts) != 1 || (*prompts)[0] != "etcd password for app: " {
			t.Errorf("jobs with a prompt: %v; prompts %q", r, *prompts)
		}
	})

	t.Run("EnvironmentAndConfigFile", func(t *testing.T) {
		env := map[string]string{
			envEtcd: s.srv.Endpoints()[0], envPrefix: s.prefix,
			envCACert: s.files.CA, envCert: s.files.ClientCert, envKey: s.files.ClientKey,
			envUser: "app", envPassword: appPassword,
		}
		if r := runIn(t, env, "jobs"); r.code != exitOK {
			t.Errorf("jobs from the environment: %v", r)
		}
		dir := t.TempDir()
		pw := filepath.Join(dir, "password")
		writeFile(t, pw, appPassword+"\n")
		cfg := writeFile(t, filepath.Join(dir, "config.yaml"), fmt.Sprintf(`backend: etcd
endpoints: [%s]
prefix: %s
timeout: 8s
cacert: %s
cert: %s
key: %s
user: app
password-file: password
`, s.srv.Endpoints()[0], s.prefix, s.files.CA, s.files.ClientCert, s.files.ClientKey))
		if r := runIn(t, nil, "jobs", "--config", cfg); r.code != exitOK {
			t.Errorf("jobs from --config: %v", r)
		}
		xdg := map[string]string{"XDG_CONFIG_HOME": dir}
		if err := os.MkdirAll(filepath.Join(dir, "simba"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfg, filepath.Join(dir, "simba", "config.yaml")); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "simba", "password"), appPassword)
		if r := runIn(t, xdg, "jobs"); r.code != exitOK {
			t.Errorf("jobs from $XDG_CONFIG_HOME/simba/config.yaml: %v", r)
		}
		// A flag wins over the file: another user, refused.
		r := runIn(t, xdg, "jobs", "--user", "other:"+otherPassword)
		requireOneLine(t, "jobs as other over the file's app", r, exitRefused, "permission denied")
	})

	// The admin reads through a View: no session, no write, which the
	// viewer's role would refuse.
	t.Run("ReadOnlyUser", func(t *testing.T) {
		viewer := append(s.tlsArgs(), "--user", "viewer:"+viewerPassword)
		requireExitOK(t, "the read-only viewer", readCommands, viewer)
		r := runIn(t, nil, append([]string{"disable", "report", "--reason", "not allowed"}, viewer...)...)
		requireOneLine(t, "disable as the read-only viewer", r, exitRefused, "user viewer", "permission denied")
	})

	t.Run("UserWithoutPermission", func(t *testing.T) {
		r := runIn(t, nil, append([]string{"status"}, append(s.tlsArgs(), "--user", "other:"+otherPassword)...)...)
		requireOneLine(t, "status as other", r, exitRefused, "user other", "permission denied")
	})
}

// writeFile writes content to path and returns path.
func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Wrong or missing TLS files and credentials each give one line on
// stderr saying what is wrong, exit status 5 (the backend refused) or 2
// (a file that cannot be used), and write nothing. A failed TLS handshake
// is reported as such, not as a backend that does not answer.
func TestSecuredEtcdBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real etcd")
	}
	s := startSecuredEtcd(t)
	ca := s.files.Authority
	dir := t.TempDir()
	other, err := certs.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	otherCA := writeFile(t, filepath.Join(dir, "other-ca.crt"), string(other.CertPEM))
	expired, err := ca.Expired(certs.Template{CommonName: "simba"})
	if err != nil {
		t.Fatal(err)
	}
	expiredCert, expiredKey, err := expired.Write(dir, "expired")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Client("simba")
	if err != nil {
		t.Fatal(err)
	}
	foreignCert, foreignKey, err := foreign.Write(dir, "foreign")
	if err != nil {
		t.Fatal(err)
	}
	notPEM := writeFile(t, filepath.Join(dir, "not.pem"), "not a certificate\n")
	ep := s.srv.Endpoints()[0]
	base := []string{"--etcd", ep, "--prefix", s.prefix, "--timeout", "3s"}
	good := []string{"--cacert", s.files.CA, "--cert", s.files.ClientCert, "--key", s.files.ClientKey}
	before := s.revision(t)
	passwordPrompts(t, "") // standard input is no terminal

	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"a CA that did not sign the server's certificate", []string{"--cacert", otherCA, "--cert", s.files.ClientCert, "--key", s.files.ClientKey, "--user", "app:" + appPassword},
			exitRefused, []string{"TLS handshake with " + ep + " failed", "not signed by the CA of --cacert"}},
		{"no CA: the system's", []string{"--cert", s.files.ClientCert, "--key", s.files.ClientKey, "--user", "app:" + appPassword},
			exitRefused, []string{"not signed by the system's CAs"}},
		{"an expired client certificate", []string{"--cacert", s.files.CA, "--cert", expiredCert, "--key", expiredKey, "--user", "app:" + appPassword},
			exitRefused, []string{"client certificate " + expiredCert + " (from --cert) expired at"}},
		{"a client certificate of another CA", []string{"--cacert", s.files.CA, "--cert", foreignCert, "--key", foreignKey, "--user", "app:" + appPassword},
			exitRefused, []string{"the server refused the client certificate " + foreignCert}},
		{"no client certificate", []string{"--cacert", s.files.CA, "--user", "app:" + appPassword},
			exitRefused, []string{"the server refused the connection without a client certificate"}},
		{"no TLS", []string{"--user", "app:" + appPassword, "--timeout", "1s"},
			exitUnreachable, []string{"no answer within 1s"}},
		{"a wrong password", append(slices.Clone(good), "--user", "app:wrong-password"),
			exitRefused, []string{"refused user app", "wrong user name or password"}},
		{"an unknown user", append(slices.Clone(good), "--user", "nobody:wrong-password"),
			exitRefused, []string{"refused user nobody"}},
		{"no user: the certificate's", good,
			exitRefused, []string{"user simba (the common name of the client certificate, no --user given)", "permission denied"}},
		{"a user without a password, no terminal", append(slices.Clone(good), "--user", "app"),
			exitUsage, []string{"no password for etcd user app"}},
		{"a user without permission", append(slices.Clone(good), "--user", "other:"+otherPassword),
			exitRefused, []string{"user other", "permission denied"}},
		// --force: the read-only user reads fine, and sees no job here.
		{"a read-only user operating", append(slices.Clone(good), "--force", "--user", "viewer:"+viewerPassword),
			exitRefused, []string{"user viewer", "permission denied"}},
		{"a missing CA file", []string{"--cacert", filepath.Join(dir, "missing.crt")},
			exitUsage, []string{"CA certificates from --cacert: " + filepath.Join(dir, "missing.crt") + ": no such file"}},
		{"a CA file without a certificate", []string{"--cacert", notPEM},
			exitUsage, []string{"no PEM certificate in " + notPEM}},
		{"a certificate without its key", []string{"--cacert", s.files.CA, "--cert", s.files.ClientCert},
			exitUsage, []string{"without its key: add --key"}},
		{"a key that does not match", []string{"--cacert", s.files.CA, "--cert", s.files.ClientCert, "--key", foreignKey},
			exitUsage, []string{"client certificate from --cert and key from --key"}},
	} {
		args := append([]string{"disable", "report", "--reason", "bad input"}, append(slices.Clone(base), tc.args...)...)
		r := runIn(t, nil, args...)
		requireOneLine(t, tc.name, r, tc.code, tc.want...)
		t.Logf("%s: exit %d: %s", tc.name, r.code, strings.TrimSpace(r.stderr))
	}
	if after := s.revision(t); after != before {
		t.Errorf("the store's revision moved from %d to %d: a refused command wrote", before, after)
	}
}

// simba dev --tls --user serves TLS with the certificates it generates and
// authentication with the user given, and prints what to export; the
// command then works with those settings and is refused without them.
func TestDevWithTLSAndUser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real etcd")
	}
	ctx, stop := context.WithCancel(t.Context())
	out, errb := &syncBuffer{}, &syncBuffer{}
	c := &cli{stdout: out, stderr: errb, getenv: func(string) string { return "" }, open: openBackend, probe: probe}
	exited := make(chan int, 1)
	go func() {
		exited <- c.run(ctx, []string{"dev", "--port", "0", "--json", "--tls", "--user", "alice:" + appPassword})
	}()
	defer func() {
		stop()
		if code := <-exited; code != exitOK {
			t.Errorf("simba dev: exit %d\n%s", code, errb)
		}
	}()
	var info devInfo
	eventually(t, 30*time.Second, "simba dev prints its settings", func() bool {
		return strings.HasSuffix(out.String(), "}\n") && decodeInto(out.String(), &info) == nil
	})
	if !strings.HasPrefix(info.Endpoint, "https://127.0.0.1:") || info.CACert == "" || info.User != "alice" || info.RootPasswordFile == "" {
		t.Fatalf("info %+v", info)
	}
	if fi, err := os.Stat(info.RootPasswordFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("root password file: %v, %v", fi, err)
	}
	env := map[string]string{envEtcd: info.Endpoint, envCACert: info.CACert, envUser: "alice", envPassword: appPassword}
	if r := runIn(t, env, "status"); r.code != exitOK || !strings.Contains(r.stdout, "etcd at "+info.Endpoint) {
		t.Errorf("status with the printed settings: %v", r)
	}
	if r := runIn(t, env, "disable", "report", "--reason", "dev", "--force"); r.code != exitOK {
		t.Errorf("disable as alice: %v", r)
	}
	delete(env, envUser)
	r := runIn(t, env, "status")
	requireOneLine(t, "status without a user", r, exitRefused, "requires authentication")
	delete(env, envCACert)
	r = runIn(t, env, "status")
	requireOneLine(t, "status without the CA", r, exitRefused, "not signed by the system's CAs")
}
