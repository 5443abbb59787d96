package simba

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/internal/records"
)

// opsView is the client's view of the cluster-wide operations kept in the
// backend's records (disable, trigger, resign, drain; see package admin),
// kept current by one watch per client. Tasks ask it whether they may
// contend and subscribe to its changes.
type opsView struct {
	c *Client

	mu       sync.Mutex
	disabled map[string]bool
	drained  map[string]bool
	trigger  map[string]uint64            // lease -> version of its trigger record
	args     map[string]map[string]string // lease -> its trigger's arguments
	resign   map[string]records.Op        // lease -> request
	resignV  map[string]uint64            // lease -> version of its resign record
	consumed map[string]uint64            // key -> version carried out, until a listing no longer shows it
	changed  chan struct{}                // closed and replaced on every change
	subs     map[int]func()
	nextSub  int
}

func newOpsView(c *Client) *opsView {
	return &opsView{
		c:        c,
		disabled: map[string]bool{},
		drained:  map[string]bool{},
		trigger:  map[string]uint64{},
		args:     map[string]map[string]string{},
		resign:   map[string]records.Op{},
		resignV:  map[string]uint64{},
		consumed: map[string]uint64{},
		changed:  make(chan struct{}),
		subs:     map[int]func(){},
	}
}

// watch keeps the view current on every session until the client closes.
// Backends without records have no operations: it returns at once.
func (o *opsView) watch() {
	c := o.c
	for {
		g, err := c.awaitGeneration(c.ctx)
		if err != nil {
			return
		}
		rec, ok := g.sess.(backend.Records)
		if !ok {
			return
		}
		o.follow(g, rec)
	}
}

// follow reads the operations on session g until it ends.
func (o *opsView) follow(g *generation, rec backend.Records) {
	ctx, cancel := context.WithCancel(o.c.ctx)
	defer cancel()
	defer context.AfterFunc(g.ctx, cancel)()
	// The watch tells of changes; a re-read every few TTLs is the safety net
	// (every renewal period when the watch could not be set).
	every := 5 * g.ttl
	hints, err := rec.WatchRecords(ctx, records.OpsPrefix)
	if err != nil && ctx.Err() == nil {
		o.c.log.Warn("watching operations failed; reading them every renewal period", "err", err)
		every = g.ttl / 3
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		list, err := rec.ListRecords(ctx, records.OpsPrefix)
		if err == nil {
			o.apply(list)
		} else if ctx.Err() == nil {
			o.c.log.Warn("reading operations failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-hints:
			if !ok {
				hints = nil
			}
		case <-tick.C:
		}
	}
}

// refresh reads the operations now, on session g, into the view: a node that
// just won a lease checks it has not been disabled or drained while its
// watch was catching up, before the term's first run. Like apply, it takes
// a record for an operation in force only if it decodes (see decodeOp). It
// reports whether the read succeeded (backends without records have no
// operations: it did).
func (o *opsView) refresh(g *generation, stop context.Context) error {
	rec, ok := g.sess.(backend.Records)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.ttl/3)
	defer cancel()
	defer context.AfterFunc(stop, cancel)()
	list, err := rec.ListRecords(ctx, records.OpsPrefix)
	if err != nil {
		return err
	}
	o.add(list)
	return nil
}

// add takes the disables and drains of list into the view. Only add: a
// read may be older than one the watch applied, and must not undo a
// disable or a drain that the watch already delivered.
func (o *opsView) add(list []backend.Record) {
	o.mu.Lock()
	changed := false
	for _, r := range list {
		if _, err := decodeOp(r); err != nil {
			continue // apply warns of it
		}
		switch {
		case hasPrefix(r.Key, records.DisabledPrefix):
			if name := records.Name(r.Key, records.DisabledPrefix); !o.disabled[name] {
				o.disabled[name], changed = true, true
			}
		case hasPrefix(r.Key, records.DrainPrefix):
			if name := records.Name(r.Key, records.DrainPrefix); !o.drained[name] {
				o.drained[name], changed = true, true
			}
		}
	}
	o.mu.Unlock()
	if changed {
		o.notify()
	}
}

// checkStart reads the operations before the first run of term, on its
// session g, trying again with a backoff until a read succeeds or the term
// ends (stop, the term's run ctx, ends with it and cuts a read short):
// once an operator's disable (or drain) is recorded, a term that begins
// later finds it here and is revoked before it runs anything. The read is
// linearizable on every backend (etcd's default reads; ZooKeeper's after
// the session's own write or watch event that granted the lease, or the
// listing its set watch keeps, as current; PostgreSQL's and the
// apiserver's), so it sees every operation recorded before the lease was
// granted. Where the grant listed the operations itself, in the snapshot
// that granted the lease (backend.GrantSnapshot: the queue read of the
// PostgreSQL and MySQL backends), that listing is the read: no request.
func (o *opsView) checkStart(g *generation, term *Term, lease backend.Lease, stop context.Context) {
	if gs, ok := lease.(backend.GrantSnapshot); ok {
		if list, ok := gs.RecordsAtGrant(records.OpsPrefix); ok {
			o.add(list)
			return
		}
	}
	for attempt := 1; ; attempt++ {
		err := o.refresh(g, stop)
		if err == nil {
			return
		}
		o.c.log.Debug("reading operations at a term's start failed; the term runs nothing until a read succeeds", "election", term.ref.Election, "token", term.ref.Token, "err", err, "attempt", attempt)
		t := time.NewTimer(backoff.Wait(attempt, g.ttl/3))
		select {
		case <-t.C:
		case <-term.Revoked():
			t.Stop()
			return
		}
	}
}

// apply replaces the view with the records read, and tells the subscribers
// if anything changed.
func (o *opsView) apply(list []backend.Record) {
	disabled, drained := map[string]bool{}, map[string]bool{}
	trigger, resignV := map[string]uint64{}, map[string]uint64{}
	args := map[string]map[string]string{}
	resign := map[string]records.Op{}
	o.mu.Lock()
	listed := map[string]bool{}
	for _, r := range list {
		listed[r.Key] = true
	}
	for key := range o.consumed {
		if !listed[key] {
			delete(o.consumed, key) // its deletion is seen: forget it
		}
	}
	consumed := maps.Clone(o.consumed)
	o.mu.Unlock()
	for _, r := range list {
		if v, ok := consumed[r.Key]; ok && v == r.Version {
			continue // carried out already; the listing predates its deletion
		}
		op, err := decodeOp(r)
		if err != nil {
			o.c.log.Warn("unreadable operation record", "key", r.Key, "err", err)
			continue
		}
		switch k := r.Key; {
		case hasPrefix(k, records.DisabledPrefix):
			disabled[records.Name(k, records.DisabledPrefix)] = true
		case hasPrefix(k, records.DrainPrefix):
			drained[records.Name(k, records.DrainPrefix)] = true
		case hasPrefix(k, records.TriggerPrefix):
			name := records.Name(k, records.TriggerPrefix)
			trigger[name] = r.Version
			if len(op.Args) > 0 {
				args[name] = op.Args
			}
		case hasPrefix(k, records.ResignPrefix):
			name := records.Name(k, records.ResignPrefix)
			resign[name], resignV[name] = op, r.Version
		}
	}
	o.mu.Lock()
	same := maps.Equal(disabled, o.disabled) && maps.Equal(drained, o.drained) &&
		maps.Equal(trigger, o.trigger) && maps.Equal(resignV, o.resignV)
	if same {
		o.mu.Unlock()
		return
	}
	o.disabled, o.drained, o.trigger, o.args, o.resign, o.resignV = disabled, drained, trigger, args, resign, resignV
	o.mu.Unlock()
	o.notify()
}

// decodeOp decodes an operation record. A record that does not decode is
// not in force, wherever the view reads it (apply and refresh): it was not
// written by simba (admin writes every operation as JSON), admin reports it
// as a problem and shows it as not in force, and a stray key must not stop
// an election or drain a member that no operator stopped. Both paths must
// agree: otherwise a node that has just won a lease would take a garbage
// disable for one, from its key alone, until the next change of the
// operations.
func decodeOp(r backend.Record) (records.Op, error) {
	var op records.Op
	err := records.Decode(r.Value, &op)
	return op, err
}

// notify wakes the waiters and calls the subscribers after a change.
func (o *opsView) notify() {
	o.mu.Lock()
	close(o.changed)
	o.changed = make(chan struct{})
	subs := make([]func(), 0, len(o.subs))
	for _, f := range o.subs {
		subs = append(subs, f)
	}
	o.mu.Unlock()
	for _, f := range subs {
		f()
	}
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// subscribe calls f after every change of the view, until stop.
func (o *opsView) subscribe(f func()) (stop func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id := o.nextSub
	o.nextSub++
	o.subs[id] = f
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		delete(o.subs, id)
	}
}

// changes returns a channel closed at the next change of the view.
func (o *opsView) changes() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changed
}

// blocked returns why the client must not hold ref's lease now, or 0.
func (o *opsView) blocked(ref TermRef, member string) RevokeReason {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.disabled[ref.Election] || (ref.Group != "" && o.disabled[ref.Group]):
		return RevokeDisabled
	case member != "" && o.drained[member]:
		return RevokeDrained
	}
	return 0
}

// isDrained reports whether member is drained.
func (o *opsView) isDrained(member string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.drained[member]
}

// resigns reports whether an operator asked the holder of lease with token
// to hand off, and the version of the request.
func (o *opsView) resigns(lease string, token uint64) (uint64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	op, ok := o.resign[lease]
	if !ok || (op.Token != 0 && op.Token != token) {
		return 0, false
	}
	return o.resignV[lease], true
}

// triggered returns the version of a trigger request for lease, and the
// arguments it carries (records.Op's Args; nil for none). The map is the
// view's: do not change it.
func (o *opsView) triggered(lease string) (uint64, map[string]string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	v, ok := o.trigger[lease]
	return v, o.args[lease], ok
}

// consume deletes an operation record the client has carried out, if it is
// still the version it saw, on session g. The view forgets it at once, so
// that it is not carried out twice before the watch reports the deletion.
func (o *opsView) consume(g *generation, key string, version uint64) {
	o.mu.Lock()
	o.consumed[key] = version
	switch {
	case hasPrefix(key, records.TriggerPrefix):
		if name := records.Name(key, records.TriggerPrefix); o.trigger[name] == version {
			delete(o.trigger, name)
			delete(o.args, name)
		}
	case hasPrefix(key, records.ResignPrefix):
		if name := records.Name(key, records.ResignPrefix); o.resignV[name] == version {
			delete(o.resign, name)
			delete(o.resignV, name)
		}
	}
	o.mu.Unlock()
	rec, ok := g.sess.(backend.Records)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.ttl)
	defer cancel()
	err := rec.DeleteRecord(ctx, key, backend.Condition{IfVersion: true, Version: version})
	if err != nil && !errors.Is(err, backend.ErrConflict) {
		o.c.log.Warn("clearing a carried-out operation failed", "key", key, "err", err)
	}
}

// waitUnblocked waits until ref may be contended for, or ctx ends.
func (o *opsView) waitUnblocked(ctx context.Context, ref TermRef, member func() string) error {
	for {
		ch := o.changes()
		if o.blocked(ref, member()) == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// String describes the view, for logs.
func (o *opsView) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprintf("disabled %v, drained %v, triggers %d, resignations %d", o.disabled, o.drained, len(o.trigger), len(o.resign))
}
