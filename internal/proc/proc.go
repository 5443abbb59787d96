package proc

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Spec says what to run.
type Spec struct {
	// Argv is the command and its arguments; Argv[0] is looked up in $PATH
	// when it holds no slash.
	Argv []string
	// Env is the child's whole environment (nil: none).
	Env []string
	// Dir is the working directory ("": this process's).
	Dir string
	// Stdout and Stderr receive the child's output (nil: discarded).
	Stdout, Stderr io.Writer
}

// Exit is how a child ended.
type Exit struct {
	// Code is the exit status, or -1 when a signal ended the child.
	Code int
	// Signal is the signal that ended the child, or 0.
	Signal syscall.Signal
}

// Err returns nil for exit status 0 and an [*ExitError] otherwise.
func (e Exit) Err() error {
	if e.Code == 0 && e.Signal == 0 {
		return nil
	}
	return &ExitError{Exit: e}
}

func (e Exit) String() string {
	if e.Signal != 0 {
		return "killed by signal " + signalName(e.Signal)
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// ExitError is a child that did not exit with status 0.
type ExitError struct{ Exit }

func (e *ExitError) Error() string { return e.Exit.String() }

// ExitCode is the exit status, or -1 when a signal ended the child (the
// method the library's run history looks for).
func (e *ExitError) ExitCode() int { return e.Code }

// StartError is a command that could not be started.
type StartError struct {
	// Path is the command as given (Argv[0]).
	Path string
	// Err is the reason, such as [exec.ErrNotFound] or a [syscall.Errno].
	Err error
}

func (e *StartError) Error() string { return fmt.Sprintf("cannot run %s: %v", e.Path, e.Err) }
func (e *StartError) Unwrap() error { return e.Err }

// Check reports whether argv names a command that can be started: one
// clear error for bad input, before any lease is taken.
func Check(argv []string) error {
	_, err := lookPath(argv)
	return err
}

// lookPath is the file argv[0] names, or why there is none.
func lookPath(argv []string) (string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return "", errors.New("no command given")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return "", &StartError{Path: argv[0], Err: cause(err)}
	}
	return path, nil
}

// cause is the reason of a LookPath error, without its repetition of the
// name.
func cause(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// Child is a started command. Its methods may be called from any goroutine.
type Child struct {
	cmd    *exec.Cmd
	pgid   int
	cmdPid int // the command's process ID
	done   chan struct{}
	sys    childSys // what the platform keeps

	mu   sync.Mutex
	exit Exit
}

// wait reaps the child (on Linux, the shim, whose status is the command's),
// closes Done, and lets the platform clean up.
func (c *Child) wait() {
	_ = c.cmd.Wait() // the status says it
	e := Exit{Code: c.cmd.ProcessState.ExitCode()}
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e = Exit{Code: -1, Signal: ws.Signal()}
	}
	c.reaped()
	c.mu.Lock()
	c.exit = e
	c.mu.Unlock()
	close(c.done)
}

// Pid is the child's process ID, which is also its process group's. On
// Linux it is the shim's (see the package doc); the command is the shim's
// child in the same group.
func (c *Child) Pid() int { return c.pgid }

// CommandPid is the command's own process ID: on Linux the shim's child,
// elsewhere [Child.Pid].
func (c *Child) CommandPid() int {
	if c.cmdPid != 0 {
		return c.cmdPid
	}
	return c.pgid
}

// Done is closed once the child has exited and been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Exit is how the child ended; valid once Done is closed. On Linux it is
// the command's own status, passed on by the shim.
func (c *Child) Exit() Exit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exit
}

// Terminate sends SIGTERM to the child's process group. It returns at
// once; the child may trap or ignore the signal.
func (c *Child) Terminate() {
	select {
	case <-c.done: // its process group ID may be another's by now
	default:
		c.killGroup(syscall.SIGTERM)
	}
}

// Stop ends the child: SIGTERM to its process group at once, [Child.Kill]
// at killAt (at once if it has passed), and returns how it ended once it is
// gone. On Linux it returns within about three seconds of killAt whatever
// the child does: Kill's two, and one for the output pipes.
func (c *Child) Stop(killAt time.Time) Exit {
	c.Terminate()
	t := time.NewTimer(time.Until(killAt))
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.Kill()
		<-c.done
	}
	return c.Exit()
}
