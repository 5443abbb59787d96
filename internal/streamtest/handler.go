package streamtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/stream"
)

// Behaviour says how a test handler processes a message: it returns the
// call's error after doing whatever it does (sleeping, blocking, panicking).
type Behaviour func(ctx context.Context, term *simba.Term, msg stream.Message) error

// Work sleeps d unless ctx ends first.
func Work(d time.Duration) Behaviour {
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

// Handler is a test handler of one partition that records its calls. It
// panics when given a message of another partition or one a [Numbered]
// source did not make.
type Handler struct {
	Rec       *Recorder
	Node      string // the member it runs on
	Partition int
	Behaviour Behaviour // what Process does
	// WindowTime is how long a [WindowHandler]'s Window call takes, and
	// WindowErr, if set, what it returns then.
	WindowTime time.Duration
	WindowErr  func() error
}

func (h *Handler) event(k Kind, term *simba.Term, offset int64, err error) Event {
	return Event{Kind: k, Node: h.Node, Token: term.Token(), Partition: h.Partition, Offset: offset, Err: err}
}

// Process records its start, runs h.Behaviour and records its end (a panic
// as an error, before it goes on).
func (h *Handler) Process(ctx context.Context, term *simba.Term, msg stream.Message) error {
	if msg.Partition != h.Partition || string(msg.Value) != value(msg.Partition, msg.Offset) {
		panic(fmt.Sprintf("handler of partition %d got %+v", h.Partition, msg))
	}
	h.Rec.Add(h.event(ProcessStart, term, msg.Offset, nil))
	defer func() {
		if v := recover(); v != nil {
			h.Rec.Add(h.event(ProcessEnd, term, msg.Offset, fmt.Errorf("panic: %v", v)))
			panic(v)
		}
	}()
	err := h.Behaviour(ctx, term, msg)
	h.Rec.Add(h.event(ProcessEnd, term, msg.Offset, err))
	return err
}

// Init records the call.
func (h *Handler) Init(ctx context.Context, term *simba.Term) error {
	h.Rec.Add(h.event(HandlerInit, term, -1, nil))
	return nil
}

// Close records the call.
func (h *Handler) Close(ctx context.Context, term *simba.Term) error {
	h.Rec.Add(h.event(HandlerClose, term, -1, nil))
	return nil
}

// WindowHandler is a [Handler] with a Window.
type WindowHandler struct{ *Handler }

// Window records its start, takes WindowTime (unless ctx ends first),
// returns WindowErr's error if set, and records its end.
func (h WindowHandler) Window(ctx context.Context, term *simba.Term) error {
	h.Rec.Add(h.event(WindowStart, term, -1, nil))
	var err error
	if h.WindowTime > 0 {
		err = Work(h.WindowTime)(ctx, term, stream.Message{})
	}
	if err == nil && h.WindowErr != nil {
		err = h.WindowErr()
	}
	h.Rec.Add(h.event(WindowEnd, term, -1, err))
	return err
}

// Handlers returns a handler function for node: [Handler]s recording in
// rec, processing as b does.
func Handlers(rec *Recorder, node string, b Behaviour) func(int) stream.Handler {
	return func(p int) stream.Handler {
		return &Handler{Rec: rec, Node: node, Partition: p, Behaviour: b}
	}
}

// WindowHandlers is [Handlers] of [WindowHandler]s whose Window takes
// window.
func WindowHandlers(rec *Recorder, node string, b Behaviour, window time.Duration) func(int) stream.Handler {
	return func(p int) stream.Handler {
		return WindowHandler{&Handler{Rec: rec, Node: node, Partition: p, Behaviour: b, WindowTime: window}}
	}
}

// Numbered is a source of m numbered messages per partition, offsets
// 0..m-1, served in batches of at most batch. Past the end it blocks until
// ctx ends.
type Numbered struct {
	m     int64
	batch int64
	// upTo, if set, caps the offsets available per partition (for tests
	// that feed a partition in steps); guarded by mu.
	mu   sync.Mutex
	upTo map[int]int64
	more chan struct{} // closed and replaced when upTo grows
}

// NewNumbered returns a source of m messages per partition, in batches of
// at most batch.
func NewNumbered(m, batch int64) *Numbered {
	return &Numbered{m: m, batch: batch, more: make(chan struct{})}
}

// value is the value of message off of partition p.
func value(p int, off int64) string { return fmt.Sprintf("%d/%d", p, off) }

func (s *Numbered) limit(p int) (int64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.upTo[p]; ok {
		return min(n, s.m), s.more
	}
	return s.m, s.more
}

// Feed makes offsets below n of partition p available (only for
// partitions fed this way; others have all m at once).
func (s *Numbered) Feed(p int, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.upTo == nil {
		s.upTo = map[int]int64{}
	}
	s.upTo[p] = n
	close(s.more)
	s.more = make(chan struct{})
}

// Poll returns the messages of partition p from offset from on, at most a
// batch, blocking until there are some or ctx ends.
func (s *Numbered) Poll(ctx context.Context, p int, from int64) ([]stream.Message, error) {
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

// Store records the loops' checkpoint calls around another store.
type Store struct {
	Inner stream.CheckpointStore
	Rec   *Recorder
	Node  string // the member whose loops use it
	// Late, when set, makes Save outlive its ctx's cancellation while it
	// returns true, as a write from a process paused mid-call reaches the
	// backend late.
	Late func() bool
}

// Load loads from the inner store and records what it loaded.
func (s *Store) Load(ctx context.Context, term *simba.Term, p int) (int64, bool, error) {
	off, found, err := s.Inner.Load(ctx, term, p)
	e := Event{Kind: CheckpointLoad, Node: s.Node, Token: term.Token(), Partition: p, Offset: off, Err: err}
	if !found {
		e.Offset = -1
	}
	s.Rec.Add(e)
	return off, found, err
}

// Save records the call's start, saves to the inner store and records what
// it returned.
func (s *Store) Save(ctx context.Context, term *simba.Term, p int, off int64) error {
	s.Rec.Add(Event{Kind: CheckpointSave, Node: s.Node, Token: term.Token(), Partition: p, Offset: off})
	if s.Late != nil && s.Late() {
		ctx = context.WithoutCancel(ctx)
	}
	err := s.Inner.Save(ctx, term, p, off)
	s.Rec.Add(Event{Kind: CheckpointSaved, Node: s.Node, Token: term.Token(), Partition: p, Offset: off, Err: err})
	return err
}
