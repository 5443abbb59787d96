package streamtest

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// Group is the name of the tests' partition group.
const Group = "orders"

// Kind is what a recorded [Event] is.
type Kind string

// The kinds of [Event].
const (
	ProcessStart    Kind = "start"  // a Process call begins
	ProcessEnd      Kind = "end"    // a Process call returns
	WindowStart     Kind = "wstart" // a Window call begins
	WindowEnd       Kind = "wend"   // a Window call returns
	HandlerInit     Kind = "init"   // a handler's Init is called
	HandlerClose    Kind = "close"  // a handler's Close is called
	CheckpointLoad  Kind = "load"   // a checkpoint is loaded (offset; -1 if none)
	CheckpointSave  Kind = "save"   // a Save call begins
	CheckpointSaved Kind = "saved"  // a Save call returns (Err nil: accepted)
)

// Event is one recorded call of a loop: the recorder's order is a
// linearization of what happened (a call's start is recorded when it
// begins, its end before it returns).
type Event struct {
	Kind      Kind
	Node      string // the member that made the call
	Token     uint64 // the token of the term it was made in
	Partition int
	Offset    int64 // the message's or checkpoint's offset; -1 for none
	Err       error // what the call returned
	At        time.Time
}

// String returns the event as the checkers' and Dump's messages show it.
func (e Event) String() string {
	s := fmt.Sprintf("%s %s p%d t%d", e.Kind, e.Node, e.Partition, e.Token)
	if e.Offset >= 0 {
		s += fmt.Sprintf(" @%d", e.Offset)
	}
	if e.Err != nil {
		s += fmt.Sprintf(" err=%v", e.Err)
	}
	return s
}

// Recorder records the calls of every loop of a test. Its zero value is
// ready for use.
type Recorder struct {
	mu  sync.Mutex
	evs []Event
}

// Add records e, at the current time.
func (r *Recorder) Add(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.At = time.Now()
	r.evs = append(r.evs, e)
}

// Events returns the events recorded so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.evs...)
}

// Processed reports whether every offset in [0, m) of partitions [0, p)
// was processed at least once.
func (r *Recorder) Processed(p int, m int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[[2]int64]bool{}
	for _, e := range r.evs {
		if e.Kind == ProcessEnd && e.Err == nil {
			seen[[2]int64{int64(e.Partition), e.Offset}] = true
		}
	}
	return int64(len(seen)) == int64(p)*m
}

// Count returns how many events match f.
func (r *Recorder) Count(f func(Event) bool) int {
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

// WaitFor polls cond every 50ms (virtual time in a synctest bubble) until
// it holds, or fails the test after limit, saying what it waited for.
func WaitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Logger returns a logger of node's to the test's log when -v is given, and
// one that discards otherwise.
func Logger(t *testing.T, node string) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", node)
}
