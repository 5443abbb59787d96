// Package etcdclient makes etcd clients of the test servers of
// internal/etcdtest for the tests of this module. internal/etcdtest runs
// etcd as a process and imports no etcd package, so that the root module,
// which holds it, requires none; the modules whose tests need a client make
// it with the client they already require.
package etcdclient
