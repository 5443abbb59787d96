package proc

import (
	"os/exec"
	"syscall"
)

// StartTied starts cmd with a parent-death signal (SIGKILL), so that it
// dies with this process (a panic, go test's timeout) rather than linger
// on its ports, and returns the function to call once cmd has been reaped.
// The test servers (internal/etcdtest) start with it.
//
// The kernel sends a parent-death signal when the thread that forked the
// child exits, not the process, and Go ends a thread when a goroutine
// locked to it exits (as the shims' forker does, and any code that locks a
// thread may): so cmd is started from the forker's thread, as the shims
// are, which exits only once everything it started has been reaped.
func StartTied(cmd *exec.Cmd) (reaped func(), _ error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	f := acquireForker()
	if err := f.do(cmd.Start); err != nil {
		releaseForker(f)
		return nil, err
	}
	return func() { releaseForker(f) }, nil
}
