package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/internal/etcdtest"
)

// etcd lays a lease out as the key <prefix>lease/<name>, created by the
// Acquire that takes it, bound to the holder's etcd lease, and deleted by
// its Release or by etcd when the holder's session ends (revoked or
// expired); the token is the key's create revision (backend/etcd's
// package documentation). The watcher of the test process reads the
// members directly, not through any client's proxies.
//
// Grant ends: a prefix watch of <prefix>lease/ with the previous values,
// from the revision after the first read: etcd delivers every event in
// revision order, none missed while the watch lasts (it resumes at the
// next revision on another member when its member stops), so no grant can
// go unseen; a delete event ends the grant whose token is the previous
// value's create revision, at the instant the watcher received it.
//
// Grant starts: etcd records no time, and the watcher receives the create
// event after the holder may already have received its reply. A
// linearizable read, though, sent at instant s and answered at revision
// h < R, shows that the write at revision R had not been answered to
// its client by s (or the read would have seen it). So the watcher sends
// such a read every fenceEvery, and a grant created at revision R starts,
// for the checks, at the latest send instant of a read answered below R:
// no later than its holder could know of it.
const fenceEvery = 50 * time.Millisecond

func (c *etcdCluster) watchGrants(prefix string) (*grantWatch, error) {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientHost)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: etcdtest.FatalLogger("etcd client (grant watch)"), DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	w := &etcdGrantWatch{cli: cli, base: prefix + "lease/", log: newGrantLog()}
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
		w.log.begin(strings.TrimPrefix(string(kv.Key), w.base), uint64(kv.CreateRevision), time.Time{}, time.Now())
	}
	wch := cli.Watch(ctx, w.base, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1), clientv3.WithPrevKV())
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

	mu     sync.Mutex
	fenced []etcdFence // in the order sent
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
	for resp := range wch {
		at := time.Now()
		if err := resp.Err(); err != nil {
			w.log.failed(fmt.Errorf("etcd watch of %s: %w", w.base, err))
			continue
		}
		for _, ev := range resp.Events {
			name := strings.TrimPrefix(string(ev.Kv.Key), w.base)
			switch {
			case ev.Type == clientv3.EventTypePut && ev.IsCreate():
				w.log.begin(name, uint64(ev.Kv.CreateRevision), w.startOf(ev.Kv.CreateRevision), at)
			case ev.Type == clientv3.EventTypePut:
				// A holding's key written again: the same holding.
			case ev.PrevKv == nil:
				w.log.failed(fmt.Errorf("etcd watch of %s: the delete of %s at revision %d came without its previous value", w.base, ev.Kv.Key, ev.Kv.ModRevision))
			default:
				w.log.end(name, uint64(ev.PrevKv.CreateRevision), at)
			}
		}
	}
	if ctx.Err() == nil {
		w.log.failed(errors.New("etcd watch of " + w.base + " ended"))
	}
}
