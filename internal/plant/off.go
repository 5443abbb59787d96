//go:build !simba_plant

package plant

import (
	"errors"
	"fmt"
	"os"
)

// Enabled reports whether this build can plant bugs (the tag simba_plant).
const Enabled = false

// Is reports whether b is planted: never, in this build. The call is
// inlined to false, and the code it guards is removed.
func Is(Bug) bool { return false }

var errNotBuilt = errors.New("plant: built without -tags simba_plant, so no bug can be planted (make test builds with it)")

// Set refuses: this build cannot plant bugs.
func Set(name string) (undo func(), err error) {
	if _, err := lookUp(name); err != nil {
		return nil, err
	}
	if name == "" {
		return func() {}, nil
	}
	return nil, errNotBuilt
}

// ForRun refuses a $SIMBA_PLANT: it says why on stderr and ends the process
// with status 2, so that a run meant to have a bug planted does not pass
// without it.
func ForRun() {
	if name := os.Getenv(EnvVar); name != "" {
		fmt.Fprintf(os.Stderr, "%s=%s: %v\n", EnvVar, name, errNotBuilt)
		os.Exit(2)
	}
}
