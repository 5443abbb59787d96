package fence

import (
	"errors"
	"fmt"
)

var (
	// ErrStale reports a token lower than the highest one recorded for the
	// resource: the writer's term has ended and a later term has written
	// (or, for a check of the lease itself, package sqlfence/pglease: the
	// term no longer holds its lease).
	// Every check that rejects a token returns a [*StaleError], which
	// matches ErrStale; test with errors.Is.
	ErrStale = errors.New("simba/fence: stale token")

	// ErrInvalidArgument reports input a check cannot work with: an unknown
	// SQL dialect, a malformed table name, a token the resource cannot
	// store, a nil transaction or client.
	ErrInvalidArgument = errors.New("simba/fence: invalid argument")
)

// StaleError is the error of a rejected token: a token higher than Token
// was recorded for Resource. It matches [ErrStale].
type StaleError struct {
	// Resource is the name of the fenced resource.
	Resource string
	// Token is the token that was rejected.
	Token uint64
	// Highest is the highest token recorded for Resource when the check
	// ran. For a check of the lease itself (package sqlfence/pglease) it
	// is the lease's last granted token, which is Token itself when the
	// term's session expired and no candidate came after it.
	Highest uint64
}

// Error describes the rejection.
func (e *StaleError) Error() string {
	if e.Highest <= e.Token {
		return fmt.Sprintf("simba/fence: stale token %d for resource %q: the term no longer holds its lease", e.Token, e.Resource)
	}
	return fmt.Sprintf("simba/fence: stale token %d for resource %q: token %d was recorded", e.Token, e.Resource, e.Highest)
}

// Unwrap returns [ErrStale].
func (e *StaleError) Unwrap() error { return ErrStale }

// Invalid returns an error matching [ErrInvalidArgument] that says what was
// wrong (fmt.Sprintf of format and args). The fences of this module and of
// the modules beside it (etcdfence, redisfence, pglease) report bad input
// with it; a fence of another package can too.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}
