package etcdclient

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/simba-go/simba/internal/etcdtest"
)

// Config returns a client configuration for srv's endpoints, with logging
// discarded, its TLS configuration when it serves TLS
// ([etcdtest.Server.ClientTLS]) and, once authentication is on, the root
// user's credentials.
func Config(srv *etcdtest.Server) clientv3.Config {
	cfg := clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop(), TLS: srv.ClientTLS()}
	cfg.Username, cfg.Password = srv.Root()
	return cfg
}

// New returns a client of srv made with [Config], closed when the test
// ends. It stops the test if the client cannot be made.
func New(tb testing.TB, srv *etcdtest.Server) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(Config(srv))
	if err != nil {
		tb.Fatalf("etcdclient: %v", err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}
