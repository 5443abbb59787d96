// Package sigstop pauses a process with SIGSTOP and returns once it is
// paused: every one of its threads stopped.
//
// kill(2) returns when SIGSTOP is pending, not when the process has
// stopped. The kernel wakes one thread to take the signal, and that thread
// stops the others; until it runs, which on a loaded machine can take a
// while, the other threads go on and may answer a request sent "after the
// pause" (a CI run saw a paused kube-apiserver answer one). The test
// harnesses that pause servers (kubetest, zktest, pgtest) pause them with
// Stop, so that what a test sends next finds them stopped.
package sigstop
