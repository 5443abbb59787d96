// Package check holds the invariant checkers run over the history of a test:
// the terms a client handed to its tasks and the holdings a backend granted.
// A checker that cannot fail proves nothing: every checker here has a test
// that feeds it a violating history.
package check

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Term is one term as a task saw it.
type Term struct {
	Name  string // lease name
	Token uint64 // fencing token
	// Start is when the term began on the client; End is when it stopped
	// being valid (Term.Deadline after revocation).
	Start, End time.Time
}

// Grant is one holding of a lease as the backend saw it.
type Grant struct {
	Name  string // lease name
	Token uint64 // fencing token
	// Start is when the backend granted it; End when it freed it (zero and
	// Ended false while still held).
	Start, End time.Time
	// Seen, when not zero, is an instant at or after the grant, and Start
	// then only an instant at or before it: a watcher knows the grant
	// began between the two. HandOffOrder, which must not take a grant as
	// earlier than it was, uses Seen where it is set.
	Seen  time.Time
	Ended bool // the holding is over
	// Expired reports that the backend ended the holding by itself (session
	// expiry), rather than on the holder's request (release, close).
	Expired bool
	// Evicted reports that the backend ended the holding early, before
	// its session's TTL ran out (a fault injected against the lease's
	// contract, such as the memory backend's Node.Expire): the holder
	// could not have known in time, so the next grant is not held
	// against it.
	Evicted bool
}

// Terms checks (I1) at most one valid term per lease at any instant and (I2)
// tokens strictly increasing in the order terms start. It returns every
// violation found.
func Terms(terms []Term) []error {
	var errs []error
	byName := map[string][]Term{}
	for _, t := range terms {
		if t.End.Before(t.Start) {
			// A term that never became valid occupies no time.
			t.End = t.Start
		}
		byName[t.Name] = append(byName[t.Name], t)
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ts := byName[n]
		// Terms that start at one instant (one granted and expired at
		// once, the next granted) are in no order but their tokens'.
		sort.SliceStable(ts, func(i, j int) bool {
			if !ts[i].Start.Equal(ts[j].Start) {
				return ts[i].Start.Before(ts[j].Start)
			}
			return ts[i].Token < ts[j].Token
		})
		seen := map[uint64]bool{}
		for i, t := range ts {
			if seen[t.Token] {
				errs = append(errs, fmt.Errorf("I2: lease %q: token %d handed out twice", n, t.Token))
			}
			seen[t.Token] = true
			if i == 0 {
				continue
			}
			prev := ts[i-1]
			if t.Token <= prev.Token {
				errs = append(errs, fmt.Errorf("I2: lease %q: term %d started at %v after term %d", n, t.Token, t.Start, prev.Token))
			}
			// Valid intervals are [Start, End).
			for _, p := range ts[:i] {
				if t.Start.Before(p.End) && p.Start.Before(t.End) {
					errs = append(errs, fmt.Errorf("I1: lease %q: terms %d [%v, %v) and %d [%v, %v) overlap by %v",
						n, p.Token, p.Start, p.End, t.Token, t.Start, t.End, p.End.Sub(t.Start)))
				}
			}
		}
	}
	return errs
}

// AgainstGrants checks (I4) that every term ended, on the client's clock,
// before the backend freed its holding, so before the backend could grant the
// lease to anyone else; and that every term matches a grant. Both histories
// must be read on one clock (one process, or virtual time). It also returns
// the smallest gap seen between a term's end and the expiry of its holding.
func AgainstGrants(terms []Term, grants []Grant) (minGap time.Duration, errs []error) {
	type key struct {
		name  string
		token uint64
	}
	byKey := map[key]Grant{}
	for _, g := range grants {
		byKey[key{g.Name, g.Token}] = g
	}
	minGap = time.Duration(1<<63 - 1)
	for _, t := range terms {
		g, ok := byKey[key{t.Name, t.Token}]
		if !ok {
			errs = append(errs, fmt.Errorf("I4: lease %q: term %d has no grant in the backend", t.Name, t.Token))
			continue
		}
		if t.Start.Before(g.Start) {
			errs = append(errs, fmt.Errorf("I4: lease %q: term %d began at %v, before its grant at %v", t.Name, t.Token, t.Start, g.Start))
		}
		if !g.Ended {
			continue
		}
		// A holder that releases revokes its term first (gap ≥ 0); a
		// holding the backend expires must already be over on the client,
		// strictly before (gap > 0): that gap is the drift margin.
		gap := g.End.Sub(t.End)
		if !g.Expired {
			if gap < 0 {
				errs = append(errs, fmt.Errorf("I4: lease %q: term %d valid until %v, after its holder released it at %v",
					t.Name, t.Token, t.End, g.End))
			}
			continue
		}
		minGap = min(minGap, gap)
		if gap <= 0 {
			errs = append(errs, fmt.Errorf("I4: lease %q: term %d valid until %v, but the backend expired it at %v (%v earlier)",
				t.Name, t.Token, t.End, g.End, -gap))
		}
	}
	return minGap, errs
}

// Write is one write to a fenced register.
type Write struct {
	Lease    string    // the lease the writer held
	Token    uint64    // its token
	Node     string    // who wrote
	At       time.Time // when
	Accepted bool      // whether the register took it
}

// Register is a shared resource written by leader tasks with their tokens.
// Fenced, it accepts a write only if its token is at least the highest
// accepted so far for the lease; unfenced (the negative control), it
// accepts everything. It records every write. Safe for concurrent use.
type Register struct {
	fenced  bool
	mu      sync.Mutex
	highest map[string]uint64
	writes  []Write
}

// NewRegister returns an empty register.
func NewRegister(fenced bool) *Register {
	return &Register{fenced: fenced, highest: map[string]uint64{}}
}

// Write records a write of lease with token by node, and reports whether the
// register accepted it.
func (r *Register) Write(lease string, token uint64, node string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := !r.fenced || token >= r.highest[lease]
	if ok {
		r.highest[lease] = max(r.highest[lease], token)
	}
	r.writes = append(r.writes, Write{Lease: lease, Token: token, Node: node, At: time.Now(), Accepted: ok})
	return ok
}

// Writes returns every write so far, in order.
func (r *Register) Writes() []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Write(nil), r.writes...)
}

// StaleWrites checks (I3): no write was accepted with a token lower than
// that of a write accepted before it for the same lease. It returns one
// error per stale write accepted.
func StaleWrites(writes []Write) []error {
	var errs []error
	highest := map[string]uint64{}
	for _, w := range writes {
		if !w.Accepted {
			continue
		}
		if w.Token < highest[w.Lease] {
			errs = append(errs, fmt.Errorf("I3: lease %q: write by %s with token %d accepted at %v after token %d",
				w.Lease, w.Node, w.Token, w.At, highest[w.Lease]))
		}
		highest[w.Lease] = max(highest[w.Lease], w.Token)
	}
	return errs
}

// Covered checks (I5) that each of the named leases has a term valid at
// the instant at: once faults have healed, every lease with a live
// contender must have been taken again within the bound.
func Covered(terms []Term, names []string, at time.Time) []error {
	var errs []error
	for _, n := range names {
		ok := false
		for _, t := range terms {
			if t.Name == n && !t.Start.After(at) && t.End.After(at) {
				ok = true
				break
			}
		}
		if !ok {
			errs = append(errs, fmt.Errorf("I5: lease %q has no valid term at %v", n, at))
		}
	}
	return errs
}
