// Package pgpeers holds the two PostgreSQL leader electors that the
// benchmarks of backend/postgres (bench_test.go) compare simba with, each
// written the way the projects that teams use today do it: only tests
// import it, and nothing here is a recommendation.
//
//   - [AdvisoryLock] is the advisory-lock elector of pglock/ShedLock-style
//     libraries: pg_try_advisory_lock on a dedicated connection, retried
//     every interval by those that do not hold it; the holder leads while
//     its connection lives, and stops believing it leads when a ping on
//     that connection fails. The server frees the lock when the
//     connection ends, whether or not the holder has noticed yet.
//   - [LeaderTable] is the leader-table elector modelled on river's
//     (riverqueue/river, internal/leadership): a row (name, leader_id,
//     elected_at, expires_at) taken with INSERT … ON CONFLICT DO NOTHING
//     once the old row has expired by the database's clock, extended by
//     the leader every interval, given up with a DELETE and a NOTIFY that
//     wakes the waiters at once. See [LeaderTable] for what was kept of
//     river's elector and what was scaled.
//
// Both report each spell of leadership as a [Leadership]: when the elector
// learned it leads, and when it stopped believing so. Neither has a token:
// what a deposed leader writes after a new one started is not fenced.
package pgpeers
