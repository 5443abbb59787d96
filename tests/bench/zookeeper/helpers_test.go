package zookeeperbench_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/zktest"
)

// The helpers below are those of backend/zookeeper's tests (main_test.go
// and faults_test.go) that the benchmarks use, copied: the backend's own
// tests keep theirs. The helper process is this test binary's own, as
// TestHelperProcess.

// newBackendAt returns a backend on addr under root, closed when the test
// ends.
func newBackendAt(t testing.TB, addr, root string, opts ...zookeeper.Option) *zookeeper.Backend {
	t.Helper()
	b, err := zookeeper.New([]string{addr}, append([]zookeeper.Option{zookeeper.WithRoot(root)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// termLog records the terms tasks saw, on this process's clock.
type termLog struct {
	mu    sync.Mutex
	terms []check.Term
}

// started is one term as its task began it.
type started struct {
	who  string
	term *simba.Term
	at   time.Time
}

// task returns a RunWhileLeader function for client who: it reports the
// term on ch, holds it until it is revoked, and records it.
func (l *termLog) task(who string, ch chan<- started) func(context.Context, *simba.Term) error {
	return func(ctx context.Context, term *simba.Term) error {
		if ch != nil {
			ch <- started{who, term, time.Now()}
		}
		<-term.Revoked()
		l.mu.Lock()
		l.terms = append(l.terms, check.Term{Name: term.Name(), Token: term.Token(), Start: term.Start(), End: term.Deadline()})
		l.mu.Unlock()
		return nil
	}
}

// check runs the invariant checkers over the recorded terms.
func (l *termLog) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range check.Terms(l.terms) {
		t.Error(err)
	}
}

// client returns a simba client on b, closed when the test ends.
func client(t *testing.T, b *zookeeper.Backend, ttl time.Duration, opts ...simba.Option) *simba.Client {
	t.Helper()
	c, err := simba.New(b, append([]simba.Option{simba.WithTTL(ttl)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { closeWithin(t, c) })
	return c
}

// closeWait bounds a clean-up's wait for a client's Close.
const closeWait = 30 * time.Second

// closeWithin closes c, waiting at most closeWait: a client that a failed
// test left cut off from the server may wait for its deadline, for ever if
// that never ends its session; its goroutines are then left to goleak, and
// the test fails saying so instead of hanging.
func closeWithin(t testing.TB, c *simba.Client) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); c.Close() }()
	select {
	case <-done:
	case <-time.After(closeWait):
		t.Errorf("client %s: Close did not return within %v", c.SessionID(), closeWait)
	}
}

// next waits for the next term start on ch.
func next(t *testing.T, ch <-chan started, d time.Duration, what string) started {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(d):
		t.Fatalf("no term started within %v: %s", d, what)
		return started{}
	}
}

// Environment of the helper process of the crash section.
const (
	helperEnv     = "SIMBA_ZK_HELPER"
	helperRootEnv = "SIMBA_ZK_HELPER_ROOT"
	helperTTLEnv  = "SIMBA_ZK_HELPER_TTL"
)

// TestHelperProcess is the client that the crash section starts and
// kills: it contends for "crash" and prints "elected <token> <granted TTL
// in ns>" when it wins, then holds the term until it is killed.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("started by the crash section of TestBenchmarkZooKeeper")
	}
	ttl, err := time.ParseDuration(os.Getenv(helperTTLEnv))
	require.NoError(t, err)
	b, err := zookeeper.New([]string{zktest.Addr(t)}, zookeeper.WithRoot(os.Getenv(helperRootEnv)))
	require.NoError(t, err)
	var granted atomicDuration
	c, err := simba.New(b, simba.WithTTL(ttl), simba.WithEventHandler(func(e simba.Event) {
		if s, ok := e.(simba.SessionStarted); ok {
			granted.set(s.TTL)
		}
	}))
	require.NoError(t, err)
	_, err = c.Election("crash").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		fmt.Printf("elected %d %d\n", term.Token(), granted.get())
		<-ctx.Done()
		return nil
	})
	require.NoError(t, err)
	select {} // until killed
}

type atomicDuration struct {
	mu sync.Mutex
	d  time.Duration
}

func (a *atomicDuration) set(d time.Duration) { a.mu.Lock(); a.d = d; a.mu.Unlock() }
func (a *atomicDuration) get() time.Duration  { a.mu.Lock(); defer a.mu.Unlock(); return a.d }

// crashRound starts a helper client, waits until it leads, lets this
// process's task contend, kills the helper with SIGKILL and returns the time
// from the kill to this process's term, with the helper's granted TTL.
func crashRound(t *testing.T, addr, root string, c *simba.Client, ttl time.Duration, ch chan started) (failover, granted time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperRootEnv+"="+root, helperTTLEnv+"="+ttl.String(), zktest.EnvAddr+"="+addr)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "elected ") {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatal("the helper process did not lead within 30s")
	}
	f := strings.Fields(line)
	require.Len(t, f, 3, line)
	ns, err := strconv.ParseInt(f[2], 10, 64)
	require.NoError(t, err)
	task, err := c.Election("crash").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		ch <- started{"parent", term, time.Now()}
		<-ctx.Done()
		return nil
	})
	require.NoError(t, err)
	defer task.Close()
	time.Sleep(ttl/2 + time.Duration(time.Now().UnixNano()%int64(ttl/3))) // contending, at a random phase of the helper's renewals
	killed := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	s := next(t, ch, 3*ttl+5*time.Second, "take-over after the kill")
	return s.term.Start().Sub(killed), time.Duration(ns)
}
