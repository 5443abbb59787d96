package kubernetes_test

import (
	"context"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/kubetest"
	"github.com/simba-go/simba/internal/termlog"
)

// This file holds what the fault tests of the simba client on this backend
// share: the record of the terms the tasks saw and of the fenced register
// they write (internal/termlog, shared with backend/postgres), and the
// server's record of when each holding ended.

const (
	// faultTTL is the session TTL of the fault tests: renewals every
	// 667ms, as in the conformance suite, so that a loaded machine under
	// the race detector keeps the sessions alive when no fault is on.
	faultTTL = 2 * time.Second
	// opTimeout bounds each wait of the fault tests for a term or an answer.
	opTimeout = 20 * time.Second
	// closeWait bounds a clean-up's wait for a client's Close.
	closeWait = 30 * time.Second
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
	return watchGrantsVia(t, srv.Admin(), ns)
}

// watchGrantsVia is watchGrants through cfg (through a front that follows
// a failover of the servers, say).
func watchGrantsVia(t *testing.T, cfg *rest.Config, ns string) *grantLog {
	t.Helper()
	b, err := kubernetes.New(cfg, kubernetes.WithNamespace(ns))
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

// The terms and the register's writes the tasks saw (internal/termlog).
type (
	seenTerm = termlog.Seen
	termLog  = termlog.Log
)

func newTermLog() *termLog { return termlog.New(opTimeout) }

var eventually = termlog.Eventually

// staleWrites runs check.StaleWrites (I3) over the writes of the register
// in the order their answers came back. This backend's record versions
// are random, so they give no order; the order of the answers is the order
// the server applied the writes but for writes in flight together, and a
// stale write that got through (one held by a cut link or a paused server,
// applied after a write with a larger token) is answered after that write,
// so it is caught. It also returns the number of writes accepted and
// refused.
func staleWrites(l *termLog) (errs []error, accepted, refused int) {
	answered := l.Writes()
	for _, w := range answered {
		if w.Accepted {
			accepted++
		} else {
			refused++
		}
	}
	return check.StaleWrites(answered), accepted, refused
}
