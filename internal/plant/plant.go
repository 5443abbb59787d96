// Package plant holds the switch for deliberate safety bugs, for tests only:
// the invariant checkers and the tests must catch each bug planted here, or
// they prove nothing.
//
// The switch exists only in a build with the tag simba_plant (make test and
// make chaos build with it). In the default build, the one users get, [Is]
// is a constant false that the compiler removes with the code it guards,
// [Set] and [ForTest] refuse, and [ForRun] refuses a $SIMBA_PLANT. Within
// the repository only tests plant bugs ([ForTest] in the packages' tests,
// the chaos harness's client processes).
package plant

import (
	"fmt"
	"os"
	"testing"
)

// Bug is one deliberate safety bug.
type Bug int32

const (
	// None plants nothing.
	None Bug = iota
	// DeadlineFromReply measures the session deadline from the reply to a
	// renewal instead of from its request.
	DeadlineFromReply
	// NoMargin drops the drift margin.
	NoMargin
	// RequestedTTL uses the requested TTL instead of the granted one.
	RequestedTTL
	// ValidLate makes Term.Valid report true for 500 ms after the term
	// ended; nothing else of the term changes.
	ValidLate
	// ReleaseBeforeExit releases a stopped term's lease at once, without
	// waiting for the run to exit: the hand-off order reversed.
	ReleaseBeforeExit
	// DeadlineTimerDead: the session's deadline timer never ends the
	// session, so a term whose renewals stop is never revoked (Valid
	// turns false, but Revoked never closes and the run's ctx is never
	// cancelled).
	DeadlineTimerDead
	// TrustDBClock: the PostgreSQL and MySQL backends delete expired
	// sessions, their own included, by the statement's own clock
	// (clock_timestamp(), UTC_TIMESTAMP), trusting the database's wall
	// clock not to step forward (PostgreSQL's behaviour before the step
	// guard of backend/kit/dbclock).
	TrustDBClock
	// EtcdTrustRevision: the etcd backend trusts every response it gets,
	// without checking that the cluster's revision never goes below one it
	// saw nor its cluster ID changes (a cluster restored from a backup
	// without --bump-revision hands out smaller tokens then).
	EtcdTrustRevision
	// UntimedTokens: the PostgreSQL backend's tokens, session ids and
	// record versions are not qualified by the server's timeline (its
	// behaviour before backend/postgres/timeline.go), nor the MySQL
	// backend's tokens and record versions by its epoch
	// (backend/mysql/epoch.go): a failover to a standby or replica that
	// missed the last commits hands them out again.
	UntimedTokens
	// KeepChainOnFailover: the PostgreSQL and MySQL backends' chain of
	// clock samples runs straight through a change of server, and grants
	// are not held back after one (see backend/postgres/timeline.go,
	// backend/mysql/epoch.go).
	KeepChainOnFailover
	// KeepAsyncRelease: the PostgreSQL backend's renewals no longer
	// withdraw again the candidacies the session released without waiting
	// for the release's WAL flush (synchronous_commit off for that
	// transaction), so a server crash that loses such a release leaves
	// the candidacy ahead of the queue behind a session that does not
	// know it holds it, for as long as that session lives.
	KeepAsyncRelease
)

// ValidLateBy is how long Term.Valid lies under ValidLate.
const ValidLateBy = 500_000_000 // 500 ms, in nanoseconds

var names = map[string]Bug{
	"deadline-from-reply":    DeadlineFromReply,
	"no-margin":              NoMargin,
	"requested-ttl":          RequestedTTL,
	"valid-late":             ValidLate,
	"release-before-exit":    ReleaseBeforeExit,
	"deadline-timer-dead":    DeadlineTimerDead,
	"trust-db-clock":         TrustDBClock,
	"etcd-trust-revision":    EtcdTrustRevision,
	"untimed-tokens":         UntimedTokens,
	"keep-chain-on-failover": KeepChainOnFailover,
	"keep-async-release":     KeepAsyncRelease,
}

// EnvVar names the bug that ForRun plants for a whole test run.
const EnvVar = "SIMBA_PLANT"

func lookUp(name string) (Bug, error) {
	if name == "" {
		return None, nil
	}
	b, ok := names[name]
	if !ok {
		return None, fmt.Errorf("plant: unknown planted bug %q", name)
	}
	return b, nil
}

// Require skips t, saying how to run it, in a build that cannot plant the
// bug called name (one without the tag simba_plant), or fails it there when
// $SIMBA_REQUIRE_SERVERS is 1 (CI, where every test must run). A test that
// has other processes plant the bug (the chaos harness) calls it.
func Require(t testing.TB, name string) {
	t.Helper()
	if Enabled {
		return
	}
	if os.Getenv("SIMBA_REQUIRE_SERVERS") == "1" {
		t.Fatalf("plant: this test plants the bug %q, which needs a build with -tags simba_plant (make test builds with it)", name)
	}
	t.Skipf("plant: this test plants the bug %q: run it with go test -tags simba_plant (make test does)", name)
}

// ForTest plants the bug called name for the test t, and puts back the bug
// planted for the run (see [ForRun]) when t ends. Tests that plant bugs must
// not run in parallel. In a build without the tag simba_plant it skips t,
// saying how to run it, or fails it when $SIMBA_REQUIRE_SERVERS is 1 (CI,
// where every test must run).
func ForTest(t testing.TB, name string) {
	t.Helper()
	Require(t, name)
	undo, err := Set(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(undo)
}
