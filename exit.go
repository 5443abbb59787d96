package simba

import (
	"errors"
	"fmt"
)

// Exited is what a task function that ran a command returns to report how
// the command ended, so that the run history records its exit status
// (field exitCode of the run, shown by the simba command and the console):
//
//   - Exited(0) is a success: the run is a run that returned nil in every
//     way ([Succeeded], a nil [WorkCompleted.Err], the schedule goes on),
//     and its record has exit code 0. Only the value itself counts so:
//     wrapped in another error, it is an error like any other.
//   - Exited(code) for another code is an error ("exit status 3") with a
//     method ExitCode() int that returns code: the run is [Failed]
//     ([Cancelled] when the term had already ended), as with any error.
//     A negative code stands for a command ended by a signal, as
//     [os.ProcessState.ExitCode] reports it ("killed by a signal").
//
// Any error a run returns that has, or wraps an error that has, a method
// ExitCode() int returning a code of 0 or more has that code recorded,
// Exited's errors as well as an [*os/exec.ExitError]. A nil return records
// no exit status: the library cannot tell a command's success from that
// of any other function, hence Exited(0).
func Exited(code int) error {
	if code == 0 {
		return exitedZero
	}
	return &exitStatus{code: code}
}

// exitStatus is an error made by [Exited].
type exitStatus struct{ code int }

// exitedZero is Exited(0): one value, recognised by identity.
var exitedZero error = &exitStatus{}

func (e *exitStatus) Error() string {
	if e.code < 0 {
		return "killed by a signal"
	}
	return fmt.Sprintf("exit status %d", e.code)
}

// ExitCode returns the code given to [Exited].
func (e *exitStatus) ExitCode() int { return e.code }

// exitCodeOf returns the exit status that err, or an error it wraps,
// reports with a method ExitCode() int; nil for none, or for a negative
// code (a signal ended the command).
func exitCodeOf(err error) *int {
	var e interface{ ExitCode() int }
	if !errors.As(err, &e) {
		return nil
	}
	code := e.ExitCode()
	if code < 0 {
		return nil
	}
	return &code
}
