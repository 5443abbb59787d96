package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/kubetest"
)

// Kubernetes lays a lease out as one Lease object per name, "simba-l-<h>",
// whose annotation simba.io/queue holds its candidacies, oldest first, each
// a token (from the object's counter, simba.io/last, bumped in the same
// write) and a session id; a session is a Lease object "simba-s-<id>",
// created before its candidacies and never again once deleted (by its
// Close, by its own client past its deadline, or by a contender that saw it
// unchanged for TTL + margin). The first candidacy of a queue holds the
// lease while its session's object exists; every change of a queue is one
// compare-and-swap Update of the name's object, and tokens are appended in
// order, so a queue's head only moves on to larger tokens
// (backend/kubernetes's package documentation).
//
// The watcher of the test process follows the namespace's simba objects as
// the administrator, straight to the server (not through any client's
// proxy), with kubetest.WatchLeases: a list, then a watch, which delivers
// every write in the order of the revisions of the etcd under the server
// (the resourceVersions), none missed while it lasts, and which
// WatchLeases resumes from the last revision it delivered after it ends.
// It shares the reading of the objects with backend/kubernetes's fault
// tests (kubetest.Queue, kubetest.SessionID).
//
// Grant ends, as those tests' grant log has them: a holding ends at the
// first of two writes, its candidacy leaving the head of the queue (a
// release, a withdrawal, or a contender's removal of a dead session's
// candidacies) and its session object's deletion (after which every
// contender takes the session for dead); End is when the watch delivered
// that write, at or after it.
//
// Grant starts: a candidacy holds from the revision R of the Update that
// made it the head (when its session's object exists then). The apiserver
// records no time, and the watch delivers the write after the holder may
// have learnt of it (from the reply to its Update, or its own watch). A
// list with resourceVersion "" is a consistent read: the apiserver reads
// etcd's current revision (a quorum read) after the request arrives, and
// answers at that revision or a later one. So a list sent at instant s and
// answered at revision h < R shows that R was not committed by s, and no
// client had been told of it. The watcher sends such a list (of nothing: a
// selector no object matches) every kubeFenceEvery, and a grant begun at
// revision R starts, for the checks, at the latest send instant of a list
// answered below R.
//
// When the watch cannot resume (the apiserver restarted, and its watch
// cache does not reach back), the watcher lists again: the writes since the
// last revision it had show only as the difference. A head that changed
// meanwhile ended by the list's answer; its successor started after the
// last revision seen (the start of a revision one past it); and every token
// between the old head and the new (or, for a queue now empty, up to its
// counter) may have held unseen in between: a blind range.
const kubeFenceEvery = 100 * time.Millisecond

func (k *kubeWorld) watchGrants(ns string) (*grantWatch, error) {
	if err := k.createSpace(ns); err != nil {
		return nil, fmt.Errorf("the grant watch: %w", err)
	}
	b, err := kubernetes.New(k.srv.Admin(), kubernetes.WithNamespace(ns))
	if err != nil {
		return nil, fmt.Errorf("the grant watch: %w", err)
	}
	w := &kubeGrantWatch{log: newGrantLog(), alive: map[string]bool{}, heads: map[string]*kubeHead{}}
	leases := b.Client().CoordinationV1().Leases(ns)
	ctx, cancel := context.WithCancel(context.Background())
	w.fence(ctx, leases.List) // so that the first grants have a start
	var wg sync.WaitGroup
	wg.Go(func() { kubetest.WatchLeases(ctx, leases, w) })
	wg.Go(func() {
		tick := time.NewTicker(kubeFenceEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				w.fence(ctx, leases.List)
			}
		}
	})
	return &grantWatch{log: w.log, stop: func() {
		cancel()
		wg.Wait()
		b.Close()
	}}, nil
}

type kubeGrantWatch struct {
	log *grantLog

	mu     sync.Mutex
	fenced []kubeFence // in the order sent

	// Owned by the goroutine of kubetest.WatchLeases.
	alive map[string]bool      // session ids whose objects exist
	heads map[string]*kubeHead // by lease name object
	rv    uint64               // the last revision taken in
}

// kubeHead is a lease name object's queue as last seen.
type kubeHead struct {
	name    string
	head    kubetest.Candidacy // zero: an empty queue
	holding bool               // head holds: its grant has begun and not ended
	last    uint64             // the counter
}

// kubeFence is a consistent list: sent at Sent, answered at revision Rev.
type kubeFence struct {
	Sent time.Time
	Rev  uint64
}

// fence sends a consistent list of nothing, and records its revision.
func (w *kubeGrantWatch) fence(ctx context.Context, list func(context.Context, metav1.ListOptions) (*coordv1.LeaseList, error)) {
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	sent := time.Now().Round(0)
	l, err := list(lctx, metav1.ListOptions{LabelSelector: "simba.io/kind=chaos-fence-matches-nothing"})
	if err != nil {
		return
	}
	rev, err := kubetest.ResourceVersion(l.ResourceVersion)
	if err != nil {
		w.log.failed(fmt.Errorf("the fences of the grant watch: %w", err))
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fenced = append(w.fenced, kubeFence{sent, rev})
}

// startOf returns the instant a grant begun at revision rev starts at for
// the checks: the latest send instant of a list answered below rev.
func (w *kubeGrantWatch) startOf(rev uint64) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var at time.Time
	for _, f := range w.fenced {
		if f.Rev < rev && f.Sent.After(at) {
			at = f.Sent
		}
	}
	return at
}

// Event takes in one write the watch delivered.
func (w *kubeGrantWatch) Event(typ watch.EventType, l *coordv1.Lease, rv uint64, at time.Time) {
	w.rv = rv
	switch kubetest.Kind(l) {
	case kubetest.KindSession:
		id, _ := kubetest.SessionID(l)
		if typ == watch.Deleted {
			w.sessionGone(id, at)
		} else {
			w.alive[id] = true
		}
	case kubetest.KindLease:
		h, head, ok := w.queue(typ, l)
		if ok {
			w.moveHead(h, head, w.startOf(rv), at)
		}
	}
}

// Listed takes in a list: the first, or one made after the watch could not
// go on.
func (w *kubeGrantWatch) Listed(items []coordv1.Lease, rv uint64, at time.Time) {
	start := w.startOf(w.rv + 1) // whatever changed did after the last revision seen
	w.rv = rv
	live := map[string]bool{}
	for i := range items {
		if id, ok := kubetest.SessionID(&items[i]); ok {
			live[id] = true
		}
	}
	for id := range w.alive {
		if !live[id] {
			w.sessionGone(id, at)
		}
	}
	for id := range live {
		w.alive[id] = true
	}
	for i := range items {
		l := &items[i]
		if kubetest.Kind(l) != kubetest.KindLease {
			continue
		}
		before := kubeHead{}
		if h := w.heads[l.Name]; h != nil {
			before = *h
		}
		h, head, ok := w.queue(watch.Modified, l)
		if !ok || head == before.head {
			continue
		}
		// Every token between the old head and the new one came and went
		// since the last revision seen, and may have held.
		after := before.last // a queue empty before: the tokens after its counter
		if before.head.T != 0 {
			after = before.head.T
		}
		upTo := h.last
		if head.T != 0 {
			upTo = head.T - 1
		}
		if upTo > after {
			w.log.missed(after, upTo, fmt.Sprintf("candidacies of %s between two lists of the grant watch (the watch could not resume)", h.name))
		}
		w.moveHead(h, head, start, at)
	}
}

// queue reads a lease name object's write: its record, and its new head.
func (w *kubeGrantWatch) queue(typ watch.EventType, l *coordv1.Lease) (h *kubeHead, head kubetest.Candidacy, ok bool) {
	name, q, last, err := kubetest.Queue(l)
	if err != nil {
		w.log.failed(fmt.Errorf("the grant watch: %w", err))
		return nil, head, false
	}
	h = w.heads[l.Name]
	if h == nil {
		h = &kubeHead{name: name}
		w.heads[l.Name] = h
	}
	h.last = max(h.last, last)
	if len(q) > 0 && typ != watch.Deleted {
		head = q[0]
	}
	return h, head, true
}

// moveHead takes in that h's head is now head, as of a write after start,
// delivered at at.
func (w *kubeGrantWatch) moveHead(h *kubeHead, head kubetest.Candidacy, start, at time.Time) {
	if head == h.head {
		return
	}
	if h.holding {
		w.log.end(h.name, h.head.T, at)
		h.holding = false
	}
	h.head = head
	if head.T != 0 && w.alive[head.S] {
		h.holding = true
		w.log.begin(h.name, head.T, start, at)
	}
}

// sessionGone takes in the deletion of session id's object: the holdings
// of its candidacies end.
func (w *kubeGrantWatch) sessionGone(id string, at time.Time) {
	delete(w.alive, id)
	for _, h := range w.heads {
		if h.holding && h.head.S == id {
			w.log.end(h.name, h.head.T, at)
			h.holding = false
		}
	}
}
