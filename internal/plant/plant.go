// Package plant holds the switch for deliberate safety bugs, for tests only:
// the invariant checkers and the tests must catch each bug planted here, or
// they prove nothing. It is internal, so no program outside this module can
// set it; within the module only tests do (simba.PlantBug in the root
// package's tests, and the chaos harness's client processes), and it is
// always None in production.
package plant

import (
	"fmt"
	"os"
	"sync/atomic"
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
	// TrustDBClock: the PostgreSQL backend deletes expired sessions, its
	// own included, by the statement's own clock_timestamp(), trusting
	// the database's wall clock not to step forward (its behaviour before
	// the step guard of backend/postgres/clock.go).
	TrustDBClock
)

// ValidLateBy is how long Term.Valid lies under ValidLate.
const ValidLateBy = 500_000_000 // 500 ms, in nanoseconds

var names = map[string]Bug{
	"deadline-from-reply": DeadlineFromReply,
	"no-margin":           NoMargin,
	"requested-ttl":       RequestedTTL,
	"valid-late":          ValidLate,
	"release-before-exit": ReleaseBeforeExit,
	"deadline-timer-dead": DeadlineTimerDead,
	"trust-db-clock":      TrustDBClock,
}

var current, forRun atomic.Int32

// Is reports whether b is planted.
func Is(b Bug) bool { return Bug(current.Load()) == b }

// Set plants the bug called name ("" plants none) and returns a function
// that puts back the bug planted for the whole run (see ForRun), or none.
func Set(name string) (undo func(), err error) {
	b, err := lookUp(name)
	if err != nil {
		return nil, err
	}
	current.Store(int32(b))
	return func() { current.Store(forRun.Load()) }, nil
}

// EnvVar names the bug that ForRun plants for a whole test run.
const EnvVar = "SIMBA_PLANT"

// ForRun plants the bug named by $SIMBA_PLANT for the whole test run, if
// any: a TestMain calls it before m.Run. It says so on stderr, and ends the
// process with status 2 on an unknown name. With a bug planted, the tests
// that depend on what it breaks must fail with a message, and none may
// hang.
func ForRun() {
	name := os.Getenv(EnvVar)
	if name == "" {
		return
	}
	b, err := lookUp(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", EnvVar, err)
		os.Exit(2)
	}
	forRun.Store(int32(b))
	current.Store(int32(b))
	fmt.Fprintf(os.Stderr, "%s: bug %q planted for the whole run\n", EnvVar, name)
}

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
