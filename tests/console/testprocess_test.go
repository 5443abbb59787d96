package console_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/internal/await"
)

// testProcess is this test binary run again for one test of its own (an
// etcd server, a simba node) in a process that a test can signal: stop
// with SIGSTOP, kill with SIGKILL. The process says what it has to say on
// stdout, in lines that start with its marker, and obeys lines on stdin;
// it ends when its stdin closes, which it does when the test ends.
type testProcess struct {
	t      *testing.T
	name   string // what it is, for failures
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	exited chan struct{}
}

// startTestProcess runs the test named test in a process of its own, with
// env added to its environment; marker starts the lines of stdout that
// are meant for the test. The process is ended when the test ends: its
// stdin is closed, and it is killed if it has not exited 20 s later.
func startTestProcess(t *testing.T, test, env, marker string) *testProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &testProcess{t: t, name: test, cmd: cmd, stdin: stdin, lines: make(chan string, 100), exited: make(chan struct{})}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), marker); ok {
				p.lines <- line
			}
		}
	}()
	go func() {
		defer close(p.exited)
		cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// reply returns the next line the process says, within a minute.
func (p *testProcess) reply(what string) string {
	p.t.Helper()
	line, err := await.Within(p.lines, time.Minute, "the process of %s did not say %s", p.name, what)
	require.NoError(p.t, err)
	return line
}

// command sends the process a command and waits for its answer.
func (p *testProcess) command(cmd, want string) {
	p.t.Helper()
	_, err := fmt.Fprintln(p.stdin, cmd)
	require.NoError(p.t, err)
	require.Equal(p.t, want, p.reply(want))
}

func (p *testProcess) signal(sig syscall.Signal) {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(sig))
}
