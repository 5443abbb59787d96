package kubernetes_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/kubetest"
)

// This file holds what the fault tests of the simba client on this backend
// share: a record of the terms the tasks saw, the fenced register they
// write, and the server's record of when each holding ended. It follows
// backend/postgres's faultlog_test.go (test files of another package, which
// cannot be imported).

const (
	// faultTTL is the session TTL of the fault tests: renewals every
	// 667ms, as in the conformance suite, so that a loaded machine under
	// the race detector keeps the sessions alive when no fault is on.
	faultTTL = 2 * time.Second
	// opTimeout bounds each wait of the fault tests for a term or an answer.
	opTimeout = 20 * time.Second
	// closeWait bounds a clean-up's wait for a client's Close.
	closeWait = 30 * time.Second
	// writeEvery is the interval of the holders' fenced writes.
	writeEvery = 100 * time.Millisecond
)

// grantLog is the server's record of when each holding ended, from a
// watch of the test's own (the administrator's, straight to the server) on
// every simba object of a namespace. A holding of this backend ends at the
// first of two writes: its candidacy leaving the head of its lease name's
// queue (a release, or the removal of a dead session's candidacies), or its
// session's object being deleted (by a contender after TTL + margin of
// observation, or by its own client past its deadline), after which every
// contender takes the session for dead. So that instant is the grant's end
// for check.AgainstGrants. The times are when the watch delivered the
// writes, at most the watch's lag after them (or, across an outage of the
// server, when the list made after it showed them): the check is weaker by
// that lag, a few milliseconds on this machine but for outages.
type grantLog struct {
	mu       sync.Mutex
	alive    map[string]bool         // session ids whose objects exist
	deleted  map[string]time.Time    // session id -> its object's deletion seen
	unheaded map[candidacy]time.Time // candidacy -> seen leaving the head
	head     map[string]candidacy    // lease name object -> its queue's head
	stop     context.CancelFunc
	done     chan struct{}
}

// candidacy is one entry of a lease name's queue.
type candidacy = kubetest.Candidacy

// watchGrants starts recording the ends of holdings in ns, with
// kubetest.WatchLeases (which watches again from the last revision after a
// watch ends, and lists again when it cannot: a restart of the server),
// until the test ends. What happened while the watch was down is seen, as the list shows
// it, when the list is made: later than it happened, so the check is
// weaker across an outage of the server by the outage.
func watchGrants(t *testing.T, srv *kubetest.Server, ns string) *grantLog {
	b, err := kubernetes.New(srv.Admin(), kubernetes.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	leases := b.Client().CoordinationV1().Leases(ns)
	ctx, cancel := context.WithCancel(context.Background())
	g := &grantLog{alive: map[string]bool{}, deleted: map[string]time.Time{}, unheaded: map[candidacy]time.Time{}, head: map[string]candidacy{},
		stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		kubetest.WatchLeases(ctx, leases, g)
	}()
	t.Cleanup(func() { g.stop(); <-g.done; b.Close() })
	return g
}

// Listed records what a list shows: the sessions seen before that are
// gone were deleted (at the latest when listed), and each lease name's
// head as it is.
func (g *grantLog) Listed(items []coordv1.Lease, _ uint64, at time.Time) {
	live := map[string]bool{}
	for i := range items {
		l := &items[i]
		if id, ok := kubetest.SessionID(l); ok {
			live[id] = true
		}
		g.Event(watch.Modified, l, 0, at)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for id := range g.alive {
		if !live[id] {
			delete(g.alive, id)
			g.deleted[id] = at
		}
	}
}

// Event records one event of the watch.
func (g *grantLog) Event(typ watch.EventType, l *coordv1.Lease, _ uint64, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch kubetest.Kind(l) {
	case kubetest.KindSession:
		id, _ := kubetest.SessionID(l)
		if typ == watch.Deleted {
			delete(g.alive, id)
			g.deleted[id] = at
		} else {
			g.alive[id] = true
		}
	case kubetest.KindLease:
		_, q, _, _ := kubetest.Queue(l)
		var head candidacy
		if len(q) > 0 && typ != watch.Deleted {
			head = q[0]
		}
		if old, ok := g.head[l.Name]; ok && old != head && old.T != 0 {
			if _, seen := g.unheaded[old]; !seen {
				g.unheaded[old] = at
			}
		}
		g.head[l.Name] = head
	}
}

// ended returns when the holding of token by session ended: the first of
// its candidacy leaving the head of the queue and its session's object
// being deleted; ok is false if neither was seen.
func (g *grantLog) ended(token uint64, session string) (at time.Time, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d, okD := g.deleted[session]
	u, okU := g.unheaded[candidacy{T: token, S: session}]
	switch {
	case okD && okU:
		if u.Before(d) {
			return u, true
		}
		return d, true
	case okD:
		return d, true
	case okU:
		return u, true
	}
	return time.Time{}, false
}

// seenTerm is one term as its task saw it.
type seenTerm struct {
	node    string
	session string // the client's session when the term began
	term    *simba.Term
	ended   chan struct{} // closed when the task saw the revocation
}

// termLog records the terms the tasks of several clients saw, and the
// writes they made to the fenced register: the record "reg", written by
// each holder with Term.PutRecord every writeEvery while its term is
// valid.
type termLog struct {
	mu      sync.Mutex
	terms   []*seenTerm
	writes  []check.Write // as answered, in the order of the answers
	elected chan *seenTerm
}

func newTermLog() *termLog { return &termLog{elected: make(chan *seenTerm, 256)} }

// task returns the task of node on client c: it announces its term,
// writes the register until the term is revoked, and records it.
func (l *termLog) task(node string, c *simba.Client) func(context.Context, *simba.Term) error {
	return func(ctx context.Context, term *simba.Term) error {
		st := &seenTerm{node: node, session: c.SessionID(), term: term, ended: make(chan struct{})}
		l.mu.Lock()
		l.terms = append(l.terms, st)
		l.mu.Unlock()
		l.elected <- st
		defer close(st.ended)
		for {
			select {
			case <-term.Revoked():
				return nil
			case <-time.After(writeEvery):
			}
			wctx, cancel := context.WithTimeout(context.Background(), opTimeout)
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

// next waits up to d for the next term, of node unless node is "", and
// returns nil if none began.
func (l *termLog) next(node string, d time.Duration) *seenTerm {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case st := <-l.elected:
			if node == "" || st.node == node {
				return st
			}
		case <-timer.C:
			return nil
		}
	}
}

// checkTerms runs check.Terms (I1, I2) over every term recorded: each
// term's end is its Deadline, once it was revoked, or now.
func (l *termLog) checkTerms() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var terms []check.Term
	for _, st := range l.terms {
		terms = append(terms, check.Term{Name: st.term.Name(), Token: st.term.Token(), Start: st.term.Start(), End: st.term.Deadline()})
	}
	return check.Terms(terms)
}

// staleWrites runs check.StaleWrites (I3) over the writes of the register
// in the order their answers came back. This backend's record versions
// are random, so they give no order; the order of the answers is the order
// the server applied the writes but for writes in flight together, and a
// stale write that got through (one held by a cut link or a paused server,
// applied after a write with a larger token) is answered after that write,
// so it is caught. It also returns the number of writes accepted and
// refused.
func staleWrites(l *termLog) (errs []error, accepted, refused int) {
	l.mu.Lock()
	answered := slices.Clone(l.writes)
	l.mu.Unlock()
	for _, w := range answered {
		if w.Accepted {
			accepted++
		} else {
			refused++
		}
	}
	return check.StaleWrites(answered), accepted, refused
}

// eventually polls cond every 20ms for up to d and reports whether it
// became true.
func eventually(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}
