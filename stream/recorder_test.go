package stream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/stream"
)

// testTTL is the session TTL of the tests: renewals every second; a crashed
// node's partitions are taken over about 3s after its last renewal.
const testTTL = 3 * time.Second

// kind is what a recorded event is.
type kind string

const (
	kStart  kind = "start"  // Process call begins
	kEnd    kind = "end"    // Process call returns
	kWStart kind = "wstart" // Window call begins
	kWEnd   kind = "wend"   // Window call returns
	kInit   kind = "init"
	kClose  kind = "close"
	kLoad   kind = "load" // checkpoint loaded (offset; -1 if none)
	kSave   kind = "save" // Save call begins
	kSaved  kind = "saved"
	// kSaved: Save call returns (err nil: accepted)
)

// ev is one recorded call of a loop: the recorder's order is a
// linearization of what happened (a call's start is recorded when it
// begins, its end before it returns).
type ev struct {
	kind      kind
	node      string
	token     uint64
	partition int
	offset    int64
	err       error
	at        time.Time
}

func (e ev) String() string {
	s := fmt.Sprintf("%s %s p%d t%d", e.kind, e.node, e.partition, e.token)
	if e.offset >= 0 {
		s += fmt.Sprintf(" @%d", e.offset)
	}
	if e.err != nil {
		s += fmt.Sprintf(" err=%v", e.err)
	}
	return s
}

// recorder records the calls of every loop of a test.
type recorder struct {
	mu  sync.Mutex
	evs []ev
}

func (r *recorder) add(e ev) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.at = time.Now()
	r.evs = append(r.evs, e)
}

func (r *recorder) events() []ev {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ev(nil), r.evs...)
}

// processed reports whether every offset in [0, m) of partitions [0, p)
// was processed at least once.
func (r *recorder) processed(p int, m int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[[2]int64]bool{}
	for _, e := range r.evs {
		if e.kind == kEnd && e.err == nil {
			seen[[2]int64{int64(e.partition), e.offset}] = true
		}
	}
	return int64(len(seen)) == int64(p)*m
}

// count returns the events matching f.
func (r *recorder) count(f func(ev) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.evs {
		if f(e) {
			n++
		}
	}
	return n
}

// waitFor sleeps (virtual time in a bubble) until cond holds, or fails the
// test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// behaviour says how a test handler processes a message: it returns the
// call's error after doing whatever it does (sleeping, blocking, panicking).
type behaviour func(ctx context.Context, term *simba.Term, msg stream.Message) error

// work sleeps d unless ctx ends first.
func work(d time.Duration) behaviour {
	return func(ctx context.Context, _ *simba.Term, _ stream.Message) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// handler is a test handler that records its calls.
type handler struct {
	rec       *recorder
	node      string
	partition int
	process   behaviour
	window    time.Duration // how long Window takes
	windowErr func() error
}

func (h *handler) ev(k kind, term *simba.Term, offset int64, err error) ev {
	return ev{kind: k, node: h.node, token: term.Token(), partition: h.partition, offset: offset, err: err}
}

func (h *handler) Process(ctx context.Context, term *simba.Term, msg stream.Message) error {
	if msg.Partition != h.partition || string(msg.Value) != value(msg.Partition, msg.Offset) {
		panic(fmt.Sprintf("handler of partition %d got %+v", h.partition, msg))
	}
	h.rec.add(h.ev(kStart, term, msg.Offset, nil))
	defer func() {
		if v := recover(); v != nil {
			h.rec.add(h.ev(kEnd, term, msg.Offset, fmt.Errorf("panic: %v", v)))
			panic(v)
		}
	}()
	err := h.process(ctx, term, msg)
	h.rec.add(h.ev(kEnd, term, msg.Offset, err))
	return err
}

func (h *handler) Init(ctx context.Context, term *simba.Term) error {
	h.rec.add(h.ev(kInit, term, -1, nil))
	return nil
}

func (h *handler) Close(ctx context.Context, term *simba.Term) error {
	h.rec.add(h.ev(kClose, term, -1, nil))
	return nil
}

// windowHandler is a handler with a Window.
type windowHandler struct{ *handler }

func (h windowHandler) Window(ctx context.Context, term *simba.Term) error {
	h.rec.add(h.ev(kWStart, term, -1, nil))
	var err error
	if h.window > 0 {
		err = work(h.window)(ctx, term, stream.Message{})
	}
	if err == nil && h.windowErr != nil {
		err = h.windowErr()
	}
	h.rec.add(h.ev(kWEnd, term, -1, err))
	return err
}

// handlers returns a handler function for node.
func handlers(rec *recorder, node string, b behaviour) func(int) stream.Handler {
	return func(p int) stream.Handler {
		return &handler{rec: rec, node: node, partition: p, process: b}
	}
}

func windowHandlers(rec *recorder, node string, b behaviour, window time.Duration) func(int) stream.Handler {
	return func(p int) stream.Handler {
		return windowHandler{&handler{rec: rec, node: node, partition: p, process: b, window: window}}
	}
}

// numbered is a source of m numbered messages per partition, offsets
// 0..m-1, served in batches of at most batch. Past the end it blocks until
// ctx ends.
type numbered struct {
	m     int64
	batch int64
	// upTo, if set, caps the offsets available per partition (for tests
	// that feed a partition in steps); guarded by mu.
	mu   sync.Mutex
	upTo map[int]int64
	more chan struct{} // closed and replaced when upTo grows
}

func newNumbered(m, batch int64) *numbered {
	return &numbered{m: m, batch: batch, more: make(chan struct{})}
}

func value(p int, off int64) string { return fmt.Sprintf("%d/%d", p, off) }

func (s *numbered) limit(p int) (int64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.upTo[p]; ok {
		return min(n, s.m), s.more
	}
	return s.m, s.more
}

// feed makes offsets below n of partition p available (only for
// partitions fed this way; others have all m at once).
func (s *numbered) feed(p int, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.upTo == nil {
		s.upTo = map[int]int64{}
	}
	s.upTo[p] = n
	close(s.more)
	s.more = make(chan struct{})
}

func (s *numbered) Poll(ctx context.Context, p int, from int64) ([]stream.Message, error) {
	for {
		end, more := s.limit(p)
		if from < end {
			end = min(end, from+s.batch)
			out := make([]stream.Message, 0, end-from)
			for off := from; off < end; off++ {
				out = append(out, stream.Message{Offset: off, Value: []byte(value(p, off))})
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-more:
		}
	}
}

// store records the loops' checkpoint calls around another store.
type store struct {
	inner stream.CheckpointStore
	rec   *recorder
	node  string
	// late, when set, makes Save outlive its ctx's cancellation, as a
	// write from a process paused mid-call reaches the backend late.
	late func() bool
}

func (s *store) Load(ctx context.Context, term *simba.Term, p int) (int64, bool, error) {
	off, found, err := s.inner.Load(ctx, term, p)
	e := ev{kind: kLoad, node: s.node, token: term.Token(), partition: p, offset: off, err: err}
	if !found {
		e.offset = -1
	}
	s.rec.add(e)
	return off, found, err
}

func (s *store) Save(ctx context.Context, term *simba.Term, p int, off int64) error {
	s.rec.add(ev{kind: kSave, node: s.node, token: term.Token(), partition: p, offset: off})
	if s.late != nil && s.late() {
		ctx = context.WithoutCancel(ctx)
	}
	err := s.inner.Save(ctx, term, p, off)
	s.rec.add(ev{kind: kSaved, node: s.node, token: term.Token(), partition: p, offset: off, err: err})
	return err
}

// testLogger logs to the test's log when -v is given.
func testLogger(t *testing.T, node string) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", node)
}

// node is one simulated process running a stream.
type node struct {
	name   string
	conn   *memory.Node
	client *simba.Client
	task   *stream.Task
	store  *store

	mu     sync.Mutex
	events []simba.Event
}

func (n *node) event(e simba.Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, e)
}

// failures returns the partition errors its runs returned.
func (n *node) failures() []*stream.PartitionError {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*stream.PartitionError
	for _, e := range n.events {
		if w, ok := e.(simba.WorkCompleted); ok {
			var pe *stream.PartitionError
			if errors.As(w.Err, &pe) {
				out = append(out, pe)
			}
		}
	}
	return out
}

const group = "orders"

// startNode starts a client on its own memory node, and a stream on it.
func startNode(t *testing.T, b *memory.Backend, name string, partitions int, src stream.Source, rec *recorder,
	newHandler func(int) stream.Handler, opts ...stream.Option) *node {
	t.Helper()
	n := &node{name: name, conn: b.Node(name)}
	c, err := simba.New(n.conn, simba.WithTTL(testTTL), simba.WithMemberID(name),
		simba.WithEventHandler(n.event), simba.WithLogger(testLogger(t, name)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	n.client = c
	n.store = &store{inner: stream.RecordStore{}, rec: rec, node: name}
	opts = append([]stream.Option{stream.WithCheckpointStore(n.store), stream.WithLogger(testLogger(t, name))}, opts...)
	n.task, err = stream.Start(c.Group(group, partitions), src, newHandler, opts...)
	if err != nil {
		c.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		// When the test failed early: heal the link first. A node whose
		// client cannot close even so (a crashed node whose deadline
		// never passes) keeps its goroutines, and the test's synctest
		// bubble, alive for ever: end the binary with a panic that says
		// so rather than hang.
		n.conn.Heal()
		await.Cleanup(t, await.Done(n.stop), stopBound, "the task and client of %s did not close", name)
	})
	return n
}

// stopBound bounds how long a test's clean-up waits for a node to stop, in
// virtual time.
const stopBound = time.Hour

// stop closes the task, then the client.
func (n *node) stop() {
	n.task.Close()
	n.client.Close()
}

// crash kills the node's process: its backend connection dies at once and
// its goroutines are stopped in the background.
func (n *node) crash() <-chan struct{} {
	n.conn.Crash()
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.client.Close()
		n.task.Close()
	}()
	return done
}
