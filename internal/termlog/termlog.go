package termlog

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/check"
)

// WriteEvery is the interval of the holders' fenced writes.
const WriteEvery = 100 * time.Millisecond

// Seen is one term as its task saw it.
type Seen struct {
	Node    string
	Session string // the client's session when the term began
	Term    *simba.Term
	Ended   chan struct{} // closed when the task saw the revocation
}

// Log records the terms the tasks of several clients saw, and the writes
// they made to the fenced register: the record "reg", written by each
// holder with Term.PutRecord every WriteEvery while its term is valid.
type Log struct {
	writeTimeout time.Duration

	mu      sync.Mutex
	terms   []*Seen
	writes  []check.Write // as answered, in the order of the answers
	elected chan *Seen
}

// New returns an empty Log whose tasks give each write up to
// writeTimeout.
func New(writeTimeout time.Duration) *Log {
	return &Log{writeTimeout: writeTimeout, elected: make(chan *Seen, 256)}
}

// Task returns the task of node on client c: it announces its term,
// writes the register until the term is revoked, and records it. A write
// still in flight when the term ends (held by a cut link, say) is waited
// for: its answer is what the fence tests are about.
func (l *Log) Task(node string, c *simba.Client) func(context.Context, *simba.Term) error {
	return func(ctx context.Context, term *simba.Term) error {
		st := &Seen{Node: node, Session: c.SessionID(), Term: term, Ended: make(chan struct{})}
		l.mu.Lock()
		l.terms = append(l.terms, st)
		l.mu.Unlock()
		l.elected <- st
		defer close(st.Ended)
		for {
			select {
			case <-term.Revoked():
				return nil
			case <-time.After(WriteEvery):
			}
			wctx, cancel := context.WithTimeout(context.Background(), l.writeTimeout)
			err := term.PutRecord(wctx, "reg", []byte(node))
			cancel()
			switch {
			case err == nil, errors.Is(err, backend.ErrConflict), errors.Is(err, backend.ErrSessionDone):
				l.mu.Lock()
				l.writes = append(l.writes, check.Write{Lease: term.Name(), Token: term.Token(), Node: node, At: time.Now(), Accepted: err == nil})
				l.mu.Unlock()
			}
		}
	}
}

// Next waits up to d for the next term, of node unless node is "", and
// returns nil if none began.
func (l *Log) Next(node string, d time.Duration) *Seen {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case st := <-l.elected:
			if node == "" || st.Node == node {
				return st
			}
		case <-timer.C:
			return nil
		}
	}
}

// Elected is the channel of the terms as they begin, which Next reads too.
func (l *Log) Elected() <-chan *Seen { return l.elected }

// CheckTerms runs check.Terms (I1, I2) over every term recorded: each
// term's end is its Deadline, once it was revoked, or now.
func (l *Log) CheckTerms() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var terms []check.Term
	for _, st := range l.terms {
		terms = append(terms, check.Term{Name: st.Term.Name(), Token: st.Term.Token(), Start: st.Term.Start(), End: st.Term.Deadline()})
	}
	return check.Terms(terms)
}

// Writes returns the writes recorded, in the order of their answers.
func (l *Log) Writes() []check.Write {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.writes)
}

// Eventually polls cond every 20ms for up to d, and reports whether it
// held.
func Eventually(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}
