package etcdtest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// startProcess starts cmd with a parent-death signal (SIGKILL), so that the
// server dies with the test process (a panic, go test's timeout) rather
// than linger on its ports, and returns the function to call once cmd has
// been reaped.
//
// The kernel sends a parent-death signal when the thread that forked the
// child exits, not the process, and Go ends a thread when a goroutine
// locked to it exits (internal/proc, which the simba command's tests run
// beside etcd, does that). So cmd is started from a goroutine locked to a
// thread of its own, which exits only once every server it started has
// been reaped, as internal/proc starts its shims.
func startProcess(cmd *exec.Cmd) (reaped func(), _ error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	f := acquireForker()
	errc := make(chan error, 1)
	f.reqs <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		releaseForker(f)
		return nil, err
	}
	return func() { releaseForker(f) }, nil
}

// A forker is a goroutine locked to an OS thread of its own, from which the
// servers are started.
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
