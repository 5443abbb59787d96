// Package core holds the tests of the root package (github.com/simba-go/simba)
// that need real servers: the partition group scenarios of
// internal/scenario on etcd, PostgreSQL and ZooKeeper, with the group
// benchmark; Client.Shutdown's hand-off on etcd; and the same task winning
// two terms in a row on etcd and PostgreSQL. They live in the tests module
// so that the root module requires none of those servers' clients; the
// root package's tests run on the memory backend only. The package has no
// code of its own, only tests.
package core
