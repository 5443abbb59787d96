// Package chaos holds the real-server fault run of simba (see
// docs/RELIABILITY.md): client processes, each a simba client with an
// election and a partition group, reach a 3-member etcd cluster or a
// ZooKeeper server through fault-injecting proxies of their own and write
// with their terms' tokens to a fenced register, while a schedule drawn from
// a seed kills them (SIGKILL), pauses them (SIGSTOP/SIGCONT), cuts their
// links and restarts servers. The invariant checkers of internal/check then
// run over what the clients and the register recorded.
//
// Everything is in the package's tests:
//
//	go test -race -v ./internal/chaos/                            # 20s schedule per backend
//	go test -race -v ./internal/chaos/ -chaos.duration=5m         # the long run (make chaos)
//	go test -race -v ./internal/chaos/ -chaos.seed=SEED -run Etcd # replay a schedule
//
// The ZooKeeper run starts a server of its own when ZooKeeper is installed
// (so that it can restart it), or else uses the one named by SIMBA_ZK_ADDR
// without server restarts; without either it skips (fails under
// SIMBA_REQUIRE_SERVERS=1).
package chaos
