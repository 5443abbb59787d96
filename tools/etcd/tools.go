//go:build tools

// Package tools pins the etcd server that the tests of the etcd backend, and
// every test that needs an etcd, run as a process of its own
// (internal/etcdtest), and the etcdutl that internal/etcdtest restores
// snapshots with (built the same way, from go.etcd.io/etcd/etcdutl/v3). It is a module of its own, not in go.work, so that no
// simba module requires etcd's server: scripts/with-etcd.sh builds it (and
// internal/etcdtest, the same way, when a test runs without SIMBA_ETCD_BIN) with
//
//	GOWORK=off go build -o BINARY go.etcd.io/etcd/server/v3
//
// run in this directory. To move to another etcd release, change the version
// in go.mod and run GOWORK=off go mod tidy here.
package tools

import (
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
