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

	"github.com/simba-go/simba/internal/check"
)

// child is one client process of a run.
type child struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	link  link
	// stderr keeps what the process wrote there (race reports, panics).
	stderr lockedBuffer
	last   ring // its last report lines, for the reason of an exit

	ready     chan struct{} // closed at its first session
	readyOnce sync.Once
	exited    chan struct{} // closed once its output is read and it is waited for
	restarted chan struct{} // a value for each "restarted" report (after a stop command)
	stdinMu   sync.Mutex    // orders the commands and the close of stdin

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
	c := &child{name: fmt.Sprintf("c%d", r.nextNode), link: l, ready: make(chan struct{}), exited: make(chan struct{}),
		restarted: make(chan struct{}, 1)}
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
	if e, ok := l.(interface{ env() []string }); ok {
		cmd.Env = append(cmd.Env, e.env()...) // what else the link's client needs (Kubernetes: its credentials)
	}
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
// An exit the harness did not cause, or a failed one after it asked the
// client to close, is a violation that says why the process ended: its
// exit status or signal, what it wrote on stderr, its last reports.
func (r *run) read(c *child, stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		c.last.add(sc.Text())
		r.record(c, sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		r.violate("%s: its reports cannot be read: %v", c.name, err)
		io.Copy(io.Discard, stdout) // the process must not block on a full pipe
	}
	err := c.cmd.Wait()
	c.link.close()
	r.mu.Lock()
	c.waitErr, c.exitedAt = err, time.Now()
	expected := !c.killedAt.IsZero() || c.closing
	r.mu.Unlock()
	switch {
	case !expected:
		why := c.exitReason(err)
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
				why += "\n(a SIGKILL the harness did not send: the kernel's OOM killer, or its Pdeathsig, sent when the thread of the test process that started it ends)"
			}
		}
		r.violate("%s exited by itself: %s", c.name, why)
	case c.killedAt.IsZero() && err != nil:
		r.violate("%s failed after it was asked to close: %s", c.name, c.exitReason(err))
	}
	if s := c.stderr.String(); strings.Contains(s, "DATA RACE") || strings.Contains(s, "panic:") {
		r.violate("%s wrote to stderr:\n%s", c.name, s)
	}
	switch {
	case !expected || (c.killedAt.IsZero() && err != nil):
		r.logf("%s exited: %s", c.name, c.exitReason(err))
	case err != nil:
		r.logf("%s exited: %v (killed by the harness)", c.name, err)
	default:
		r.logf("%s exited: exit status 0", c.name)
	}
	close(c.exited)
}

// exitReason describes how c's process ended: its exit status or signal,
// what it wrote on stderr, and its last reports.
func (c *child) exitReason(err error) string {
	var b strings.Builder
	switch {
	case err == nil:
		b.WriteString("exit status 0")
	default:
		b.WriteString(err.Error())
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				fmt.Fprintf(&b, " (signal %d, %v)", ws.Signal(), ws.Signal())
			}
		}
	}
	if s := strings.TrimSpace(c.stderr.String()); s != "" {
		fmt.Fprintf(&b, "; stderr:\n%s", indent(tail(s, 4<<10)))
	} else {
		b.WriteString("; nothing on stderr")
	}
	if last := c.last.lines(); len(last) > 0 {
		fmt.Fprintf(&b, "\nits last reports:\n%s", indent(strings.Join(last, "\n")))
	}
	return b.String()
}

// tail returns the last n bytes of s, marked as cut.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "[…]" + s[len(s)-n:]
}

func indent(s string) string { return "\t" + strings.ReplaceAll(s, "\n", "\n\t") }

// ring keeps the last few lines written to it. Safe for concurrent use.
type ring struct {
	mu  sync.Mutex
	buf []string
}

const ringSize = 5

func (r *ring) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) == ringSize {
		r.buf = r.buf[1:]
	}
	r.buf = append(r.buf, line)
}

func (r *ring) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.buf...)
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
	case "obs":
		o := check.Observation{Name: rep.Lease, Token: rep.Token, Node: c.name, What: rep.What, At: rep.At.Round(0), Until: rep.Until.Round(0)}
		switch rep.What {
		case "ctx":
			// No promise of validity (see writer.ask): counted, not
			// checked.
			r.liveCtx++
			return
		case "Valid":
			// As check.Observer records Valid: valid at the instant
			// asked, and promised until the Deadline sampled with it.
			o.Until = o.At
			if rep.Until.After(rep.At) {
				r.obs = append(r.obs, check.Observation{Name: rep.Lease, Token: rep.Token, Node: c.name, What: "Deadline", At: o.At, Until: rep.Until.Round(0)})
			}
		}
		r.obs = append(r.obs, o)
	case "exit":
		r.exits = append(r.exits, check.Exit{Name: rep.Lease, Token: rep.Token, Node: c.name, At: rep.At.Round(0), Horizon: rep.Until.Round(0)})
		r.logLocked("%s: the run of term %d of %s returned at %s, promised its term until %s", c.name, rep.Token, rep.Lease, stamp(rep.At), stamp(rep.Until))
	case "restarted":
		r.logLocked("%s: %s stopped at %s, done at %s, started again", c.name, rep.Lease, stamp(rep.Start), stamp(rep.End))
		select {
		case c.restarted <- struct{}{}:
		default:
		}
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

// command sends c a command line (see cmdStop).
func (c *child) command(line string) error {
	c.stdinMu.Lock()
	defer c.stdinMu.Unlock()
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
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
		c.stdinMu.Lock()
		c.stdin.Close()
		c.stdinMu.Unlock()
	}
	deadline := time.After(timeout)
	for _, c := range running {
		select {
		case <-c.exited:
		case <-deadline:
			r.violate("%s did not exit within %v of being asked to close; killed. Its stderr:\n%s\nits last reports:\n%s",
				c.name, timeout, indent(tail(c.stderr.String(), 4<<10)), indent(strings.Join(c.last.lines(), "\n")))
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
