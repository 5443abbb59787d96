//go:build simba_plant

package plant

import (
	"fmt"
	"os"
	"sync/atomic"
)

// Enabled reports whether this build can plant bugs (the tag simba_plant).
const Enabled = true

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
