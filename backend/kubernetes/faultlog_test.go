package kubernetes_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/kubetest"
)

// This file holds what the fault tests of the simba client on this backend
// share: a record of the terms the tasks saw, the fenced register they
// write, and the times the sessions' objects were deleted. It follows
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

// deletions records when each session object of a namespace was deleted,
// from a watch of the test's own (the administrator's, straight to the
// server): a holding of this backend ends when its session's object is
// deleted (by a contender, after TTL + margin of observation, or by its own
// client past its deadline), so that instant is the holding's end, the
// grant of check.AgainstGrants. The time is when the watch delivered the
// deletion, so at most the watch's lag after it: the check is weaker by
// that lag, a few milliseconds on this machine.
type deletions struct {
	mu   sync.Mutex
	at   map[string]time.Time // session id -> deletion seen
	stop context.CancelFunc
	done chan struct{}
}

// watchDeletions starts recording the deletions of session objects in ns,
// watching again after an error (a restart of the server) from the last
// resourceVersion seen, so that no deletion is missed, until the test ends.
func watchDeletions(t *testing.T, srv *kubetest.Server, ns string) *deletions {
	b, err := kubernetes.New(srv.Admin(), kubernetes.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	leases := b.Client().CoordinationV1().Leases(ns)
	ctx, cancel := context.WithCancel(context.Background())
	d := &deletions{at: map[string]time.Time{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		rv := "" // the last seen: a watch again after an error resumes from it
		for ctx.Err() == nil {
			w, err := leases.Watch(ctx, metav1.ListOptions{LabelSelector: "simba.io/kind=session", ResourceVersion: rv})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			for ev := range w.ResultChan() {
				m, ok := ev.Object.(metav1.Object)
				if !ok {
					continue // an error event: watch again
				}
				rv = m.GetResourceVersion()
				if ev.Type == watch.Deleted {
					d.mu.Lock()
					d.at[strings.TrimPrefix(m.GetName(), "simba-s-")] = time.Now()
					d.mu.Unlock()
				}
			}
			w.Stop()
		}
	}()
	t.Cleanup(func() { d.stop(); <-d.done; b.Close() })
	return d
}

// deleted returns when the object of session id was seen deleted.
func (d *deletions) deleted(id string) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.at[id]
	return at, ok
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
