// Package postgresbench holds, in its tests, the measurements of simba on
// PostgreSQL (docs/bench-postgres.md): TestBenchmarkReport, simba side by
// side with the peers teams use today (tests/internal/pgpeers: an
// advisory-lock elector and a leader-table elector modelled on river's):
// the graceful hand-off, the same on a server of its own that commits
// durably against an advisory lock whose waiter blocks (section durable),
// and overlap and fail-over when the holder's link is cut, when the
// server ends its connections and when it crashes. It
// uses the backend's exported API only, and runs when asked to, from the
// tests module's directory:
//
//	cd tests && ../scripts/with-postgres-redis.sh env SIMBA_PG_BENCH=1 \
//		go test -run '^TestBenchmarkReport$' -v -count=1 -timeout 30m ./bench/postgres/
//
// Without $SIMBA_PG_BENCH every test skips.
package postgresbench
