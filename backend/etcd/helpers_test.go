package etcd_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/faultproxy"
)

// opTimeout bounds calls expected to succeed promptly.
const opTimeout = 10 * time.Second

// testPrefix returns a key prefix of the test's own.
func testPrefix(t testing.TB) string {
	return "/" + strings.ReplaceAll(t.Name(), "/", ".") + "/"
}

// newBackend returns a backend on endpoints, closed when the test ends.
func newBackend(t testing.TB, endpoints []string, opts ...etcd.Option) *etcd.Backend {
	t.Helper()
	b, err := etcd.New(endpoints, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("backend Close: %v", err)
		}
	})
	return b
}

// open opens a session on b, closed when the test ends.
func open(t testing.TB, b backend.Backend, ttl time.Duration) backend.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s, err := b.Open(ctx, backend.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// op returns a context for a call expected to return promptly.
func op(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// keys returns the keys under prefix as the server sees them.
func keys(t testing.TB, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := cli.Get(op(t), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("Get %q: %v", prefix, err)
	}
	out := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = strings.TrimPrefix(string(kv.Key), prefix)
	}
	return out
}

// closed reports whether ch is closed now.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

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

// closeWait bounds every wait for a client's Close.
const closeWait = 30 * time.Second

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

	mu   sync.Mutex
	lost []simba.SessionLost // every session the node lost
}

// lostSince returns the sessions the node lost at or after t.
func (n *node) lostSince(t time.Time) []simba.SessionLost {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []simba.SessionLost
	for _, l := range n.lost {
		if !l.At.Before(t) {
			out = append(out, l)
		}
	}
	return out
}

// newNode starts a simba client named name on endpoints, with the session
// TTL given. The client and its backend are closed when the test ends.
func newNode(t testing.TB, name string, endpoints []string, prefix string, ttl time.Duration) *node {
	t.Helper()
	n := &node{name: name, backend: newBackend(t, endpoints, etcd.WithPrefix(prefix)), sessions: make(chan simba.SessionStarted, 64)}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := simba.New(n.backend, simba.WithTTL(ttl), simba.WithLogger(logger), simba.WithEventHandler(func(e simba.Event) {
		switch e := e.(type) {
		case simba.SessionStarted:
			select {
			case n.sessions <- e:
			default:
			}
		case simba.SessionLost:
			n.mu.Lock()
			n.lost = append(n.lost, e)
			n.mu.Unlock()
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

// startServer starts an etcd server for one test.
func startServer(t testing.TB) *etcdtest.Server { return etcdtest.Start(t) }

// clientConfig returns a client configuration for srv's endpoints (its
// proxy), with logging discarded, its TLS configuration when it serves TLS
// and, once authentication is on, the root user's credentials (as
// tests/internal/etcdclient makes it for the tests module).
func clientConfig(srv *etcdtest.Server) clientv3.Config {
	cfg := clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop(), TLS: srv.ClientTLS()}
	cfg.Username, cfg.Password = srv.Root()
	return cfg
}

// newClient returns a client of srv made with [clientConfig], closed when
// the test ends.
func newClient(t testing.TB, srv *etcdtest.Server) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientConfig(srv))
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// fmtDurations formats durations rounded to the millisecond.
func fmtDurations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.Round(time.Millisecond).String()
	}
	return fmt.Sprint(parts)
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
