// Package zookeeperbench holds, in its tests, the measurements of simba on
// ZooKeeper (docs/bench-zookeeper.md): TestBenchmarkZooKeeper, simba side
// by side with two go-zookeeper recipes (a plain ephemeral-node election
// and the sequential-node recipe of Curator's LeaderLatch): the graceful
// hand-off, the blackholed holder, and simba's fail-over after a SIGKILL.
// They use the backend's exported API only, and run when asked to, from
// the tests module's directory:
//
//	cd tests && SIMBA_ZK_BENCH=1 ../scripts/with-zookeeper.sh go test -run '^TestBenchmarkZooKeeper$' -v -count=1 -timeout 30m ./bench/zookeeper/
//
// Without $SIMBA_ZK_BENCH every test skips.
package zookeeperbench
