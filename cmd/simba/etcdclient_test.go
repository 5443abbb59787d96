package main

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/simba-go/simba/internal/etcdtest"
)

// newEtcdClient returns a client of srv, closed when the test ends: its
// endpoints, its TLS configuration when it serves TLS and, once
// authentication is on, the root user (as tests/internal/etcdclient makes
// it for the tests module), with logging discarded.
func newEtcdClient(t testing.TB, srv *etcdtest.Server) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop(), TLS: srv.ClientTLS()}
	cfg.Username, cfg.Password = srv.Root()
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
