// Package etcdbench holds, in its tests, the measurements of simba on etcd
// (docs/bench-etcd.md): TestBenchmarkReport, simba side by side with etcd's
// own concurrency.Election (the graceful hand-off, the blackholed holder,
// the requests at rest), and TestScale and TestScaleWaiting, what held and
// waiting leases cost one client. They use the backend's exported API
// only, and run when asked to, from the tests module's directory:
//
//	cd tests && SIMBA_ETCD_BENCH=1 go test -run '^TestBenchmarkReport$' -v -count=1 -timeout 30m ./bench/etcd/
//	cd tests && SIMBA_ETCD_SCALE=1 go test -run '^TestScale$' -v -count=1 -timeout 30m ./bench/etcd/
//
// Without $SIMBA_ETCD_BENCH or $SIMBA_ETCD_SCALE every test skips.
package etcdbench
