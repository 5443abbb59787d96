// Package mysqlbench holds, in its tests, the measurements of simba on
// MySQL and MariaDB (docs/BENCHMARKS.md, "MySQL"): TestBenchmarkReport,
// simba side by side with the peers teams use today
// (tests/internal/mypeers: a GET_LOCK elector and a ShedLock-style lock
// table): the graceful hand-off, and overlap and fail-over when the
// holder's link is cut, when the server kills its connections and when it
// crashes. It uses the backend's exported API only, and runs when asked
// to, from the tests module's directory:
//
//	cd tests && ../scripts/with-mariadb.sh env SIMBA_MYSQL_BENCH=1 \
//		go test -run '^TestBenchmarkReport$' -v -count=1 -timeout 40m ./bench/mysql/
//
// Without $SIMBA_MYSQL_BENCH every test skips.
package mysqlbench
