// Package mypeers holds the two MySQL/MariaDB leader electors that the
// benchmarks of backend/mysql (tests/bench/mysql) compare simba with, each
// written the way the tools teams use on MySQL today do it: only tests
// import it, and nothing here is a recommendation. They stand behind the
// same interface as the PostgreSQL peers (tests/internal/pgpeers): Run,
// Resign, and each spell of leadership reported as a [Leadership].
//
//   - [GetLock] is the named-lock elector of Go libraries such as
//     sanketplus/go-mysql-lock: a dedicated connection blocks in
//     GET_LOCK(name, wait) (or tries GET_LOCK(name, 0) every interval);
//     the holder leads while that connection lives, pinging it every
//     interval, and stops believing it leads when a ping fails (or on
//     Resign, which runs RELEASE_LOCK). The server frees the lock when the
//     connection ends, whether or not the holder has noticed yet.
//   - [LockTable] is the lock-table elector of ShedLock's JDBC provider
//     with the database's time: a row per name, taken by INSERT (the
//     first time) or by UPDATE … SET lock_until = NOW(3) + ttl, locked_by
//     = me WHERE name = ? AND lock_until <= NOW(3); the holder extends it
//     every interval while it is still its own and unexpired, and a
//     contender that does not hold it tries again every retry interval
//     (nothing wakes it). Unlocking sets lock_until to NOW(3).
//
// Neither has a token: what a deposed leader writes after a new one
// started is not fenced.
//
// [Leadership] is this package's own, of the same shape as pgpeers': the
// constructor of pgpeers' is not exported.
package mypeers
