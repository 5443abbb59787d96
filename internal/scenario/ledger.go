package scenario

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/simba-go/simba"
)

// Ledger records, in order, what a task's functions were called with: the
// tests of the same task winning two terms in a row check each term's
// steps in it. Its methods are safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	entries []Entry
}

// Entry is a call a [Ledger] recorded.
type Entry struct {
	What      string // "claim", "run" (a call began) or "end" (a held run's ctx ended)
	Term      *simba.Term
	Partition int // -1 for an election
	At        time.Time
	CtxErr    error // the call's ctx's error as it began
	Valid     bool  // Term.Valid() as it began
}

// String is the entry as the tests' messages show it: "run p3 t7", say.
func (e Entry) String() string {
	if e.Partition >= 0 {
		return fmt.Sprintf("%s p%d t%d", e.What, e.Partition, e.Term.Token())
	}
	return fmt.Sprintf("%s t%d", e.What, e.Term.Token())
}

// Add records a call of kind what in term, of partition p (-1 for an
// election), with ctx's state and term's as it began.
func (l *Ledger) Add(what string, ctx context.Context, term *simba.Term, p int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, Entry{What: what, Term: term, Partition: p, At: time.Now(), CtxErr: ctx.Err(), Valid: term.Valid()})
}

// Claim is a WithClaim function that records its calls.
func (l *Ledger) Claim(ctx context.Context, term *simba.Term) error {
	l.Add("claim", ctx, term, partitionOf(term))
	return nil
}

// Hold is a RunWhileLeader function that records its run and holds the
// term until its ctx ends.
func (l *Ledger) Hold(ctx context.Context, term *simba.Term) error {
	l.Add("run", ctx, term, -1)
	<-ctx.Done()
	l.Add("end", ctx, term, -1)
	return nil
}

// Tick is a Schedule function that records its runs.
func (l *Ledger) Tick(ctx context.Context, term *simba.Term) error {
	l.Add("run", ctx, term, -1)
	return nil
}

// HoldPartition is Hold for a group.
func (l *Ledger) HoldPartition(ctx context.Context, term *simba.Term, p int) error {
	l.Add("run", ctx, term, p)
	<-ctx.Done()
	return nil
}

// All returns the entries recorded so far.
func (l *Ledger) All() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// Terms returns the terms seen, in the order of their first entry; of one
// partition only when p >= 0.
func (l *Ledger) Terms(p int) []*simba.Term {
	var out []*simba.Term
	for _, e := range l.All() {
		if (p < 0 || e.Partition == p) && !slices.Contains(out, e.Term) {
			out = append(out, e.Term)
		}
	}
	return out
}

// Of returns the entries of kind what in term.
func (l *Ledger) Of(what string, term *simba.Term) []Entry {
	var out []Entry
	for _, e := range l.All() {
		if e.What == what && e.Term == term {
			out = append(out, e)
		}
	}
	return out
}

// String is the entries, for the tests' messages.
func (l *Ledger) String() string { return fmt.Sprint(l.All()) }

// partitionOf is the partition of a term of a group's partition
// ("{group}.{p}"), or -1.
func partitionOf(term *simba.Term) int {
	name := term.Name()
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return -1
	}
	p, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return -1
	}
	return p
}
