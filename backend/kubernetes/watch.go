package kubernetes

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/wake"
)

// observer remembers, per session object, the resourceVersion last seen
// and the instant (monotonic, this process's clock) it was first seen: a
// contender's evidence that a session stopped renewing (see the package
// documentation).
type observer struct {
	mu   sync.Mutex
	seen map[string]sighting
}

type sighting struct {
	rv    string
	since time.Time
}

func newObserver() *observer { return &observer{seen: map[string]sighting{}} }

// observe records that the object name was at version rv now, and returns
// the instant this process first saw it at rv.
func (o *observer) observe(name, rv string) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.seen[name]
	if !ok || s.rv != rv {
		s = sighting{rv: rv, since: time.Now()}
		o.seen[name] = s
	}
	return s.since
}

func (o *observer) forget(name string) {
	o.mu.Lock()
	delete(o.seen, name)
	o.mu.Unlock()
}

// hub runs the backend's one list-and-watch of its namespace's simba
// objects and wakes subscribers: by object name ("o:<name>"), by group
// ("g:<group label>"), deletions by object name ("d:<name>"), and record watchers by key prefix. A subscriber's
// function runs on the hub's goroutine and must not block.
type hub struct {
	b *Backend

	subs wake.Registry // topics "o:", "d:" + object, "g:" + group; prefixes of record keys

	once   sync.Once // start
	mu     sync.Mutex
	groups map[string][]string // session object name -> its group labels
	fenced map[string][]string // lease name object -> the keys of its records
}

func newHub(b *Backend) *hub {
	return &hub{b: b, groups: map[string][]string{}, fenced: map[string][]string{}}
}

func (h *hub) subscribe(topic string, f func()) (cancel func()) { return h.subs.Subscribe(topic, f) }

func (h *hub) subscribeRecords(prefix string, f func()) (cancel func()) {
	return h.subs.SubscribePrefix(prefix, f)
}

// start starts the list-and-watch, once.
func (h *hub) start() { h.once.Do(func() { h.b.wg.Go(h.run) }) }

func (h *hub) run() {
	ctx := h.b.ctx
	for attempt := 0; ctx.Err() == nil; attempt++ {
		ok := h.watchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if ok {
			attempt = 0
		}
		backoff.Sleep(ctx, backoff.Wait(attempt+1, 5*time.Second))
	}
}

// watchOnce lists, wakes everyone, and follows the watch until it ends; it
// reports whether the watch delivered anything.
func (h *hub) watchOnce(ctx context.Context) bool {
	sel := labelManaged + "=" + managedBy
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	list, err := h.b.leases.List(lctx, metav1.ListOptions{LabelSelector: sel})
	cancel()
	if err != nil {
		h.failed("listing leases for the watch", err)
		return false
	}
	groups := map[string][]string{}
	fenced := map[string][]string{}
	for i := range list.Items {
		l := &list.Items[i]
		switch l.Labels[labelKind] {
		case kindSession:
			h.b.obs.observe(l.Name, l.ResourceVersion)
			groups[l.Name] = groupsOf(l)
		case kindLease:
			fenced[l.Name] = fencedKeys(l)
		}
	}
	h.mu.Lock()
	h.groups = groups
	h.fenced = fenced
	h.mu.Unlock()
	h.wakeAll()
	w, err := h.b.leases.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		h.failed("watching leases", err)
		return false
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return true
		case ev, ok := <-w.ResultChan():
			if !ok {
				return true
			}
			switch ev.Type {
			case watch.Error:
				h.b.log.Debug("simba/kubernetes: the watch ended with an error; listing again", "event", ev.Object)
				return true
			case watch.Added, watch.Modified, watch.Deleted:
				if l, ok := ev.Object.(*coordv1.Lease); ok {
					h.event(ev.Type, l)
				}
			}
		}
	}
}

// failed logs a list or watch that failed: a refusal (missing
// permissions, rejected credentials) as a warning, since it lasts until
// someone acts, and waits fall back to polling meanwhile; anything else
// (the server restarting, the link down) at debug level.
func (h *hub) failed(what string, err error) {
	if h.b.closed() {
		return
	}
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		h.b.log.Warn("simba/kubernetes: the backend's watch is refused; waits and fail-over fall back to polling", "err", h.b.apiErr(what, err))
		return
	}
	h.b.log.Debug("simba/kubernetes: "+what, "err", err)
}

// fencedKeys lists the keys of the records kept in a lease name object.
func fencedKeys(l *coordv1.Lease) []string {
	var keys []string
	for ann := range l.Annotations {
		if strings.HasPrefix(ann, fencedAnnPfx) {
			var f fencedRecord
			if json.Unmarshal([]byte(l.Annotations[ann]), &f) == nil {
				keys = append(keys, f.K)
			}
		}
	}
	return keys
}

func groupsOf(l *coordv1.Lease) []string {
	var gs []string
	for k := range l.Labels {
		if strings.HasPrefix(k, groupLabelPfx) {
			gs = append(gs, k)
		}
	}
	return gs
}

func (h *hub) event(t watch.EventType, l *coordv1.Lease) {
	topics := []string{"o:" + l.Name}
	if t == watch.Deleted {
		topics = append(topics, "d:"+l.Name)
	}
	var keys []string
	h.mu.Lock()
	switch l.Labels[labelKind] {
	case kindSession:
		if t == watch.Deleted {
			h.b.obs.forget(l.Name)
		} else {
			h.b.obs.observe(l.Name, l.ResourceVersion)
		}
		gs := append(groupsOf(l), h.groups[l.Name]...)
		if t == watch.Deleted {
			delete(h.groups, l.Name)
		} else {
			h.groups[l.Name] = groupsOf(l)
		}
		for _, g := range gs {
			topics = append(topics, "g:"+g)
		}
	case kindRecord:
		keys = []string{l.Annotations[annKey]}
	case kindLease:
		// The records kept in the object, now and before this event.
		keys = append(fencedKeys(l), h.fenced[l.Name]...)
		if t == watch.Deleted {
			delete(h.fenced, l.Name)
		} else {
			h.fenced[l.Name] = fencedKeys(l)
		}
	}
	h.mu.Unlock()
	wake.Call(h.subs.Collect(topics, keys))
}

func (h *hub) wakeAll() { wake.Call(h.subs.All()) }
