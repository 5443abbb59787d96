//go:build unix && !linux

package proc

import (
	"os/exec"
	"syscall"
	"time"
)

// guarantee is what this platform promises; see [Guarantee].
const guarantee = "The command runs in a process group of its own, which is signalled as a " +
	"whole (SIGTERM at the end of its term, SIGKILL at its kill time and once the command has " +
	"exited); a process that leaves that group (setsid, setpgid) survives it, and if simba run " +
	"itself is killed with SIGKILL the command and its group keep running."

// ShimMain does nothing on this platform: there is no shim. It is safe to
// call first in main everywhere.
func ShimMain() {}

type childSys struct{}

// Start starts the command of s in a process group of its own.
func Start(s Spec) (*Child, error) {
	path, err := lookPath(s.Argv)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: s.Argv, Env: s.Env, Dir: s.Dir, Stdout: s.Stdout, Stderr: s.Stderr}
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A grandchild that keeps an output pipe open must not hold Wait up
	// once the child is gone.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, &StartError{Path: s.Argv[0], Err: cause(err)}
	}
	c := &Child{cmd: cmd, pgid: cmd.Process.Pid, done: make(chan struct{})}
	go c.wait()
	return c, nil
}

// reaped kills whatever the child left behind in its group.
func (c *Child) reaped() { c.killGroup(syscall.SIGKILL) }

// Kill sends SIGKILL to the child's process group.
func (c *Child) Kill() {
	select {
	case <-c.done:
	default:
		c.killGroup(syscall.SIGKILL)
	}
}
