package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcd lays a lease out as a queue of candidacies: the keys
// <prefix>lease/<name>/<session ID>, each created by an Acquire, bound to
// its session's etcd lease, and deleted by its Release, its withdrawal or
// by etcd when its session ends (revoked or expired). The oldest
// candidacy, the lowest create revision under <prefix>lease/<name>/, holds
// the lease, and the token is its create revision (backend/etcd's package
// documentation). The watcher of the test process reads the members
// directly, not through any client's proxies, and keeps each name's queue.
//
// Grant ends: a prefix watch of <prefix>lease/ with the previous values,
// from the revision after the first read: etcd delivers every event in
// revision order, none missed while the watch lasts (it resumes at the
// next revision on another member when its member stops), so no change of
// a queue can go unseen; the delete of the oldest candidacy ends the grant
// whose token is its create revision, at the instant the watcher received
// it. The delete of any other candidacy ends no grant: it never held.
//
// Grant starts: a candidacy holds from the revision R at which it became
// the oldest: its own creation, if no older candidacy existed then, or
// the delete of the last older one. (A newer candidacy never gets in
// front: create revisions only grow.) The events of one revision are
// applied together before the queues' heads are compared, so that the
// deletes of several candidacies in one transaction or revocation begin
// no grant in between. etcd records no time, and the watcher receives the
// event at R after the holder may already have learnt of it (from the
// reply to its put at R, or from its own watch's event at R). A
// linearizable read, though, sent at instant s and answered at revision
// h < R, shows that no client had been told of revision R by s: the
// revision had not been committed by then, or the read would have seen
// it, and a reply or a watch event at R comes only after R is committed.
// So the watcher sends such a read every fenceEvery, and a grant that
// begins at revision R starts, for the checks, at the latest send instant
// of a read answered below R: no later than its holder could know of it.
const fenceEvery = 50 * time.Millisecond

func (c *etcdCluster) watchGrants(prefix string) (*grantWatch, error) {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientHost)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: fatalLogger("etcd client (grant watch)"), DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	w := &etcdGrantWatch{cli: cli, base: prefix + "lease/", log: newGrantLog(), queues: map[string]map[string]int64{}}
	ctx, cancel := context.WithCancel(context.Background())
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	sent := time.Now()
	resp, err := cli.Get(rctx, w.base, clientv3.WithPrefix())
	rcancel()
	if err != nil {
		cancel()
		cli.Close()
		return nil, fmt.Errorf("reading %s for the grant watch: %w", w.base, err)
	}
	w.fence(sent, resp.Header.Revision)
	for _, kv := range resp.Kvs { // none at the start of a run; begun at the zero time if any
		w.add(string(kv.Key), kv.CreateRevision)
	}
	for name := range w.queues {
		_, create := w.head(name)
		w.log.begin(name, uint64(create), time.Time{}, time.Now())
	}
	wch := cli.Watch(ctx, w.base, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	var wg sync.WaitGroup
	wg.Go(func() { w.watch(ctx, wch) })
	wg.Go(func() { w.fences(ctx) })
	return &grantWatch{log: w.log, stop: func() {
		cancel()
		wg.Wait()
		cli.Close()
	}}, nil
}

type etcdGrantWatch struct {
	cli  *clientv3.Client
	base string
	log  *grantLog

	// queues holds each name's candidacies: create revisions by key. Only
	// the watch goroutine uses it (and watchGrants before it starts).
	queues map[string]map[string]int64

	mu     sync.Mutex
	fenced []etcdFence // in the order sent
}

// nameOf returns the lease name of a candidacy key.
func (w *etcdGrantWatch) nameOf(key string) string {
	name, _, _ := strings.Cut(strings.TrimPrefix(key, w.base), "/")
	return name
}

// add records the candidacy key created at revision create.
func (w *etcdGrantWatch) add(key string, create int64) {
	name := w.nameOf(key)
	if w.queues[name] == nil {
		w.queues[name] = map[string]int64{}
	}
	w.queues[name][key] = create
}

// remove forgets the candidacy key.
func (w *etcdGrantWatch) remove(key string) {
	name := w.nameOf(key)
	delete(w.queues[name], key)
	if len(w.queues[name]) == 0 {
		delete(w.queues, name)
	}
}

// head returns the oldest candidacy of name, the holder, if any.
func (w *etcdGrantWatch) head(name string) (key string, create int64) {
	for k, c := range w.queues[name] {
		if key == "" || c < create {
			key, create = k, c
		}
	}
	return key, create
}

// etcdFence is a linearizable read: sent at Sent, answered at revision Rev.
type etcdFence struct {
	Sent time.Time
	Rev  int64
}

func (w *etcdGrantWatch) fence(sent time.Time, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fenced = append(w.fenced, etcdFence{sent.Round(0), rev})
}

// startOf returns the instant a grant created at revision rev starts at
// for the checks: the latest send instant of a read answered below rev.
func (w *etcdGrantWatch) startOf(rev int64) time.Time {
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

// fences sends a linearizable read every fenceEvery until ctx ends.
func (w *etcdGrantWatch) fences(ctx context.Context) {
	tick := time.NewTicker(fenceEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		sent := time.Now()
		resp, err := w.cli.Get(rctx, w.base, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err == nil {
			w.fence(sent, resp.Header.Revision)
		}
	}
}

// watch records the grants the watch shows until ctx ends.
func (w *etcdGrantWatch) watch(ctx context.Context, wch clientv3.WatchChan) {
	type holder struct {
		key    string
		create int64
	}
	for resp := range wch {
		at := time.Now()
		if err := resp.Err(); err != nil {
			w.log.failed(fmt.Errorf("etcd watch of %s: %w", w.base, err))
			continue
		}
		// One revision at a time: the heads of the names it touches
		// before, its events, then the heads after.
		for evs := resp.Events; len(evs) > 0; {
			rev := evs[0].Kv.ModRevision
			n := 1
			for n < len(evs) && evs[n].Kv.ModRevision == rev {
				n++
			}
			before := map[string]holder{}
			for _, ev := range evs[:n] {
				name := w.nameOf(string(ev.Kv.Key))
				if _, ok := before[name]; !ok {
					k, c := w.head(name)
					before[name] = holder{k, c}
				}
			}
			for _, ev := range evs[:n] {
				key := string(ev.Kv.Key)
				switch {
				case ev.Type == clientv3.EventTypePut && ev.IsCreate():
					w.add(key, ev.Kv.CreateRevision)
				case ev.Type == clientv3.EventTypePut:
					// A candidacy's key written again: the same candidacy.
				default:
					// A delete: the key is all the queue needs. (etcd may
					// send a delete without its previous value, as it did
					// once in CI after a member's crash; that was counted
					// as the watch stopping short, though nothing was
					// missing.)
					w.remove(key)
				}
			}
			for name, old := range before {
				k, c := w.head(name)
				if k == old.key && c == old.create {
					continue
				}
				if old.key != "" {
					w.log.end(name, uint64(old.create), at)
				}
				if k != "" {
					w.log.begin(name, uint64(c), w.startOf(rev), at)
				}
			}
			evs = evs[n:]
		}
	}
	if ctx.Err() == nil {
		w.log.failed(errors.New("etcd watch of " + w.base + " ended"))
	}
}
