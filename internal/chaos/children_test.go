package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is one client process of a run.
type child struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	link  link
	// stderr keeps what the process wrote there (race reports, panics).
	stderr lockedBuffer

	ready     chan struct{} // closed at its first session
	readyOnce sync.Once
	exited    chan struct{} // closed once its output is read and it is waited for

	// Guarded by run.mu.
	killedAt time.Time // when the harness killed it (SIGKILL)
	closing  bool      // the harness asked it to close
	closed   bool      // it reported that Close returned
	waitErr  error
	exitedAt time.Time
}

// lockedBuffer is a bytes.Buffer safe for concurrent use, keeping the
// first 64 KiB.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := 64<<10 - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startChild starts a client process in slot, with a link of its own.
func (r *run) startChild(slot int) (*child, error) {
	l, err := r.w.newLink()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.nextNode++
	c := &child{name: fmt.Sprintf("c%d", r.nextNode), link: l, ready: make(chan struct{}), exited: make(chan struct{})}
	r.mu.Unlock()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		envRole+"="+roleChild,
		envRun+"="+r.id,
		envBackend+"="+r.w.kind(),
		envEndpoints+"="+strings.Join(l.endpoints(), ","),
		envSpace+"="+r.space,
		envRegister+"="+r.reg.URL(),
		envNode+"="+c.name,
		envTTL+"="+r.cfg.ttl.String(),
		envChildSeed+"="+strconv.FormatUint(r.cfg.seed+uint64(r.nextNode), 10),
		envPlant+"="+r.cfg.plant,
	)
	// The process dies with the test process, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = &c.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		l.close()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		l.close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		l.close()
		return nil, err
	}
	c.cmd, c.stdin = cmd, stdin
	r.mu.Lock()
	r.all = append(r.all, c)
	r.slots[slot] = c
	r.mu.Unlock()
	r.logf("%s started in slot %d (pid %d)", c.name, slot, cmd.Process.Pid)
	go r.read(c, stdout)
	return c, nil
}

// read records what c reports until its output ends, then waits for it.
func (r *run) read(c *child, stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		r.record(c, sc.Bytes())
	}
	err := c.cmd.Wait()
	c.link.close()
	r.mu.Lock()
	c.waitErr, c.exitedAt = err, time.Now()
	expected := !c.killedAt.IsZero() || c.closing
	r.mu.Unlock()
	switch {
	case !expected:
		r.violate("%s exited by itself: %v", c.name, err)
	case c.killedAt.IsZero() && err != nil:
		r.violate("%s exited with %v after it was asked to close", c.name, err)
	}
	if s := c.stderr.String(); strings.Contains(s, "DATA RACE") || strings.Contains(s, "panic:") {
		r.violate("%s wrote to stderr:\n%s", c.name, s)
	}
	r.logf("%s exited: %v", c.name, err)
	close(c.exited)
}

// record takes in one report line of c.
func (r *run) record(c *child, line []byte) {
	var rep report
	if err := json.Unmarshal(line, &rep); err != nil {
		r.violate("%s printed %q", c.name, line)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.closed && rep.Ev != "leak" {
		r.violations = append(r.violations, fmt.Errorf("I6: %s reported %s after its Close returned: %s", c.name, rep.Ev, line))
	}
	switch rep.Ev {
	case "session":
		c.readyOnce.Do(func() { close(c.ready) })
		r.logLocked("%s: session %s, TTL %v", c.name, rep.Session, rep.TTL)
	case "lost":
		r.logLocked("%s: session %s lost: %s", c.name, rep.Session, rep.Msg)
	case "start":
		r.terms = append(r.terms, &termRecord{child: c, lease: rep.Lease, token: rep.Token, start: rep.Start})
		r.logLocked("%s: term %d of %s began at %s", c.name, rep.Token, rep.Lease, stamp(rep.Start))
	case "end":
		var tr *termRecord
		for i := len(r.terms) - 1; i >= 0; i-- {
			if x := r.terms[i]; x.child == c && x.lease == rep.Lease && x.token == rep.Token {
				tr = x
				break
			}
		}
		if tr == nil {
			r.violations = append(r.violations, fmt.Errorf("%s: term %d of %s ended but never began", c.name, rep.Token, rep.Lease))
			return
		}
		tr.end, tr.ended, tr.why = rep.End, true, rep.Msg
		r.logLocked("%s: term %d of %s ended (%s), valid until %s", c.name, rep.Token, rep.Lease, rep.Msg, stamp(rep.End))
	case "closed":
		c.closed = true
		r.logLocked("%s: closed", c.name)
	case "late-event":
		r.violations = append(r.violations, fmt.Errorf("I6: %s: an event after Close: %s", c.name, rep.Msg))
	case "leak":
		r.violations = append(r.violations, fmt.Errorf("I6: %s: goroutines left after Close: %s", c.name, rep.Msg))
	default:
		r.violations = append(r.violations, fmt.Errorf("%s: %s: %s", c.name, rep.Ev, rep.Msg))
	}
}

// kill kills c with SIGKILL and waits until it is gone.
func (r *run) kill(c *child) {
	r.mu.Lock()
	c.killedAt = time.Now()
	r.mu.Unlock()
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// closeChildren asks every running client to close (it closes its client,
// which hands every term off, then exits), and waits for them; one that
// does not exit within timeout is killed and reported.
func (r *run) closeChildren(timeout time.Duration) {
	r.mu.Lock()
	var running []*child
	for _, c := range r.all {
		if c.killedAt.IsZero() && !c.closing {
			c.closing = true
			running = append(running, c)
		}
	}
	r.mu.Unlock()
	for _, c := range running {
		c.cmd.Process.Signal(syscall.SIGCONT)
		c.stdin.Close()
	}
	deadline := time.After(timeout)
	for _, c := range running {
		select {
		case <-c.exited:
		case <-deadline:
			r.violate("%s did not exit within %v of being asked to close:\n%s", c.name, timeout, c.stderr.String())
			r.kill(c)
		}
	}
}

// killAll kills every client process that still runs: the clean-up of a
// run that failed half-way.
func (r *run) killAll() {
	r.mu.Lock()
	all := append([]*child(nil), r.all...)
	r.mu.Unlock()
	for _, c := range all {
		select {
		case <-c.exited:
			continue
		default:
		}
		r.mu.Lock()
		c.closing = true
		r.mu.Unlock()
		c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.exited
	}
}

// leftoverProcesses returns the processes of the system whose environment
// holds this run's ID: none may be left once the run is over.
func leftoverProcesses(runID string) ([]string, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	if len(dirs) == 0 {
		return nil, errors.New("no /proc: cannot look for leftover processes")
	}
	needle := []byte(envRun + "=" + runID + "\x00")
	var out []string
	for _, d := range dirs {
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil || !bytes.Contains(append(env, 0), needle) {
			continue // gone, or not ours
		}
		cmdline, _ := os.ReadFile(filepath.Join(d, "cmdline"))
		out = append(out, fmt.Sprintf("pid %s: %s", filepath.Base(d), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
	}
	return out, nil
}

// stamp formats a wall-clock time for the run's log.
func stamp(t time.Time) string { return t.Format("15:04:05.000000") }
