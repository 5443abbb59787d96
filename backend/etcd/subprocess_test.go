package etcd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
)

// Environment of the helper process.
const (
	helperEnv          = "SIMBA_ETCD_HELPER"
	helperEndpointsEnv = "SIMBA_ETCD_ENDPOINTS"
	helperPrefixEnv    = "SIMBA_ETCD_PREFIX"
	helperElectionEnv  = "SIMBA_ETCD_ELECTION"
	helperSinkEnv      = "SIMBA_ETCD_SINK"
)

// TestHelperProcess is a simba node in a process of its own, started by the
// subprocess tests: it contends for one election and, in each term, writes
// its token to a fenced sink every 20ms, checking the term before each
// write. It reports on stdout, one line each: "elected <token>",
// "write <token> <result>", "revoked <token> expired=<matches
// ErrTermExpired> <error>", and after that "late-write <token> <result>":
// one more write with the ended term's token, which the sink must reject.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("run by the subprocess tests")
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	b, err := etcd.New(strings.Split(os.Getenv(helperEndpointsEnv), ","), etcd.WithPrefix(os.Getenv(helperPrefixEnv)))
	if err != nil {
		say("error %v", err)
		os.Exit(2)
	}
	c, err := simba.New(b, simba.WithTTL(faultTTL))
	if err != nil {
		say("error %v", err)
		os.Exit(2)
	}
	sink := os.Getenv(helperSinkEnv)
	_, err = c.Election(os.Getenv(helperElectionEnv)).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		say("elected %d", term.Token())
		for {
			if err := term.EnsureValid(); err != nil {
				say("revoked %d expired=%v %v", term.Token(), errors.Is(err, simba.ErrTermExpired), err)
				// A write already on its way when the term ended, as from
				// a task that checked just before a pause: the sink must
				// refuse it.
				say("late-write %d %s", term.Token(), writeSink(sink, "child-late", term.Token()))
				return nil
			}
			say("write %d %s", term.Token(), writeSink(sink, "child", term.Token()))
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	if err != nil {
		say("error %v", err)
		os.Exit(2)
	}
	time.Sleep(time.Hour) // until killed
}

// writeSink writes token to the fenced sink at url and returns "accepted",
// "rejected" or the error.
func writeSink(url, writer string, token uint64) string {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Post(fmt.Sprintf("%s?writer=%s&token=%d", url, writer, token), "text/plain", nil)
	if err != nil {
		return "error:" + err.Error()
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return "accepted"
	case http.StatusConflict:
		return "rejected"
	}
	return resp.Status
}

// fencedSink is a register that accepts a write only if its token is at
// least the highest it has accepted.
type fencedSink struct {
	mu      sync.Mutex
	highest uint64
	writes  []sinkWrite
}

type sinkWrite struct {
	writer   string
	token    uint64
	accepted bool
	at       time.Time
}

func (s *fencedSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, err := strconv.ParseUint(r.URL.Query().Get("token"), 10, 64)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	ok := token >= s.highest
	if ok {
		s.highest = token
	}
	s.writes = append(s.writes, sinkWrite{writer: r.URL.Query().Get("writer"), token: token, accepted: ok, at: time.Now()})
	s.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusConflict)
	}
}

// since returns the writes that arrived at or after t.
func (s *fencedSink) since(t time.Time) []sinkWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sinkWrite
	for _, w := range s.writes {
		if !w.at.Before(t) {
			out = append(out, w)
		}
	}
	return out
}

// accepted reports whether a write of token by writer was accepted.
func (s *fencedSink) accepted(writer string, token uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.writes {
		if w.writer == writer && w.token == token && w.accepted {
			return true
		}
	}
	return false
}

func startSink(t *testing.T) (*fencedSink, string) {
	sink := &fencedSink{}
	hs := httptest.NewServer(sink)
	t.Cleanup(hs.Close)
	return sink, hs.URL
}

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
}

// startHelper starts a helper process contending for election.
func startHelper(t *testing.T, endpoints []string, prefix, election, sink string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		helperEnv+"=1",
		helperEndpointsEnv+"="+strings.Join(endpoints, ","),
		helperPrefixEnv+"="+prefix,
		helperElectionEnv+"="+election,
		helperSinkEnv+"="+sink,
	)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, lines: make(chan string, 4096), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-h.done
		_ = cmd.Wait()
	})
	return h
}

// await returns the first line starting with prefix, within d.
func (h *helper) await(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				t.Fatalf("helper exited before printing %q", prefix)
			}
			if strings.HasPrefix(line, "error") {
				t.Fatalf("helper: %s", line)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timer.C:
			t.Fatalf("helper did not print %q within %v", prefix, d)
		}
	}
}

// tokenOf parses the token from a helper line "<word> <token> ...".
func tokenOf(t *testing.T, line string) uint64 {
	f := strings.Fields(line)
	if len(f) < 2 {
		t.Fatalf("malformed helper line %q", line)
	}
	tok, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatalf("malformed helper line %q: %v", line, err)
	}
	return tok
}

// TestSubprocessKilled kills the holder, a process of its own, with
// SIGKILL: nothing is released, and another node must take over within
// TTL + 0.6s of the kill (etcd checks lease expiry every 500ms).
func TestSubprocessKilled(t *testing.T) {
	srv := startServer(t)
	prefix := testPrefix(t)
	_, sinkURL := startSink(t)
	n := newNode(t, "parent", srv.Endpoints(), prefix, faultTTL)
	n.awaitSession(t, opTimeout)
	log := newTermLog()
	const bound = faultTTL + 600*time.Millisecond
	const rounds, maxDisturbed = 3, 5
	var failovers []time.Duration
	disturbed := 0
	for round := 0; len(failovers) < rounds; round++ {
		election := fmt.Sprintf("kill-%d", round)
		child := startHelper(t, srv.Endpoints(), prefix, election, sinkURL)
		childToken := tokenOf(t, child.await(t, "elected", opTimeout))
		task, err := n.client.Election(election).RunWhileLeader(log.task(n.name))
		if err != nil {
			t.Fatal(err)
		}
		child.await(t, "write", opTimeout) // the child is at work
		// The parent's Acquire is waiting; kill at a random point of the
		// child's renewal period.
		time.Sleep(50*time.Millisecond + rand.N(faultTTL/2))

		killed := time.Now()
		if err := child.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		next := log.next(t, n.name, 30*time.Second)
		failover := next.start.Sub(killed)
		if next.term.Token() <= childToken {
			t.Errorf("round %d: token %d after the killed holder's %d", round, next.term.Token(), childToken)
		}
		task.Stop()
		await.For(t, task.Done(), closeWait, "round %d: the parent's Stop did not complete", round)
		// The bound is the system's when the node taking over is healthy:
		// a round in which it lost its own session (starved of CPU by
		// other processes, say) measures something else, and is played
		// again.
		if lost := n.lostSince(killed.Add(-faultTTL)); len(lost) > 0 {
			disturbed++
			t.Logf("round %d (fail-over %v) does not count: the parent lost session %s at kill%+v: %v",
				round, failover.Round(time.Millisecond), lost[0].Session, lost[0].At.Sub(killed).Round(time.Millisecond), lost[0].Reason)
			if disturbed > maxDisturbed {
				t.Fatalf("the parent lost its session in %d rounds: the machine is too loaded to measure fail-over", disturbed)
			}
			continue
		}
		failovers = append(failovers, failover)
		if failover > bound {
			t.Errorf("round %d: fail-over took %v after SIGKILL, more than TTL + 0.6s = %v", round, failover, bound)
		}
	}
	t.Logf("fail-over after SIGKILL of the holder (TTL %v): %s", faultTTL, fmtDurations(failovers))
}

// TestSubprocessPaused stops the holder, a process of its own, with SIGSTOP
// for longer than its TTL, lets another node take over and write, and
// resumes it: its task must see that its term is over before it writes, and
// the fenced sink must reject whatever it writes anyway.
func TestSubprocessPaused(t *testing.T) {
	srv := startServer(t)
	prefix := testPrefix(t)
	sink, sinkURL := startSink(t)
	n := newNode(t, "parent", srv.Endpoints(), prefix, faultTTL)
	n.awaitSession(t, opTimeout)

	child := startHelper(t, srv.Endpoints(), prefix, "paused", sinkURL)
	childToken := tokenOf(t, child.await(t, "elected", opTimeout))
	if line := child.await(t, "write", opTimeout); !strings.HasSuffix(line, "accepted") {
		t.Fatalf("the child's first write: %q", line)
	}
	parentWrote := make(chan uint64, 1)
	_, err := n.client.Election("paused").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		if r := writeSink(sinkURL, "parent", term.Token()); r != "accepted" {
			t.Errorf("the parent's write with token %d: %s", term.Token(), r)
		}
		parentWrote <- term.Token()
		<-ctx.Done()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the parent's Acquire is waiting

	if err := child.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var parentToken uint64
	select {
	case parentToken = <-parentWrote:
	case <-time.After(10 * time.Second):
		t.Fatal("the parent did not take over from the paused child")
	}
	t.Logf("the parent took over with token %d, %v after SIGSTOP", parentToken, time.Since(stopped).Round(time.Millisecond))
	if parentToken <= childToken {
		t.Fatalf("token %d after the paused holder's %d", parentToken, childToken)
	}
	// Drain what the child printed before it stopped.
	for drained := false; !drained; {
		select {
		case <-child.lines:
		default:
			drained = true
		}
	}

	resumed := time.Now()
	if err := child.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var afterResume []string
	timer := time.NewTimer(opTimeout)
	defer timer.Stop()
wait:
	for {
		select {
		case line := <-child.lines:
			afterResume = append(afterResume, line)
			if strings.HasPrefix(line, "revoked") {
				break wait
			}
		case <-timer.C:
			t.Fatalf("the resumed child did not report the revocation; it printed %q", afterResume)
		}
	}
	t.Logf("the child after SIGCONT, %v after SIGSTOP: %q", resumed.Sub(stopped).Round(time.Millisecond), afterResume)
	last := afterResume[len(afterResume)-1]
	if tokenOf(t, last) != childToken || !strings.Contains(last, "expired=true") {
		t.Errorf("the child's revocation: %q, want its term %d expired", last, childToken)
	}
	// The child's task must see that its term is over before it writes
	// again: after SIGCONT the sink gets from its loop ("child") at most
	// the one write whose check of the term came before SIGSTOP (the stop
	// fell between the check and the request: CI saw it), refused, then
	// the deliberate late one ("child-late"). Its printed lines do not
	// tell: a write the sink accepted before SIGSTOP is printed after
	// SIGCONT when the stop fell between the sink's answer and the print
	// (CI saw "write 4 accepted" so); the sink's own record does.
	var loop []sinkWrite
	for _, w := range sink.since(resumed) {
		if w.writer == "child" {
			loop = append(loop, w)
			if w.accepted {
				t.Errorf("the sink accepted the resumed child's write with token %d", w.token)
			}
		}
	}
	if len(loop) > 1 {
		t.Errorf("the resumed child wrote %d times before it saw its term over (one may have been checked before SIGSTOP); it printed %q", len(loop), afterResume)
	}
	if late := child.await(t, "late-write", opTimeout); late != fmt.Sprintf("late-write %d rejected", childToken) {
		t.Errorf("the child's write after its term ended: %q, want it rejected", late)
	}
	for _, w := range sink.since(resumed) {
		if strings.HasPrefix(w.writer, "child") && w.accepted {
			t.Errorf("the sink accepted the resumed child's write with token %d", w.token)
		}
	}
	if !sink.accepted("parent", parentToken) {
		t.Error("the parent's write is not in the sink")
	}
}
