package etcd_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/certs"
	"github.com/simba-go/simba/internal/etcdtest"
)

// A backend from New with WithTLS opens sessions, holds leases and writes
// records on a server that serves TLS only and requires client
// certificates; a client that does not trust the server's CA, or presents
// an expired certificate, never connects, and Open says so.
func TestWithTLS(t *testing.T) {
	t.Parallel()
	f, err := certs.Generate(t.TempDir(), "simba")
	if err != nil {
		t.Fatal(err)
	}
	srv := etcdtest.Start(t, etcdtest.WithTLS(f, true))
	prefix := testPrefix(t)

	b := newBackend(t, srv.Endpoints(), etcd.WithTLS(srv.ClientTLS()), etcd.WithPrefix(prefix))
	s := open(t, b, time.Minute) // not renewed
	if _, err := s.Acquire(op(t), "report"); err != nil {
		t.Fatalf("Acquire over TLS: %v", err)
	}
	if got := keys(t, newClient(t, srv), prefix); len(got) != 2 {
		t.Errorf("keys over TLS: %v, want the session's and the lease's", got)
	}
	// https:// endpoints too.
	https := newBackend(t, []string{"https://" + srv.Endpoints()[0]}, etcd.WithTLS(srv.ClientTLS()), etcd.WithPrefix(prefix))
	open(t, https, time.Minute)

	other, err := certs.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	expired, err := f.Authority.Expired(certs.Template{CommonName: "simba"})
	if err != nil {
		t.Fatal(err)
	}
	good := srv.ClientTLS()
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"a CA that did not sign the server's certificate", &tls.Config{RootCAs: other.Pool(), Certificates: good.Certificates}},
		{"an expired client certificate", &tls.Config{RootCAs: good.RootCAs, Certificates: []tls.Certificate{expired.TLS()}}},
		{"no client certificate", &tls.Config{RootCAs: good.RootCAs}},
		{"no TLS", nil},
	} {
		var opts []etcd.Option
		if tc.cfg != nil {
			opts = append(opts, etcd.WithTLS(tc.cfg))
		}
		b := newBackend(t, srv.Endpoints(), append(opts, etcd.WithPrefix(prefix))...)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := b.Open(ctx, backend.SessionOptions{TTL: 2 * time.Second})
		cancel()
		if err == nil || !strings.Contains(err.Error(), "not connected to etcd") {
			t.Errorf("%s: Open: %v, want not connected", tc.name, err)
		}
	}
	if got := keys(t, newClient(t, srv), prefix); len(got) != 3 {
		t.Errorf("keys after the refused clients: %v, want the two sessions' and the lease's", got)
	}
}

// New with WithAuth authenticates on the first request, not in New: a
// backend on an unreachable endpoint is created at once; the right
// password opens sessions, a wrong one is refused at once with etcd's
// authentication error, and a user whose role may only read the prefix is
// refused its first write with etcd's permission error. Nothing is
// written by the refused ones.
func TestWithAuth(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	prefix := testPrefix(t)
	srv.EnableAuth(t, "rootpw",
		etcdtest.User{Name: "app", Password: "apppw", Prefix: prefix, Perm: etcdtest.ReadWrite},
		etcdtest.User{Name: "viewer", Password: "viewerpw", Prefix: prefix, Perm: etcdtest.Read},
	)
	root := newClient(t, srv)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := l.Addr().String()
	l.Close()
	created := await.Returned(func() error {
		b, err := etcd.New([]string{closedPort}, etcd.WithAuth("app", "apppw"))
		if err == nil {
			err = b.Close()
		}
		return err
	})
	if err := await.For(t, created, 5*time.Second, "New with WithAuth on a closed port returns"); err != nil {
		t.Fatalf("New with WithAuth on a closed port: %v", err)
	}

	b := newBackend(t, srv.Endpoints(), etcd.WithAuth("app", "apppw"), etcd.WithPrefix(prefix))
	s := open(t, b, 2*time.Second)
	if _, err := s.Acquire(op(t), "report"); err != nil {
		t.Fatalf("Acquire as app: %v", err)
	}
	if _, err := s.KeepAlive(op(t)); err != nil {
		t.Fatalf("KeepAlive as app: %v", err)
	}
	rev := revision(t, root)

	for _, tc := range []struct {
		name, user, password string
		want                 error
	}{
		{"a wrong password", "app", "wrong", rpctypes.ErrAuthFailed},
		{"an unknown user", "nobody", "apppw", rpctypes.ErrAuthFailed},
		{"a read-only user", "viewer", "viewerpw", rpctypes.ErrPermissionDenied},
	} {
		b := newBackend(t, srv.Endpoints(), etcd.WithAuth(tc.user, tc.password), etcd.WithPrefix(prefix))
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		_, err := b.Open(ctx, backend.SessionOptions{TTL: 2 * time.Second})
		waited := ctx.Err() != nil
		cancel()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Open: %v, want %v", tc.name, err, tc.want)
		}
		if waited {
			t.Errorf("%s: Open waited for its ctx to end", tc.name)
		}
	}
	// The read-only user was granted a lease (etcd checks no permission
	// for that) which Open revoked on failing; no key was written.
	if got := revision(t, root); got != rev {
		t.Errorf("revision moved from %d to %d: the refused clients wrote", rev, got)
	}
}

func revision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(op(t), "/no-such-key")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func TestTLSAndAuthOptionsRefuseBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  etcd.Option
		want string
	}{
		{"nil TLS", etcd.WithTLS(nil), "nil TLS configuration"},
		{"empty user", etcd.WithAuth("", "pw"), "empty user name"},
	} {
		if _, err := etcd.New([]string{"127.0.0.1:1"}, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New: %v, want %q", tc.name, err, tc.want)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, opt := range []etcd.Option{etcd.WithTLS(&tls.Config{RootCAs: x509.NewCertPool()}), etcd.WithAuth("u", "p")} {
		if _, err := etcd.NewFromClient(cli, opt); err == nil || !strings.Contains(err.Error(), "configure the client New creates") {
			t.Errorf("NewFromClient with a client option: %v", err)
		}
	}
}
