package scenario

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
)

// History records what the tasks of several clients saw, and the events.
// Its methods are safe for concurrent use.
type History struct {
	mu     sync.Mutex
	terms  []*simba.Term
	owner  map[*simba.Term]string
	events []simba.Event
	runs   []Run
	// handed are closed by the HandedOff event of their term (see
	// HandedOff).
	handed map[termKey]chan struct{}
}

// Run is a run of a task that has ended, as [History.AddRun] recorded it.
type Run struct {
	Node  string    // the node that ran it
	Token uint64    // its term's token
	Start time.Time // when it began
	End   time.Time // when it returned
}

// NewHistory returns an empty history.
func NewHistory() *History { return &History{owner: map[*simba.Term]string{}} }

// Terms returns the terms recorded so far, in the order tasks saw them.
func (h *History) Terms() []*simba.Term {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*simba.Term(nil), h.terms...)
}

// Owner returns the node that saw term.
func (h *History) Owner(term *simba.Term) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owner[term]
}

// Runs returns the runs recorded so far.
func (h *History) Runs() []Run {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Run(nil), h.runs...)
}

// AddRun records a run that has ended.
func (h *History) AddRun(r Run) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs = append(h.runs, r)
}

// Events returns the events delivered so far.
func (h *History) Events() []simba.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]simba.Event(nil), h.events...)
}

// SawTerm records term as seen by node, once.
func (h *History) SawTerm(node string, term *simba.Term) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.owner[term]; ok {
		return
	}
	h.owner[term] = node
	h.terms = append(h.terms, term)
}

// Event records e: it is an event handler for simba.WithEventHandler.
func (h *History) Event(e simba.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
	if ho, ok := e.(simba.HandedOff); ok {
		close(h.handedLocked(termKey{ho.Election, ho.Token}))
	}
}

// HandedOff returns a channel closed once the HandedOff event of term is
// recorded: its hand-off is complete, though its function may still run
// (the task's Done waits for that too).
func (h *History) HandedOff(term *simba.Term) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.handedLocked(termKey{term.Name(), term.Token()})
}

// termKey names a term: its lease and token.
type termKey struct {
	lease string
	token uint64
}

func (h *History) handedLocked(ref termKey) chan struct{} {
	if h.handed == nil {
		h.handed = map[termKey]chan struct{}{}
	}
	ch, ok := h.handed[ref]
	if !ok {
		ch = make(chan struct{})
		h.handed[ref] = ch
	}
	return ch
}

// CheckTerms runs the invariant checkers over every term recorded, and
// over the memory backend b's grants. Call it after every client is
// closed.
func (h *History) CheckTerms(t *testing.T, b *memory.Backend) {
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

// EventsOf returns the events of type E that h recorded.
func EventsOf[E simba.Event](h *History) []E {
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

// Logger returns a client's logger for the test t, its lines tagged with
// node: they go to the test's log with -v, and nowhere without.
func Logger(t *testing.T, node string) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", node)
}

// CloseAll closes the clients, each within bound; a Close that fails or
// does not return in time fails the test.
func CloseAll(t *testing.T, bound time.Duration, cs ...*simba.Client) {
	t.Helper()
	for _, c := range cs {
		if err := await.For(t, await.Returned(c.Close), bound, "Close of client %s did not return", c.SessionID()); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}
