// Package proc runs the command of a `simba run` job as a child process
// that can be ended for certain: in a process group of its own, signalled as
// a group at the end of its term, killed when its grace period or its
// term's deadline is up, with nothing it started left behind.
//
// It is internal to the simba command; the library never starts processes.
package proc
