//go:build tools

// Package tools pins the etcd server that the tests of the etcd backend, and
// every test that needs an etcd, run as a process of its own
// (internal/etcdtest). It is a module of its own so that no simba library
// module requires etcd's server: only scripts/with-etcd.sh builds it, with
//
//	go build -o BINARY go.etcd.io/etcd/server/v3
//
// run in this directory. To move to another etcd release, change the version
// in go.mod and run go mod tidy here.
package tools

import _ "go.etcd.io/etcd/server/v3"
