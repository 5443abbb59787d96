// Package backend defines the storage interface that simba's core runs on:
// sessions, named leases with fencing tokens, and group membership.
//
// The user-facing API lives in package simba; this package is for the
// implementations (backend/memory, backend/etcd, backend/zookeeper,
// backend/postgres, backend/kubernetes) and for anyone writing another one,
// with the shared parts in backend/kit and the conformance suite in
// backend/backendtest. Like database/sql/driver, it is small and
// storage-only: it knows nothing of terms, schedules or deadlines. The core
// keeps the safety rules (a term is valid only until the last confirmed
// renewal's send time plus the granted TTL, minus a margin); a backend keeps
// the storage rules written on each method:
//
//   - tokens of one lease name strictly increase, across sessions and restarts;
//   - at most one session holds a lease name at a time;
//   - Release is conditional on the token and never frees a newer holder;
//   - when a session ends, on Close or by expiry, its leases and memberships
//     end with it;
//   - every call that may block honours its ctx and leaves nothing behind when
//     the ctx ends first.
//
// # Errors
//
// [ErrSessionDone], [ErrClosed] and [ErrNotHeld] are returned, possibly
// wrapped, where the methods say so; test them with [errors.Is]. A
// [*MalformedError], found with [errors.As], is returned by
// Records.GetRecord for a stored entry that is not a record the backend
// wrote; retrying does not help. Any other error is transient.
//
// # Reading without a session
//
// A backend that implements [Viewer] gives read-only tools a [View]: the
// reads of Records, SkipReporter, LeaseLister and Session, and their
// watches, without a session, so that they write nothing to the server
// (no etcd lease, no ZooKeeper znode) and need no permission but to read.
// A View survives outages of any length by itself; package admin reads
// through one when the backend has it.
//
// # Conformance
//
// Package backend/backendtest holds the conformance suite every backend runs
// against itself: backendtest.Run(t, factory).
package backend
