// Package proc runs the command of a `simba run` job as a child process
// that can be ended for certain: in a process group of its own, signalled as
// a group at the end of its term, killed when its grace period or its
// term's deadline is up, with nothing it started left behind where the
// platform allows it. [Guarantee] says, in one sentence, what this
// platform guarantees.
//
// It is internal to the simba command; the library never starts processes.
//
// # Linux: a shim per child
//
// [Start] re-executes the running executable (/proc/self/exe) as a shim,
// which must be recognised by a call to [ShimMain] first thing in main (and
// in TestMain of any test package that starts children through proc). ps
// shows the shim as "simba run: COMMAND ARGS", named after the executable
// (a test binary's shims have a -test.run flag too, so that a test binary
// that does not call ShimMain runs no test). The shim
//
//   - runs in a process group of its own, which the command shares, so
//     [Child.Terminate]'s SIGTERM reaches both (the shim does not die of it,
//     nor of SIGHUP, SIGINT, SIGQUIT, SIGUSR2, SIGALRM or SIGPIPE: they are
//     the command's);
//   - is a child subreaper (PR_SET_CHILD_SUBREAPER), so every orphaned
//     descendant of the command is reparented to it rather than to init,
//     and it reaps them all;
//   - once the command has exited, on a kill request ([Child.Kill], which
//     sends it SIGUSR1), or when its parent dies (a Pdeathsig of SIGUSR1,
//     and end of file on a pipe the parent holds), sends SIGKILL to every
//     process below it and every other member of its group, found by a walk
//     of /proc (so processes that left the group with setsid and a double
//     fork are found too), again until none is left, then exits with the
//     command's status: the same exit code, or the same signal raised on
//     itself. It gives up after five seconds of this (only processes it may
//     not signal can live that long), says so on stderr, and exits all the
//     same;
//   - gives the command a Pdeathsig of SIGKILL, so that the command dies if
//     the shim is killed.
//
// The shim reports on a pipe whether the command could be executed, so
// [Start] returns a *[StartError] for an exec failure at once. The shims
// are forked from one goroutine locked to its own thread, because a
// Pdeathsig fires when the thread that forked exits, not the process.
//
// The cost, measured with the simba binary: some 30 ms from Start to the
// command's first output (the binary's start-up) against about 1 ms for a
// direct fork and exec, and a resident set of some 45 MB per shim, of which
// about 6 MB are its own and the rest the executable's pages, shared with
// simba run.
//
// # Other unix systems
//
// No shim: the command runs in a process group of its own, which is
// signalled as a whole. A process that leaves the group survives it, and a
// `simba run` killed with SIGKILL leaves its command running.
//
// # Other systems
//
// [Start] returns an error: `simba run` is not supported there.
package proc
