package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/wake"
)

// watcher is one WatchMembers channel.
type watcher struct {
	s          *session      // the session watching, nil for a view's watcher
	v          *view         // the view watching, nil for a session's watcher
	n          *Node         // the node of s or v, through which hints go
	group      string        // or the key prefix, for a records watcher
	records    bool          // a WatchRecords watcher
	ch         chan struct{} // buffer of one; guarded by b.mu
	closed     bool
	registered bool
	stop       func() bool // deregisters the ctx callback; nil until set
}

// hint signals a possible change, without blocking. b.mu is held.
func (w *watcher) hint() {
	if !w.closed {
		wake.Poke(w.ch)
	}
}

// close closes the channel, once. b.mu is held.
func (w *watcher) close() {
	if !w.closed {
		w.closed = true
		close(w.ch)
	}
}

// Join makes the session a member of group. An empty m.ID is replaced by the
// session's ID; m.Data is copied.
func (s *session) Join(ctx context.Context, group string, m backend.Member) error {
	if err := checkName("group", group); err != nil {
		return err
	}
	if len(m.Data) > backend.MaxMemberData {
		return fmt.Errorf("simba/memory: join %q: member data of %d bytes exceeds %d", group, len(m.Data), backend.MaxMemberData)
	}
	rec := backend.Member{ID: m.ID, Session: s.id, Data: clone(m.Data)}
	if rec.ID == "" {
		rec.ID = s.id
	}
	b := s.b
	return s.n.exchange(ctx, opJoin, s, func() (func(), error) {
		if !s.live {
			return nil, sessionDone(opJoin)
		}
		members, ok := b.groups[group]
		if !ok {
			members = make(map[string]backend.Member)
			b.groups[group] = members
		}
		members[s.id] = rec
		s.groups[group] = struct{}{}
		b.hint(group)
		return nil, nil
	})
}

// Leave ends the session's membership of group, if any.
func (s *session) Leave(ctx context.Context, group string) error {
	if err := checkName("group", group); err != nil {
		return err
	}
	b := s.b
	return s.n.exchange(ctx, opLeave, s, func() (func(), error) {
		if !s.live {
			return nil, sessionDone(opLeave)
		}
		if _, ok := s.groups[group]; ok {
			b.removeMember(group, s)
		}
		return nil, nil
	})
}

// Members lists the members of group, ordered by Session.
func (s *session) Members(ctx context.Context, group string) ([]backend.Member, error) {
	if err := checkName("group", group); err != nil {
		return nil, err
	}
	b := s.b
	var out []backend.Member
	err := s.n.exchange(ctx, opMembers, s, func() (func(), error) {
		if !s.live {
			return nil, sessionDone(opMembers)
		}
		out = b.members(group)
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// HeldLeases lists the leases held now whose names start with prefix,
// sorted: the optional [backend.LeaseLister] capability.
func (s *session) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	b := s.b
	var out []string
	err := s.n.exchange(ctx, opHeldLeases, s, func() (func(), error) {
		if !s.live {
			return nil, sessionDone(opHeldLeases)
		}
		out = b.heldLeases(prefix)
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// heldLeases returns the names of the leases held now that start with
// prefix, sorted. b.mu is held.
func (b *Backend) heldLeases(prefix string) []string {
	var out []string
	for name := range b.leases {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// WatchMembers returns a channel that receives a hint after every change to
// the members of group, delivered through the node's notifications. It is
// closed when ctx ends or the session is over.
func (s *session) WatchMembers(ctx context.Context, group string) (<-chan struct{}, error) {
	if err := checkName("group", group); err != nil {
		return nil, err
	}
	return s.watch(ctx, &watcher{s: s, n: s.n, group: group, ch: make(chan struct{}, 1)}, opWatchMembers)
}

// watch registers w on the server and arranges for it to end with ctx.
func (s *session) watch(ctx context.Context, w *watcher, k op) (<-chan struct{}, error) {
	return s.n.watch(ctx, w, k, s, func() error {
		if !s.live {
			return sessionDone(k)
		}
		return nil
	}, &s.watchers)
}

// watch carries the registration of w, for sess (nil for a view), to the
// server: there, unless may says otherwise, w starts receiving the hints
// of its group or of the records and is added to *owned, which the owner
// closes when it ends. w also ends with ctx.
func (n *Node) watch(ctx context.Context, w *watcher, k op, sess *session, may func() error, owned *[]*watcher) (<-chan struct{}, error) {
	b := n.b
	err := n.exchange(ctx, k, sess, func() (func(), error) {
		if err := may(); err != nil {
			return nil, err
		}
		w.registered = true
		if w.records {
			b.recWatchers = append(b.recWatchers, w)
		} else {
			b.watchers[w.group] = append(b.watchers[w.group], w)
		}
		*owned = append(*owned, w)
		return func() { b.unwatch(w) }, nil
	})
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.unwatch(w)
		w.close()
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	if !w.registered { // ended already
		stop()
		w.close()
		return w.ch, nil
	}
	w.stop = stop
	return w.ch, nil
}

// unwatch removes w from the server's watchers. b.mu is held.
func (b *Backend) unwatch(w *watcher) {
	if !w.registered {
		return
	}
	w.registered = false
	if w.records {
		b.recWatchers = slices.DeleteFunc(b.recWatchers, func(x *watcher) bool { return x == w })
	} else {
		b.watchers[w.group] = slices.DeleteFunc(b.watchers[w.group], func(x *watcher) bool { return x == w })
		if len(b.watchers[w.group]) == 0 {
			delete(b.watchers, w.group)
		}
	}
	if w.s != nil {
		w.s.watchers = slices.DeleteFunc(w.s.watchers, func(x *watcher) bool { return x == w })
	} else {
		w.v.watchers = slices.DeleteFunc(w.v.watchers, func(x *watcher) bool { return x == w })
	}
	if w.stop != nil {
		w.stop()
	}
}

// hint tells every watcher of group, through its node, that the members may
// have changed. b.mu is held.
func (b *Backend) hint(group string) {
	for _, w := range b.watchers[group] {
		w.n.notify(w.hint)
	}
}

// removeMember removes the membership of s in group and hints the group's
// watchers. b.mu is held.
func (b *Backend) removeMember(group string, s *session) {
	delete(s.groups, group)
	members := b.groups[group]
	delete(members, s.id)
	if len(members) == 0 {
		delete(b.groups, group)
	}
	b.hint(group)
}

// members returns copies of the members of group, ordered by Session. b.mu
// is held.
func (b *Backend) members(group string) []backend.Member {
	members := b.groups[group]
	out := make([]backend.Member, 0, len(members))
	for _, id := range slices.Sorted(maps.Keys(members)) {
		m := members[id]
		m.Data = clone(m.Data)
		out = append(out, m)
	}
	return out
}

// clone copies p; the copy of an empty slice is nil.
func clone(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	return slices.Clone(p)
}
