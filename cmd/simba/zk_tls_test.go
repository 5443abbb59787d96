package main

import (
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/certs"
	"github.com/simba-go/simba/internal/zktest"
)

// tlsZK is a root on a ZooKeeper server of the test's own that serves
// TLS on its secureClientPort (and plain TCP on its clientPort, for
// inspecting it), with certificates of a CA of the test's own.
type tlsZK struct {
	srv    *zktest.Server
	files  certs.Files
	root   string
	digest string // the nodes' and the command's digest credentials, if any
}

// startTLSZK starts the server, asking clients for certificates as auth
// says. With digest credentials, the nodes present them (and so create
// their znodes for them alone), and so does the command.
func startTLSZK(t *testing.T, auth zktest.ClientAuth, digest string) *tlsZK {
	t.Helper()
	f, err := certs.Generate(t.TempDir(), "app")
	if err != nil {
		t.Fatal(err)
	}
	srv := zktest.StartTLSServer(t, f, auth)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server's log:\n%s", srv.Log())
		}
	})
	z := &tlsZK{srv: srv, files: f, digest: digest}
	if digest == "" {
		z.root = zktest.Root(t, srv.Addr)
		return z
	}
	// zktest.Root's check cannot read the nodes' znodes: delete them, as
	// the nodes' identity, after the nodes.
	z.root = fmt.Sprintf("/tls-%08x", rand.Uint32())
	owner := zktest.ConnectAs(t, srv.Addr, digest)
	t.Cleanup(func() {
		if err := zktest.DeleteTree(owner, z.root); err != nil {
			t.Errorf("deleting %s: %v", z.root, err)
		}
	})
	return z
}

// nodeBackend opens a backend for a node over TLS, with the client
// certificate, closed when the test ends.
func (z *tlsZK) nodeBackend(t *testing.T) backend.Backend {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(z.files.ClientCert, z.files.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	d := &tls.Dialer{Config: &tls.Config{RootCAs: z.files.Authority.Pool(), Certificates: []tls.Certificate{pair}}}
	opts := []zookeeper.Option{zookeeper.WithRoot(z.root), zookeeper.WithDialer(d.DialContext)}
	if z.digest != "" {
		opts = append(opts, zookeeper.WithAuth("digest", []byte(z.digest)))
	}
	b, err := zookeeper.New([]string{z.srv.SecureAddr}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// args are the command's flags for the TLS port, with the CA and the
// digest credentials, if any.
func (z *tlsZK) args(extra ...string) []string {
	a := []string{"--zk", z.srv.SecureAddr, "--prefix", z.root, "--cacert", z.files.CA}
	if z.digest != "" {
		a = append(a, "--zk-auth", z.digest)
	}
	return append(a, extra...)
}

// tree returns the znodes under the root that hold data (see dataTree).
func (z *tlsZK) tree(t *testing.T) string {
	t.Helper()
	return dataTree(t, zktest.Connect(t, z.srv.Addr), z.root)
}

// status, jobs, disable --force and audit work over TLS: with --cacert
// alone against a server that asks for no client certificate, and with
// --cert and --key against one that requires them (ssl.clientAuth=need),
// the nodes and the command also presenting digest credentials, which
// the znodes' ACL then requires. A node runs a job over TLS meanwhile.
func TestZooKeeperOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real ZooKeeper")
	}
	for _, tc := range []struct {
		name   string
		auth   zktest.ClientAuth
		digest string
		args   func(z *tlsZK) []string
	}{
		{"CACert", zktest.ClientCertNone, "", func(z *tlsZK) []string { return z.args() }},
		{"ClientCertificateAndDigest", zktest.ClientCertNeed, zkApp, func(z *tlsZK) []string {
			return z.args("--cert", z.files.ClientCert, "--key", z.files.ClientKey)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := startTLSZK(t, tc.auth, tc.digest)
			n := startNode(t, z.nodeBackend(t), "a", e2eTTL, &recorder{})
			n.schedule(t, "report", simba.FixedRate(time.Hour))
			args := tc.args(z)
			eventually(t, 30*time.Second, "report is shown", func() bool {
				r := runIn(t, nil, append([]string{"status", "--json"}, args...)...)
				return r.code == exitOK && decode[overview](t, r.stdout).Jobs.Total == 1
			})
			for _, cmd := range [][]string{{"status"}, {"jobs"}, {"disable", "nightly", "--force", "--reason", "tls e2e"}, {"audit"}} {
				r := runIn(t, nil, append(cmd, args...)...)
				if r.code != exitOK {
					t.Fatalf("simba %s over TLS: %v", strings.Join(cmd, " "), r)
				}
				t.Logf("simba %s over TLS:\n%s", strings.Join(cmd, " "), r.stdout)
			}
			jobs := runIn(t, nil, append([]string{"jobs"}, args...)...)
			if !strings.Contains(jobs.stdout, "report") {
				t.Errorf("jobs does not show report: %v", jobs)
			}
			o := decode[overview](t, runIn(t, nil, append([]string{"status", "--json"}, args...)...).stdout)
			if len(o.Ops.Disables) != 1 || o.Ops.Disables[0].Name != "nightly" || o.Ops.Disables[0].Reason != "tls e2e" {
				t.Errorf("status shows the disables %+v, want nightly's, for tls e2e", o.Ops.Disables)
			}
			entries := decode[[]auditView](t, runIn(t, nil, append([]string{"audit", "--json"}, args...)...).stdout)
			if len(entries) != 1 || entries[0].Op != "disable" || entries[0].Target != "nightly" || entries[0].By != operator() {
				t.Errorf("audit: %+v, want the disable of nightly by %s", entries, operator())
			}
			if tc.digest != "" {
				z.checkX509Identity(t)
			}
		})
	}
}

// Wrong or missing TLS settings each give one line saying what is wrong
// and exit status 5, within --timeout, and write nothing: a CA that did
// not sign the server's certificate, no CA (the system's), TLS to the
// plain port, an expired client certificate, none, or one of another CA.
// Without TLS, a client of the TLS port is told that the server hung up.
func TestZooKeeperOverTLSBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real ZooKeeper")
	}
	z := startTLSZK(t, zktest.ClientCertNeed, "")
	n := startNode(t, z.nodeBackend(t), "a", e2eTTL, &recorder{})
	n.schedule(t, "report", simba.FixedRate(time.Hour))
	cert := []string{"--cert", z.files.ClientCert, "--key", z.files.ClientKey}
	eventually(t, 30*time.Second, "report is shown", func() bool {
		r := runIn(t, nil, append([]string{"status", "--json"}, z.args(cert...)...)...)
		return r.code == exitOK && decode[overview](t, r.stdout).Jobs.Total == 1
	})
	n.client.Close()
	before := z.tree(t)
	if !strings.Contains(before, "/rec/status/report/=") {
		t.Fatalf("no status record of report to compare with:\n%s", before)
	}

	dir := t.TempDir()
	other, err := certs.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	otherCA := writeFile(t, filepath.Join(dir, "other-ca.crt"), string(other.CertPEM))
	expired, err := z.files.Authority.Expired(certs.Template{CommonName: "app"})
	if err != nil {
		t.Fatal(err)
	}
	expiredCert, expiredKey, err := expired.Write(dir, "expired")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Client("app")
	if err != nil {
		t.Fatal(err)
	}
	foreignCert, foreignKey, err := foreign.Write(dir, "foreign")
	if err != nil {
		t.Fatal(err)
	}
	secure, plain := z.srv.SecureAddr, z.srv.Addr
	for _, tc := range []struct {
		name string
		args []string // after --prefix and --timeout
		code int
		want []string
	}{
		{"a CA that did not sign the server's certificate", append([]string{"--zk", secure, "--cacert", otherCA}, cert...),
			exitRefused, []string{"TLS handshake with " + secure + " failed", "not signed by the CA of --cacert"}},
		{"no CA: the system's", append([]string{"--zk", secure}, cert...),
			exitRefused, []string{"TLS handshake with " + secure + " failed", "not signed by the system's CAs"}},
		{"TLS to the plain port", append([]string{"--zk", plain, "--cacert", z.files.CA}, cert...),
			exitRefused, []string{"TLS handshake with " + plain + " failed", "the server hung up", "secureClientPort"}},
		{"an expired client certificate", []string{"--zk", secure, "--cacert", z.files.CA, "--cert", expiredCert, "--key", expiredKey},
			exitRefused, []string{"client certificate " + expiredCert + " (from --cert) expired at"}},
		{"no client certificate", []string{"--zk", secure, "--cacert", z.files.CA},
			exitRefused, []string{"the server refused the connection without a client certificate"}},
		{"a client certificate of another CA", []string{"--zk", secure, "--cacert", z.files.CA, "--cert", foreignCert, "--key", foreignKey},
			exitRefused, []string{"the server refused the client certificate " + foreignCert}},
		{"no TLS to the TLS port", []string{"--zk", secure},
			exitUnreachable, []string{"failed while opening a session", "EOF"}},
	} {
		for _, cmd := range [][]string{{"status"}, {"disable", "report", "--reason", "bad input"}} {
			args := append(append(cmd, "--prefix", z.root, "--timeout", "5s"), tc.args...)
			start := time.Now()
			r := runIn(t, nil, args...)
			requireOneLine(t, tc.name+": "+strings.Join(cmd, " "), r, tc.code, tc.want...)
			t.Logf("%s: simba %s: exit %d after %v: %s", tc.name, strings.Join(cmd, " "), r.code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.stderr))
		}
	}
	if after := z.tree(t); after != before {
		t.Errorf("the tree changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// checkX509Identity shows what ZooKeeper makes of a client certificate:
// the TLS connection authenticates as the certificate's subject (scheme
// x509), so the creator-only ACL of the nodes' znodes names it beside
// their digest user, and admits a client with the nodes' certificate
// whatever digest credentials it gives; a certificate of another subject,
// from the same CA, with other digest credentials, is refused.
func (z *tlsZK) checkX509Identity(t *testing.T) {
	t.Helper()
	acl, _, err := zktest.ConnectAs(t, z.srv.Addr, z.digest).GetACL(z.root)
	if err != nil {
		t.Fatal(err)
	}
	var x509ID string
	for _, a := range acl {
		if a.Scheme == "x509" {
			x509ID = a.ID
		}
	}
	t.Logf("the root's ACL: %+v", acl)
	if x509ID != "CN=app,O=simba" {
		t.Errorf("the root's ACL %+v does not name the nodes' certificate subject, CN=app,O=simba, as x509", acl)
	}
	withAppsCert := z.args("--cert", z.files.ClientCert, "--key", z.files.ClientKey, "--zk-auth", zkMallory)
	if r := runIn(t, nil, append([]string{"status"}, withAppsCert...)...); r.code != exitOK {
		t.Errorf("status with the nodes' certificate and mallory's digest: %v", r)
	}
	mallory, err := z.files.Authority.Client("mallory")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := mallory.Write(t.TempDir(), "mallory")
	if err != nil {
		t.Fatal(err)
	}
	asMallory := z.args("--cert", cert, "--key", key, "--zk-auth", zkMallory)
	requireOneLine(t, "status with mallory's certificate and digest", runIn(t, nil, append([]string{"status"}, asMallory...)...),
		exitRefused, "refused access as mallory", "not authenticated")
}
