package simba

import "errors"

// exitCodeOf returns the exit status that err, or an error it wraps,
// reports with a method ExitCode() int; nil for none, or for a negative
// code (a signal ended the command). A code of 0 makes the run a success
// (see "Exit codes" in the package doc), so it counts only when err wraps
// it through a chain of Unwrap() error methods: a code of 0 inside a
// joined error (Unwrap() []error) reports none, and never turns the
// failure joined to it into a success.
func exitCodeOf(err error) *int {
	var e interface {
		error
		ExitCode() int
	}
	if !errors.As(err, &e) {
		return nil
	}
	code := e.ExitCode()
	if code < 0 || code == 0 && !inChain(err, e) {
		return nil
	}
	return &code
}

// inChain reports whether target is err or an error err wraps through
// Unwrap() error methods only.
func inChain(err, target error) bool {
	for err != nil {
		if err == target {
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}
