package etcdbench_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/faultproxy"
)

// The helpers below are those of backend/etcd's tests (helpers_test.go)
// that the benchmarks use, copied: the backend's own tests keep theirs.

// opTimeout bounds calls expected to succeed promptly.
const opTimeout = 10 * time.Second

// closeWait bounds every wait for a client's Close.
const closeWait = 30 * time.Second

// waitFor waits up to d for ch to be closed or to deliver a value.
func waitFor(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// termLog records the terms that tasks of several nodes saw, for the
// checkers, and announces each new one.
type termLog struct {
	mu      sync.Mutex
	terms   []*seenTerm
	elected chan *seenTerm
}

// seenTerm is one term as its task saw it.
type seenTerm struct {
	node    string
	term    *simba.Term
	start   time.Time     // term.Start()
	ended   chan struct{} // closed when the task saw the revocation
	endedAt time.Time     // when the task saw it
}

func newTermLog() *termLog { return &termLog{elected: make(chan *seenTerm, 1024)} }

// task returns a task function for node that holds each term until it is
// revoked and records it.
func (l *termLog) task(node string) func(context.Context, *simba.Term) error {
	return func(ctx context.Context, term *simba.Term) error {
		st := &seenTerm{node: node, term: term, start: term.Start(), ended: make(chan struct{})}
		l.mu.Lock()
		l.terms = append(l.terms, st)
		l.mu.Unlock()
		l.elected <- st
		<-term.Revoked()
		st.endedAt = time.Now()
		close(st.ended)
		return nil
	}
}

// next waits up to d for the next term, skipping terms of other nodes when
// node is not "".
func (l *termLog) next(t testing.TB, node string, d time.Duration) *seenTerm {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case st := <-l.elected:
			if node == "" || st.node == node {
				return st
			}
		case <-timer.C:
			t.Fatalf("no new term of node %q within %v", node, d)
			return nil
		}
	}
}

// check runs the invariant checkers over every term recorded; call it once
// every client is closed. It returns the number of terms.
func (l *termLog) check(t testing.TB) int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var terms []check.Term
	for _, st := range l.terms {
		select {
		case <-st.ended:
		default:
			t.Errorf("term %d of %q on node %s was never revoked", st.term.Token(), st.term.Name(), st.node)
			continue
		}
		terms = append(terms, check.Term{Name: st.term.Name(), Token: st.term.Token(), Start: st.start, End: st.term.Deadline()})
	}
	for _, err := range check.Terms(terms) {
		t.Error(err)
	}
	return len(terms)
}

// node is one simba client on an etcd backend of its own.
type node struct {
	name     string
	backend  *etcd.Backend
	client   *simba.Client
	sessions chan simba.SessionStarted
}

// newNode starts a simba client named name on endpoints, with the session
// TTL given. The client and its backend are closed when the test ends.
func newNode(t testing.TB, name string, endpoints []string, prefix string, ttl time.Duration) *node {
	t.Helper()
	b, err := etcd.New(endpoints, etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("backend Close: %v", err)
		}
	})
	n := &node{name: name, backend: b, sessions: make(chan simba.SessionStarted, 64)}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := simba.New(n.backend, simba.WithTTL(ttl), simba.WithLogger(logger), simba.WithEventHandler(func(e simba.Event) {
		if e, ok := e.(simba.SessionStarted); ok {
			select {
			case n.sessions <- e:
			default:
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	n.client = c
	t.Cleanup(func() {
		// A client cut off from the server by a fault left in place (a test
		// failed early) may wait for its deadline, for ever if that never
		// ends its session: its goroutines are then left to goleak.
		if _, err := await.Within(await.Returned(c.Close), closeWait, "node %s: Close did not return", name); err != nil {
			t.Error(err)
		}
	})
	return n
}

// awaitSession waits up to d for the node's next session to start.
func (n *node) awaitSession(t testing.TB, d time.Duration) simba.SessionStarted {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case s := <-n.sessions:
		return s
	case <-timer.C:
		t.Fatalf("node %s: no new session within %v", n.name, d)
		return simba.SessionStarted{}
	}
}

// newProxy starts a fault-injecting proxy to target, closed when the test
// ends (after the clients registered later).
func newProxy(t testing.TB, target string) *faultproxy.Proxy {
	t.Helper()
	px, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return px
}

// testWriter writes a node's log to the test's log, shown with -v or on
// failure.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
