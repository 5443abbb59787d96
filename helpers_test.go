package simba_test

import (
	"context"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/scenario"
)

// testTTL is the session TTL of the tests: renewals every second, a margin of
// 300ms (10%), so a term's deadline is at most 2.7s after a renewal.
const testTTL = 3 * time.Second

// history records what the tasks of several clients saw, and the events
// (internal/scenario, shared with tests/core).
type history = scenario.History

// newHistory returns an empty history.
func newHistory() *history { return scenario.NewHistory() }

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
	opts = append([]simba.Option{simba.WithTTL(testTTL), simba.WithEventHandler(h.Event), simba.WithLogger(scenario.Logger(t, name))}, opts...)
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
		h.SawTerm(node, term)
		start := time.Now()
		<-ctx.Done()
		time.Sleep(cleanUp)
		h.AddRun(scenario.Run{Node: node, Token: term.Token(), Start: start, End: time.Now()})
		return nil
	}
}

// eventsOf returns the recorded events of type E.
func eventsOf[E simba.Event](h *history) []E { return scenario.EventsOf[E](h) }

// closeAll closes the clients, each within closeBound.
func closeAll(t *testing.T, cs ...*simba.Client) { scenario.CloseAll(t, closeBound, cs...) }

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
