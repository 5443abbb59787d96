package proc

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// guarantee is what this platform promises; see [Guarantee].
const guarantee = "When the command exits, is stopped at the end of its term, or simba run " +
	"dies (even by SIGKILL), every process the command started, directly or not, is killed " +
	"with SIGKILL, including those that left its process group (setsid, double fork); only a " +
	"process simba run's user may not signal, or one below a shim that another process " +
	"killed with SIGKILL, can survive."

// The shim's protocol: the shim is this executable, started with shimArg0
// as its argv[0] (and, in a test binary, guardArg after it: see shimArgs)
// and shimEnv=1 in its environment (see shimEnviron), with fd 3 reading
// the spec and fd 4 writing the result.
const (
	shimEnv = "SIMBA_PROC_SHIM"
	// shimArg0 is the shim's argv[0]. The command's argv follows it, so
	// that ps shows the shim as "simba run: sh -c ...": what it is, and
	// what it runs.
	shimArg0 = "simba run:"
	// guardArg makes a test binary whose TestMain forgets to call
	// ShimMain run no test (rather than all of them again, recursively).
	// Only a test binary is given it.
	guardArg = "-test.run=^$"
	// killSignal is the kill request to the shim, and its Pdeathsig.
	killSignal = syscall.SIGUSR1
	// killBound is how long Kill waits for the shim before it sends
	// SIGKILL to the group itself.
	killBound = 2 * time.Second
	// handshakeBound bounds the shim's start, up to its report that the
	// command runs (or could not be executed).
	handshakeBound = 10 * time.Second
)

// shimSpec is what the shim is told, as JSON on fd 3. The parent keeps fd 3
// open while the shim runs: end of file is the parent's death.
type shimSpec struct {
	Path   string   // the file to execute, as looked up by the parent
	Argv   []string // the command's argv
	Env    []string // the command's whole environment
	Parent int      // the parent's pid, to check getppid against
}

// shimResult is what the shim reports, as JSON on fd 4, once it has started
// the command or failed to.
type shimResult struct {
	Pid   int    `json:",omitempty"` // the command's pid
	Errno int    `json:",omitempty"` // why it could not be executed
	Err   string `json:",omitempty"` // the same, in words
}

// shimArgs is the shim's argv for the command argv: shimArg0 and argv, as
// ps shows them. In a test binary the guard comes first, and "--" so that
// the test flags end before the command's arguments.
func shimArgs(argv []string, testBinary bool) []string {
	if testBinary {
		return append([]string{shimArg0, guardArg, "--"}, argv...)
	}
	return append([]string{shimArg0}, argv...)
}

// isTestBinary reports whether this executable is a Go test binary: one
// registers its -test.* flags on flag.CommandLine before any test or
// TestMain runs. A production binary shows no test flag in its shims'
// argv.
func isTestBinary() bool { return flag.Lookup("test.run") != nil }

// shimPath is the shim's executable: this one, even if its file was
// replaced since it started.
var shimPath = "/proc/self/exe"

// shimEnviron is the shim's whole environment: the marker, and the race
// detector's options if this process has any (a race-enabled binary
// otherwise sleeps a second at exit).
func shimEnviron() []string {
	env := []string{shimEnv + "=1"}
	if v, ok := os.LookupEnv("GORACE"); ok {
		env = append(env, "GORACE="+v)
	}
	return env
}

type childSys struct {
	spec   *os.File // the write end of the shim's fd 3, open while it runs
	forker *forker

	mu       sync.Mutex
	fallback *time.Timer // Kill's SIGKILL to the group, if armed
}

// Start starts the command of s under a shim of its own: the shim is this
// executable re-executed (it must call [ShimMain] first in main), in a
// process group of its own, a child subreaper whose only child is the
// command. Start returns once the command runs, or a *[StartError] if it
// could not be executed.
func Start(s Spec) (*Child, error) {
	path, err := lookPath(s.Argv)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Child, error) { return nil, &StartError{Path: s.Argv[0], Err: err} }
	specR, specW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	resR, resW, err := os.Pipe()
	if err != nil {
		specR.Close()
		specW.Close()
		return fail(err)
	}
	defer resR.Close()
	cmd := &exec.Cmd{
		Path:   shimPath,
		Args:   shimArgs(s.Argv, isTestBinary()),
		Env:    shimEnviron(),
		Dir:    s.Dir,
		Stdout: s.Stdout, Stderr: s.Stderr,
		ExtraFiles: []*os.File{specR, resW},
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid: true,
			// The death of the thread that forks is what the kernel
			// sees; the forker's thread lives as long as the shims it
			// started.
			Pdeathsig: killSignal,
		},
		// Every holder of the output pipes is dead when the shim exits;
		// this bounds Wait all the same.
		WaitDelay: time.Second,
	}
	f := acquireForker()
	err = f.do(cmd.Start)
	specR.Close()
	resW.Close()
	if err != nil {
		releaseForker(f)
		specW.Close()
		return fail(cause(err))
	}
	c := &Child{cmd: cmd, pgid: cmd.Process.Pid, done: make(chan struct{}), sys: childSys{spec: specW, forker: f}}
	sp := shimSpec{Path: path, Argv: s.Argv, Env: s.Env, Parent: os.Getpid()}
	pid, err := handshake(specW, resR, sp)
	if err != nil {
		// The shim is not yet reaped, so its group ID is still its own.
		c.killGroup(syscall.SIGKILL)
		c.wait()
		return fail(err)
	}
	c.cmdPid = pid
	go c.wait()
	return c, nil
}

// handshake sends the shim its spec and reads its result: the command's
// pid.
func handshake(spec, res *os.File, sp shimSpec) (int, error) {
	deadline := time.Now().Add(handshakeBound)
	_ = spec.SetWriteDeadline(deadline)
	_ = res.SetReadDeadline(deadline)
	werr := json.NewEncoder(spec).Encode(sp) // EPIPE if the shim is gone: its result says why
	var r shimResult
	if err := json.NewDecoder(res).Decode(&r); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("the shim exited before starting it (is proc.ShimMain called first in main?)")
		}
		if werr != nil {
			err = fmt.Errorf("%w; sending the shim its spec: %v", err, werr)
		}
		return 0, err
	}
	if r.Errno != 0 {
		return 0, syscall.Errno(r.Errno)
	}
	if r.Err != "" {
		return 0, errors.New(r.Err)
	}
	return r.Pid, nil
}

// reaped lets go of what the child held and kills whatever may be left in
// its group: nothing, unless the shim itself was killed with SIGKILL.
func (c *Child) reaped() {
	c.sys.mu.Lock()
	if c.sys.fallback != nil {
		c.sys.fallback.Stop()
	}
	c.sys.mu.Unlock()
	c.killGroup(syscall.SIGKILL)
	c.sys.spec.Close()
	releaseForker(c.sys.forker)
}

// Kill asks the shim to kill the command and every process below it with
// SIGKILL, and sends SIGKILL to the process group itself if the shim is not
// gone within two seconds. It returns at once.
func (c *Child) Kill() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = syscall.Kill(c.pgid, killSignal)
	c.sys.mu.Lock()
	defer c.sys.mu.Unlock()
	if c.sys.fallback == nil {
		c.sys.fallback = time.AfterFunc(killBound, func() {
			select {
			case <-c.done:
			default:
				c.killGroup(syscall.SIGKILL)
			}
		})
	}
}

// A forker is a goroutine locked to an OS thread of its own, from which the
// shims are started. Pdeathsig fires when the thread that forked exits, not
// the process, and Go ends a thread when a goroutine locked to it exits: so
// the shims are never forked on a thread some other goroutine could lock
// and end. The forker exits (and its thread with it) only once every shim
// it started has been reaped.
type forker struct {
	reqs chan func()
	quit chan struct{}
}

var (
	forkMu    sync.Mutex
	forkCur   *forker
	forkUsers int
)

func acquireForker() *forker {
	forkMu.Lock()
	defer forkMu.Unlock()
	if forkCur == nil {
		forkCur = &forker{reqs: make(chan func()), quit: make(chan struct{})}
		go forkCur.run()
	}
	forkUsers++
	return forkCur
}

func releaseForker(f *forker) {
	forkMu.Lock()
	defer forkMu.Unlock()
	forkUsers--
	if forkUsers == 0 {
		close(f.quit)
		forkCur = nil
	}
}

func (f *forker) run() {
	runtime.LockOSThread()
	// No UnlockOSThread: the thread ends with the goroutine, as it must
	// not run anything else.
	for {
		select {
		case fn := <-f.reqs:
			fn()
		case <-f.quit:
			return
		}
	}
}

// do runs fn on the forker's thread.
func (f *forker) do(fn func() error) error {
	errc := make(chan error, 1)
	f.reqs <- func() { errc <- fn() }
	return <-errc
}
