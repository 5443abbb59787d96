package simba

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. They may be wrapped; test them with [errors.Is].
var (
	// ErrTermExpired reports that a term is over, or would be over before an
	// expected step could finish. Returned by [Term.EnsureValid] and matched
	// by every [Term.EnsureValid].
	ErrTermExpired = errors.New("simba: term expired")

	// ErrAlreadyStarted is returned by RunWhileLeader and Schedule when the
	// election is already started on this client. Once its task has completed
	// (see [LeaderTask.Done]) the election may be started again.
	ErrAlreadyStarted = errors.New("simba: election already started on this client")

	// ErrClosed is returned when starting work on a client that is closing or
	// closed.
	ErrClosed = errors.New("simba: client closed")

	// ErrYield, returned (possibly wrapped) by a run, ends the run's loop and
	// makes the election give up its lease and sit out one lease term before
	// contending again: "this node should not lead now".
	ErrYield = errors.New("simba: yield leadership")

	// ErrInvalidSchedule reports a schedule that cannot run: a non-positive
	// period, a negative initial delay, a malformed cron expression.
	ErrInvalidSchedule = errors.New("simba: invalid schedule")

	// ErrInvalidArgument reports any other bad input: a nil function, a bad
	// option value.
	ErrInvalidArgument = errors.New("simba: invalid argument")
)

// TermError is the error of a term that has ended: [Term.EnsureValid] returns one
// after revocation. It matches [ErrTermExpired] and, when set, Cause.
type TermError struct {
	// Name is the lease name of the term's election.
	Name string
	// Token is the term's fencing token.
	Token uint64
	// Reason says why the term ended.
	Reason RevokeReason
	// Cause is the underlying error, if any (for example the backend's
	// report that the session is gone).
	Cause error
}

// Error describes the term and why it ended.
func (e *TermError) Error() string {
	msg := fmt.Sprintf("simba: term %d of %q ended: %s", e.Token, e.Name, e.Reason)
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap returns [ErrTermExpired] and Cause.
func (e *TermError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrTermExpired}
	}
	return []error{ErrTermExpired, e.Cause}
}

// PanicError is the error recorded when a task function panics. The panic is
// recovered: it fails the run, never the election.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error reports the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("simba: task panicked: %v", e.Value) }

// RevokeReason says why a term ended.
type RevokeReason int

// Reasons for the end of a term.
const (
	// RevokeStopped: the task was stopped with [LeaderTask.Stop] or Close.
	RevokeStopped RevokeReason = iota + 1
	// RevokeClosed: the client was closed.
	RevokeClosed
	// RevokeYielded: a run returned an error wrapping [ErrYield].
	RevokeYielded
	// RevokeDeadline: no renewal was confirmed before the session deadline,
	// so the term ended on this process's own clock, without waiting for the
	// backend.
	RevokeDeadline
	// RevokeSessionLost: the backend reported the session over.
	RevokeSessionLost
	// RevokeLeaseLost: the backend reported the lease no longer held by this
	// session (deleted or taken over).
	RevokeLeaseLost
	// RevokeDisabled: an operator disabled the election, job or group; it
	// runs nothing anywhere until enabled.
	RevokeDisabled
	// RevokeResigned: an operator asked the holder to hand off; it sits
	// out one lease term, so another member takes over.
	RevokeResigned
	// RevokeDrained: an operator drained this member; it contends for
	// nothing until undrained.
	RevokeDrained
	// RevokePaused: the job paused itself after failed runs in a row
	// ([Schedule.WithPauseAfter]): it disabled its lease, and runs nothing
	// anywhere until an operator enables it.
	RevokePaused
	// RevokeStuck: the task reported no progress within its watchdog's
	// limit ([WithProgressWatchdog]); it gave the term up and sits out one
	// lease term, so another member takes over.
	RevokeStuck

	lastRevokeReason = RevokeStuck
)

// String describes the reason in a few words.
func (r RevokeReason) String() string {
	switch r {
	case RevokeStopped:
		return "stopped"
	case RevokeClosed:
		return "client closed"
	case RevokeYielded:
		return "yielded"
	case RevokeDeadline:
		return "renewal deadline passed"
	case RevokeSessionLost:
		return "session lost"
	case RevokeLeaseLost:
		return "lease lost"
	case RevokeDisabled:
		return "disabled"
	case RevokeResigned:
		return "resigned"
	case RevokeDrained:
		return "member drained"
	case RevokePaused:
		return "paused after failures"
	case RevokeStuck:
		return "no progress"
	}
	return fmt.Sprintf("RevokeReason(%d)", int(r))
}

// errStepTooLong builds the error of EnsureValid for a step that would outlive
// the term.
func errStepTooLong(name string, token uint64, left, step time.Duration) error {
	return fmt.Errorf("%w: term %d of %q has %v left, the step needs %v", ErrTermExpired, token, name, left, step)
}
