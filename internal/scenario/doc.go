// Package scenario is the test harness that the root package's tests and
// those of tests/core (the same kinds of test on real servers) share: a
// [History] of the terms tasks saw and the events clients published, with
// the invariant checks over it; the partition group scenarios
// ([RunGroupScenarios]), written once and run on every backend through a
// [GroupBackend]; and a [Ledger] of what a task's functions were called
// with, for the tests of one task winning two terms in a row.
//
// It imports no real server's helper (no etcd, PostgreSQL or ZooKeeper
// package): what is backend-specific (a server, the nodes' backends and
// their links) is given by the tests that use it, so that the root module
// requires none of those servers' clients.
package scenario
