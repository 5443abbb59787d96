package etcdtest_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/certs"
	"github.com/simba-go/simba/internal/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gateway is a client of a server's JSON gateway (the /v3/kv/... and
// /v3/auth/... endpoints), through its proxy: this package has no etcd
// client.
type gateway struct {
	srv   *etcdtest.Server
	hc    *http.Client
	token string // an authentication token, once authenticated
}

func newGateway(t *testing.T, srv *etcdtest.Server) *gateway {
	return newGatewayTLS(t, srv, srv.ClientTLS())
}

// newGatewayTLS returns a gateway client with the TLS configuration given.
func newGatewayTLS(t *testing.T, srv *etcdtest.Server, cfg *tls.Config) *gateway {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	t.Cleanup(hc.CloseIdleConnections)
	return &gateway{srv: srv, hc: hc}
}

// post posts req to path and decodes the reply into resp. It returns the
// reply's HTTP status and, for any other than 200, its body as an error.
func (g *gateway) post(ctx context.Context, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	scheme := "http"
	if g.srv.ClientTLS() != nil {
		scheme = "https"
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, scheme+"://"+g.srv.Endpoints()[0]+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if g.token != "" {
		hreq.Header.Set("Authorization", g.token)
	}
	hresp, err := g.hc.Do(hreq)
	if err != nil {
		return err
	}
	defer hresp.Body.Close()
	reply, err := io.ReadAll(hresp.Body)
	if err != nil {
		return err
	}
	if hresp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s: %s", path, hresp.Status, reply)
	}
	if err := json.Unmarshal(reply, resp); err != nil {
		return fmt.Errorf("POST %s: %v in %s", path, err, reply)
	}
	return nil
}

// header is the header of a reply: the revision of the store.
type header struct {
	Revision int64 `json:"revision,string"`
}

// put writes key and returns the revision of the write.
func (g *gateway) put(ctx context.Context, key, value string) (int64, error) {
	var resp struct{ Header header }
	err := g.post(ctx, "/v3/kv/put", map[string]any{"key": []byte(key), "value": []byte(value)}, &resp)
	return resp.Header.Revision, err
}

// get reads key: its value (found false when there is none) and the
// revision of the store.
func (g *gateway) get(ctx context.Context, key string) (value string, found bool, rev int64, err error) {
	var resp struct {
		Header header
		Kvs    []struct{ Value []byte }
	}
	if err := g.post(ctx, "/v3/kv/range", map[string]any{"key": []byte(key)}, &resp); err != nil {
		return "", false, 0, err
	}
	if len(resp.Kvs) == 0 {
		return "", false, resp.Header.Revision, nil
	}
	return string(resp.Kvs[0].Value), true, resp.Header.Revision, nil
}

// authenticate makes g act as user from now on.
func (g *gateway) authenticate(ctx context.Context, user, password string) error {
	var resp struct{ Token string }
	if err := g.post(ctx, "/v3/auth/authenticate", map[string]string{"name": user, "password": password}, &resp); err != nil {
		return err
	}
	if resp.Token == "" {
		return fmt.Errorf("authenticate %s: no token", user)
	}
	g.token = resp.Token
	return nil
}

// grantTTL asks for a lease of ttl seconds and returns the TTL granted.
func (g *gateway) grantTTL(ctx context.Context, ttl int) (int, error) {
	var resp struct {
		TTL string
	}
	if err := g.post(ctx, "/v3/lease/grant", map[string]any{"TTL": ttl}, &resp); err != nil {
		return 0, err
	}
	return strconv.Atoi(resp.TTL)
}

// TestStartStopRestart: what was written before Stop is there after
// Restart, at the same endpoint, at a revision no lower; while stopped,
// the endpoint answers nothing.
func TestStartStopRestart(t *testing.T) {
	t0 := time.Now()
	srv := etcdtest.Start(t)
	t.Logf("started in %v", time.Since(t0))
	g := newGateway(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	rev, err := g.put(ctx, "/k", "v")
	if err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	for range 20 {
		if _, err := g.put(ctx, "/k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("put: %v", time.Since(t0)/20)
	ttl, err := g.grantTTL(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ttl != 1 {
		t.Errorf("lease of 1s granted for %ds: the server's election timeout is not the fast one", ttl)
	}

	t0 = time.Now()
	srv.Stop()
	t.Logf("stopped in %v", time.Since(t0))
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	_, _, _, err = g.get(short, "/k")
	cancelShort()
	if err == nil {
		t.Fatal("a stopped server answered a range request")
	}
	t.Logf("while stopped: %v", err)
	t0 = time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted in %v", time.Since(t0))
	value, found, got, err := g.get(ctx, "/k")
	if err != nil {
		t.Fatal(err)
	}
	if !found || value != "v" || got < rev+20 {
		t.Fatalf("after restart: /k = %q (found %v) at revision %d, want v at %d or later", value, found, got, rev+20)
	}
	if !strings.Contains(srv.Log(), "--unsafe-no-fsync") {
		t.Errorf("the server runs with fsync: its log's command lines:\n%s", srv.Log())
	}
}

// TestRestartWhenItsPortWasTaken: a server whose client port another
// process took while it was stopped restarts on another, behind the same
// endpoint, with its data.
func TestRestartWhenItsPortWasTaken(t *testing.T) {
	srv := etcdtest.Start(t)
	g := newGateway(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := g.put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	direct := srv.DirectEndpoints()[0]
	srv.Stop()
	l, err := net.Listen("tcp", direct)
	if err != nil {
		t.Fatalf("taking the stopped server's port: %v", err)
	}
	defer l.Close()
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart with its port %s taken: %v", direct, err)
	}
	if moved := srv.DirectEndpoints()[0]; moved == direct {
		t.Fatalf("restarted on %s, a port another process listens on", moved)
	}
	value, found, _, err := g.get(ctx, "/k")
	if err != nil || !found || value != "v" {
		t.Fatalf("after the restart, through the same endpoint: /k = %q (found %v), %v; want v", value, found, err)
	}
}

// TestPauseResume: while paused, a request through the endpoints gets no
// answer (it waits for its deadline); a request sent during the pause is
// answered once the server resumes.
func TestPauseResume(t *testing.T) {
	srv := etcdtest.Start(t)
	g := newGateway(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := g.put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, _, err := g.get(short, "/k")
	cancelShort()
	if err == nil {
		t.Fatal("range answered while the server was paused")
	}
	answered := make(chan error, 1)
	go func() { _, err := g.put(ctx, "/k", "w"); answered <- err }()
	select {
	case err := <-answered:
		srv.Resume()
		t.Fatalf("put answered while the server was paused: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	srv.Resume()
	if err := <-answered; err != nil {
		t.Fatalf("put sent during the pause, after Resume: %v", err)
	}
	value, found, _, err := g.get(ctx, "/k")
	if err != nil || !found || value != "w" {
		t.Fatalf("after Resume: /k = %q (found %v), %v; want w", value, found, err)
	}
}

// TestTLSAndAuth: a server WithTLS and client certificates, with
// authentication on, lets each user do what its role grants and nothing
// else, before and after a restart.
func TestTLSAndAuth(t *testing.T) {
	f, err := certs.Generate(t.TempDir(), "nobody")
	if err != nil {
		t.Fatal(err)
	}
	srv := etcdtest.Start(t, etcdtest.WithTLS(f, true))
	// With client certificates and authentication on, etcd's gateway
	// refuses clients whose certificate has a common name (it would not
	// take it for the user, as its gRPC API does): the gateway's clients
	// here present one without.
	nameless, err := f.Authority.Issue(certs.Template{})
	if err != nil {
		t.Fatal(err)
	}
	gatewayTLS := srv.ClientTLS()
	gatewayTLS.Certificates = []tls.Certificate{nameless.TLS()}
	if u, p := srv.Root(); u != "" || p != "" {
		t.Errorf("Root before EnableAuth: %q, %q", u, p)
	}
	srv.EnableAuth(t, "rootpw",
		etcdtest.User{Name: "app", Password: "apppw", Prefix: "/app/", Perm: etcdtest.ReadWrite},
		etcdtest.User{Name: "viewer", Password: "viewerpw", Prefix: "/app/", Perm: etcdtest.Read},
		etcdtest.User{Name: "writer", Password: "writerpw", Prefix: "/app/", Perm: etcdtest.Write},
	)
	if u, p := srv.Root(); u != "root" || p != "rootpw" {
		t.Errorf("Root after EnableAuth: %q, %q; want root, rootpw", u, p)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	check := func(when string) {
		t.Helper()
		as := func(user, password string) *gateway {
			t.Helper()
			g := newGatewayTLS(t, srv, gatewayTLS)
			if user != "" {
				if err := g.authenticate(ctx, user, password); err != nil {
					t.Fatalf("%s: %v", when, err)
				}
			}
			return g
		}
		allowed := func(who, what string, err error, want bool) {
			t.Helper()
			if want && err != nil {
				t.Errorf("%s: %s may %s: %v", when, who, what, err)
			}
			if !want && err == nil {
				t.Errorf("%s: %s may not %s, but did", when, who, what)
			}
		}
		for _, c := range []struct {
			user, password   string
			put, get, putOut bool
		}{
			{"", "", false, false, false},
			{"root", "rootpw", true, true, true},
			{"app", "apppw", true, true, false},
			{"viewer", "viewerpw", false, true, false},
			{"writer", "writerpw", true, false, false},
		} {
			who := c.user
			if who == "" {
				who = "a client without a user"
			}
			g := as(c.user, c.password)
			_, err := g.put(ctx, "/app/k", "v-"+c.user)
			allowed(who, "put /app/k", err, c.put)
			_, _, _, err = g.get(ctx, "/app/k")
			allowed(who, "read /app/k", err, c.get)
			_, err = g.put(ctx, "/other", "v")
			allowed(who, "put /other", err, c.putOut)
		}
		if err := newGatewayTLS(t, srv, gatewayTLS).authenticate(ctx, "app", "wrong"); err == nil {
			t.Errorf("%s: app authenticated with a wrong password", when)
		}
	}
	check("before restart")
	srv.Stop()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	check("after restart")
}

// TestStartFailureSaysWhy: a server that cannot start (its data directory
// is a file) fails New with etcd's own words from its log.
func TestStartFailureSaysWhy(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := etcdtest.New(dir)
	if err == nil {
		srv.Close()
		t.Fatal("New started a server on a data directory that is a file")
	}
	t.Logf("New: %v", err)
	for _, want := range []string{"exited while starting", etcdtest.LogName + " ends:", "data"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's error does not say %q", want)
		}
	}
}
