package simba_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
)

// testTTL is the session TTL of the tests: renewals every second, a margin of
// 300ms (10%), so a term's deadline is at most 2.7s after a renewal.
const testTTL = 3 * time.Second

// history records what the tasks of several clients saw, and the events.
type history struct {
	mu     sync.Mutex
	terms  []*simba.Term
	owner  map[*simba.Term]string
	events []simba.Event
	runs   []run
}

type run struct {
	node  string
	token uint64
	start time.Time
	end   time.Time
}

func newHistory() *history { return &history{owner: map[*simba.Term]string{}} }

// Terms returns the terms recorded so far, in the order tasks saw them.
func (h *history) Terms() []*simba.Term {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*simba.Term(nil), h.terms...)
}

// Owner returns the node that saw term.
func (h *history) Owner(term *simba.Term) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owner[term]
}

// Runs returns the runs of holdUntilRevoked that have ended.
func (h *history) Runs() []run {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]run(nil), h.runs...)
}

// Events returns the events delivered so far.
func (h *history) Events() []simba.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]simba.Event(nil), h.events...)
}

// sawTerm records term as seen by node, once.
func (h *history) sawTerm(node string, term *simba.Term) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.owner[term]; ok {
		return
	}
	h.owner[term] = node
	h.terms = append(h.terms, term)
}

func (h *history) event(e simba.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// checkTerms runs the invariant checkers over every term recorded, and over
// the backend's grants. Call it after every client is closed.
func (h *history) checkTerms(t *testing.T, b *memory.Backend) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var terms []check.Term
	for _, term := range h.terms {
		select {
		case <-term.Revoked():
		default:
			t.Errorf("term %d of %q not revoked at the end", term.Token(), term.Name())
		}
		terms = append(terms, check.Term{Name: term.Name(), Token: term.Token(), Start: term.Start(), End: term.Deadline()})
	}
	for _, err := range check.Terms(terms) {
		t.Error(err)
	}
	grants := check.MemoryGrants(b.History())
	if _, errs := check.AgainstGrants(terms, grants); len(errs) > 0 {
		for _, err := range errs {
			t.Error(err)
		}
	}
}

// violations is checkTerms returning the violations instead of failing.
func (h *history) violations(b *memory.Backend) []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var terms []check.Term
	for _, term := range h.terms {
		terms = append(terms, check.Term{Name: term.Name(), Token: term.Token(), Start: term.Start(), End: term.Deadline()})
	}
	errs := check.Terms(terms)
	grants := check.MemoryGrants(b.History())
	_, more := check.AgainstGrants(terms, grants)
	return append(errs, more...)
}

// testLogger logs to the test's log when -v is given.
func testLogger(t *testing.T, node string) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", node)
}

// closeBound bounds how long a test waits for Client.Close, in virtual
// time: longer than the runs that ignore cancellation and the slow event
// handlers of these tests (an hour each, at most) keep a Close waiting.
const closeBound = 24 * time.Hour

// node starts a client on its own memory node. If the test fails early,
// the node is healed and the client closed when the test ends; a client
// whose Close still does not return (a crashed node whose client waits for
// a deadline that never passes) would keep its goroutines, and the test's
// synctest bubble, alive for ever, so that ends the test binary with a
// panic that says so, rather than a hang.
func node(t *testing.T, b *memory.Backend, name string, h *history, opts ...simba.Option) (*simba.Client, *memory.Node) {
	t.Helper()
	n := b.Node(name)
	opts = append([]simba.Option{simba.WithTTL(testTTL), simba.WithEventHandler(h.event), simba.WithLogger(testLogger(t, name))}, opts...)
	c, err := simba.New(n, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		n.Heal()
		await.Cleanup(t, await.Returned(c.Close), closeBound, "Close of client %s did not return", name)
	})
	return c, n
}

// holdUntilRevoked is a task function that records its term and holds it
// until the term ends, as a well-behaved task does.
func holdUntilRevoked(node string, h *history) func(context.Context, *simba.Term) error {
	return holdThenCleanUp(node, h, 0)
}

// holdThenCleanUp is holdUntilRevoked with a clean-up step: once its ctx is
// cancelled, the run takes cleanUp to exit.
func holdThenCleanUp(node string, h *history, cleanUp time.Duration) func(context.Context, *simba.Term) error {
	return func(ctx context.Context, term *simba.Term) error {
		h.sawTerm(node, term)
		start := time.Now()
		<-ctx.Done()
		time.Sleep(cleanUp)
		h.mu.Lock()
		h.runs = append(h.runs, run{node: node, token: term.Token(), start: start, end: time.Now()})
		h.mu.Unlock()
		return nil
	}
}

// eventsOf returns the recorded events of type E.
func eventsOf[E simba.Event](h *history) []E {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []E
	for _, e := range h.events {
		if x, ok := e.(E); ok {
			out = append(out, x)
		}
	}
	return out
}

// closeAll closes the clients, each within closeBound.
func closeAll(t *testing.T, cs ...*simba.Client) {
	t.Helper()
	for _, c := range cs {
		if err := await.For(t, await.Returned(c.Close), closeBound, "Close of client %s did not return", c.SessionID()); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

// wrapSessions is a backend whose sessions are wrapped as they open: a
// test plants a fault in what a session does.
type wrapSessions struct {
	backend.Backend
	wrap func(backend.Session) backend.Session
}

func (w wrapSessions) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	s, err := w.Backend.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return w.wrap(s), nil
}
