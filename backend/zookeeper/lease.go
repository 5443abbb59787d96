package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/lost"
	"github.com/simba-go/simba/backend/kit/wake"
)

// leaseState is where a candidacy stands.
type leaseState int

const (
	leasePending leaseState = iota // Acquire is registering it, or it waits
	leaseHeld
	leaseEnded
)

// lease is one candidacy of the session for a lease, and the holding it
// becomes: the ephemeral sequential znode
// <root>/lease/<name>/<sid>-<nonce>-<seq> created by Acquire. It implements
// [backend.Lease].
type lease struct {
	s       *session
	name    string
	sig     *lost.Signal  // Lost
	wake    chan struct{} // buffer of one: older emptied, or the znode went
	path    string        // the candidacy znode, once created (guarded by s.mu until held)
	token   uint64        // the znode's czxid (set before it is held)
	version int32         // the znode's data version when read

	// Guarded by s.mu.
	state     leaseState
	older     map[string]bool // pending: older candidacies not known to be gone
	releasing bool            // Release or a re-Acquire is deleting the znode
	deleted   bool            // the znode was deleted while pending or releasing
}

// Name returns the lease name.
func (l *lease) Name() string { return l.name }

// Token returns the czxid of the candidacy's znode: the zxid of the
// transaction that created it. The candidacy holds only once every older
// candidacy of the name is gone, and every candidacy created later has a
// larger czxid, so the token is larger than that of every earlier holding.
func (l *lease) Token() uint64 { return l.token }

// Lost is closed when the znode is deleted by anything but Release, or the
// session is over. It hears of a deletion from a watch on the
// znode, so it closes late, or only once the session is declared over,
// while the server cannot be reached.
func (l *lease) Lost() <-chan struct{} { return l.sig.C() }

// OnLost arranges for f to run once when Lost is closed: it implements
// [backend.LostNotifier]. f runs on go-zookeeper's receiving goroutine or
// on the goroutine that ends the session, with the session's lock held,
// after the functions registered before it, or before OnLost returns when
// Lost is closed already; it must not block nor call the session. stop
// cancels the call and reports whether it did so before f started.
func (l *lease) OnLost(f func()) (stop func() bool) { return l.sig.OnLost(f) }

// endLocked ends the holding; lose closes the Lost channel and runs the
// OnLost functions, and otherwise (released by its owner) Lost stays open.
// s.mu is held.
func (l *lease) endLocked(lose bool) {
	if l.state == leaseEnded {
		return
	}
	l.state = leaseEnded
	if lose {
		l.sig.Lose()
	} else {
		l.sig.Released()
	}
}

// signalLocked wakes the Acquire waiting on l. s.mu is held.
func (l *lease) signalLocked() { wake.Poke(l.wake) }

// leaseEvent handles a watch event for the candidacy znode path of lease
// name: the session's own (Lost), or an older one a waiting Acquire counts.
func (s *session) leaseEvent(name, path string, typ zk.EventType) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[name]
	switch {
	case l == nil:
	case path != l.path:
		if !l.older[path] || l.state != leasePending {
			return
		}
		if typ == zk.EventNodeDeleted {
			delete(l.older, path)
			if len(l.older) == 0 {
				l.signalLocked()
			}
		} else if !s.over {
			// Its data changed (nothing of simba's changes it): the watch
			// is used up; set another.
			s.calls.Add(1)
			go func() {
				defer s.calls.Done()
				s.rewatchOlder(l, path)
			}()
		}
	case typ == zk.EventNodeDeleted && (l.state == leasePending || l.releasing):
		l.deleted = true
		l.signalLocked()
	case typ == zk.EventNodeDeleted:
		l.endLocked(true)
		delete(s.leases, name)
	case l.state == leaseHeld && !s.over:
		s.calls.Add(1)
		go func() {
			defer s.calls.Done()
			s.rewatch(l)
		}()
	}
}

// rewatch sets a new exists watch on a held lease's znode.
func (s *session) rewatch(l *lease) {
	for attempt := 1; attempt <= 5; attempt++ {
		ok, st, _, err := s.conn.ExistsW(l.path)
		if err == nil {
			s.mu.Lock()
			switch {
			case s.leases[l.name] != l || l.releasing:
			case !ok || uint64(st.Czxid) != l.token:
				l.endLocked(true)
				delete(s.leases, l.name)
			default:
				l.version = st.Version
			}
			s.mu.Unlock()
			return
		}
		if !s.sleep(s.ctx, backoff.Jitter(time.Duration(attempt)*50*time.Millisecond)) {
			return
		}
	}
}

// rewatchOlder sets a new exists watch on an older candidacy a waiting
// Acquire counts. If it cannot, the Acquire is woken to register again.
func (s *session) rewatchOlder(l *lease, path string) {
	for attempt := 1; attempt <= 5; attempt++ {
		ok, _, _, err := s.conn.ExistsW(path)
		if err == nil {
			if !ok {
				s.mu.Lock()
				delete(l.older, path)
				if len(l.older) == 0 {
					l.signalLocked()
				}
				s.mu.Unlock()
			}
			return
		}
		if !s.sleep(s.ctx, backoff.Jitter(time.Duration(attempt)*50*time.Millisecond)) {
			return
		}
	}
	s.mu.Lock()
	l.deleted = true // not what happened, but what Acquire does next: register again
	l.signalLocked()
	s.mu.Unlock()
}

// errLeaseGone is how a release step reports that the znode is not (or no
// longer) the holding's.
var errLeaseGone = errors.New("znode gone or not ours")

// Acquire blocks until the session holds the lease called name: it
// registers a candidacy, the ephemeral sequential znode
// <root>/lease/<name>/<sid>-<nonce>-<seq> under the container
// <root>/lease/<name>, and returns once every older candidacy (lower
// sequence number) is gone, as the exists watches set on each of them at
// registration tell: a hand-off costs the waiter no request.
//
// A current holding of name by this session is first released (its Lost
// channel closes), so that the new holding has a new token. Candidacies of
// this session's that are not the current one (left by a create whose
// reply was lost) are found by their names and deleted.
//
// When ctx ends first, Acquire deletes its candidacy before it returns an
// error wrapping ctx.Err() or, when the server does not answer in time (or
// a create's outcome is unknown), the session does so as soon as it can:
// until then the candidacy keeps its place in the queue.
func (s *session) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	if err := checkName("lease", name); err != nil {
		return nil, err
	}
	const op = "acquire"
	if err := s.live(op); err != nil {
		return nil, err
	}
	unlock, err := s.lockName(ctx, op, name)
	if err != nil {
		return nil, err
	}
	defer unlock()

	s.mu.Lock()
	cur := s.leases[name]
	if cur != nil && cur.state != leaseHeld {
		cur = nil
	}
	s.mu.Unlock()
	if cur != nil {
		if err := s.release(ctx, op, cur, true); err != nil && !errors.Is(err, backend.ErrNotHeld) {
			return nil, err
		}
	}

	a := &acquisition{s: s, name: name, dir: s.p.lease(name)}
	l, err := a.run(ctx)
	if len(a.unknown) > 0 {
		a.sweepAfter(a.unknown)
	}
	return l, err
}

// acquisition is the state of one Acquire call.
type acquisition struct {
	s         *session
	name, dir string
	// unknown are the creates of this call whose outcome is unknown (no
	// reply): each may have made a candidacy, to be swept.
	unknown []*request[string]
}

// run tries until the lease is held or an error ends it.
func (a *acquisition) run(ctx context.Context) (backend.Lease, error) {
	s := a.s
	failures := 0
	for {
		l, err := a.attempt(ctx)
		switch {
		case l != nil:
			return l, nil
		case err != nil:
			if ctx.Err() != nil || errors.Is(err, backend.ErrSessionDone) || refused(err) || errors.Is(err, zk.ErrNoChildrenForEphemerals) {
				return nil, err
			}
			failures++
			if !s.sleep(ctx, backoff.Wait(failures, s.link.granted()/10)) {
				return nil, a.stopped(ctx)
			}
		default:
			failures = 0
		}
	}
}

// refused reports whether err is the server refusing access, which trying
// again does not change: the lease directory's ACL does not admit this
// session's credentials (zk.ErrNoAuth), or the ACL given to the create
// names the creator and the session has not authenticated
// (zk.ErrInvalidACL). Acquire returns such an error instead of retrying
// until its ctx ends, so that the caller sees it.
func refused(err error) bool {
	return errors.Is(err, zk.ErrNoAuth) || errors.Is(err, zk.ErrInvalidACL)
}

// stopped returns the error of an Acquire that stops waiting.
func (a *acquisition) stopped(ctx context.Context) error {
	if err := a.s.live("acquire"); err != nil {
		return err
	}
	return fmt.Errorf("simba/zookeeper: acquire %q: %w", a.name, ctx.Err())
}

// attempt registers a candidacy and waits until it holds the lease. It
// returns the lease, or an error, or neither, to try again at once (the
// candidacy was deleted while it waited, or the container was missing).
//
// Registration is two round trips. The create, and a listing of the
// container's children sent right behind it as soon as the create is on
// the wire (see create): the candidacies older than this one are those
// listed with a lower sequence number; none can appear later. Then, sent
// together (see watch): an exists watch on the new znode (its czxid is the
// token; the watch closes Lost), an exists watch on each older candidacy
// (their delete events are counted), and a delete of every candidacy of
// this session's left by an earlier attempt. Then it waits for its turn
// (see await).
func (a *acquisition) attempt(ctx context.Context) (*lease, error) {
	s := a.s
	l, prefix, err := a.register()
	if err != nil {
		return nil, err
	}
	defer a.unregister(l) // unless held
	path, me, children, err := a.create(ctx, prefix)
	if path == "" {
		return nil, err
	}
	older, orphans := a.sortOut(me, children)
	s.mu.Lock()
	l.path = path
	l.older = make(map[string]bool, len(older))
	for _, o := range older {
		l.older[o] = true
	}
	s.mu.Unlock()
	st, err := a.watch(ctx, l, older, orphans)
	if err != nil {
		a.withdraw(path, -1)
		return nil, err
	}
	if st == nil {
		return nil, nil // deleted meanwhile: register again
	}
	l.token, l.version = uint64(st.Czxid), st.Version
	return a.await(ctx, l)
}

// register makes the pending holding of this attempt the session's lease
// of the name, so that watch events are recorded from now on, and returns
// it with the path prefix of its candidacy (a new nonce).
func (a *acquisition) register() (l *lease, prefix string, err error) {
	s := a.s
	l = &lease{s: s, name: a.name, sig: lost.New(), wake: make(chan struct{}, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over {
		return nil, "", s.live("acquire")
	}
	s.leases[a.name] = l
	s.nonce++
	return l, s.p.candidacyPrefix(a.name, s.sid, s.nonce), nil
}

// unregister removes l, an attempt's holding, from the session's leases
// unless it is held.
func (a *acquisition) unregister(l *lease) {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.state != leaseHeld && s.leases[a.name] == l {
		delete(s.leases, a.name)
	}
}

// create creates the candidacy znode, sequential under prefix, and lists
// the container's children right behind it, sent as soon as the create is
// on the wire: the server answers a session's requests in order, so the
// listing sees the create. When that listing cannot serve (the create was
// answered first, or an earlier create of this attempt's prefix was the
// one sent), the children are listed again. It returns the candidacy's
// path and parsed name, and the children; or no path and an error, or
// neither to try again at once (the container was missing, and is created
// now).
func (a *acquisition) create(ctx context.Context, prefix string) (path string, me candidacy, children []string, err error) {
	s := a.s
	list := func(c *zk.Conn) ([]string, error) {
		children, _, err := c.Children(a.dir)
		return children, err
	}
	sent, forget := s.link.awaitCreateSent(prefix)
	defer forget()
	create := start(s, ctx, func(c *zk.Conn) (string, error) {
		return c.Create(prefix, nil, zk.FlagEphemeralSequential, s.b.cfg.acl)
	})
	if create == nil {
		return "", me, nil, s.live("acquire")
	}
	var behind *request[[]string]
	select {
	case <-sent:
		behind = start(s, ctx, list)
	case <-create.done:
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
	path, err = create.wait(ctx, "acquire: create")
	switch {
	case err == nil:
	case refused(err):
		return "", me, nil, err // answered: nothing was created
	case errors.Is(err, zk.ErrNoNode):
		_, err := call(s, ctx, "acquire: create the lease's container", func(c *zk.Conn) (struct{}, error) {
			return struct{}{}, s.ensureDir(c, a.dir)
		})
		return "", me, nil, err
	case errors.Is(err, zk.ErrNoChildrenForEphemerals):
		return "", me, nil, fmt.Errorf("simba/zookeeper: acquire %q: %s is an ephemeral znode, the lease layout of an earlier simba version; it goes with its session: %w", a.name, a.dir, err)
	default:
		if !errors.Is(err, zk.ErrNodeExists) {
			a.unknown = append(a.unknown, create) // maybe applied: swept once answered
		}
		return "", me, nil, err
	}
	own := path[len(a.dir)+1:]
	me, ok := parseCandidacy(own)
	if !ok {
		return "", me, nil, fmt.Errorf("simba/zookeeper: acquire %q: the server named the candidacy %q", a.name, path)
	}
	lerr := errors.New("not listed")
	if behind != nil {
		children, lerr = behind.wait(ctx, "acquire: list")
	}
	if lerr == nil && !slices.Contains(children, own) {
		lerr = errors.New("listed before the create") // an earlier create was the one sent
	}
	if lerr != nil {
		children, lerr = call(s, ctx, "acquire: list", list)
	}
	if lerr != nil {
		a.withdraw(path, -1)
		return "", me, nil, lerr
	}
	return path, me, children, nil
}

// sortOut returns the paths of the candidacies among children older than
// me, the attempt's own, and of the session's own other candidacies (left
// by an earlier attempt), to be deleted.
func (a *acquisition) sortOut(me candidacy, children []string) (older, orphans []string) {
	for _, c := range queue(children) {
		switch {
		case c.name == me.name:
		case c.sid == a.s.sid:
			orphans = append(orphans, a.dir+"/"+c.name)
			if c.seq < me.seq {
				older = append(older, a.dir+"/"+c.name)
			}
		case c.seq < me.seq:
			older = append(older, a.dir+"/"+c.name)
		}
	}
	return older, orphans
}

// watch sends together, in one round trip, an exists watch on l's znode,
// an exists watch on each older candidacy (one found gone already leaves
// l.older), and a delete of each orphan. It returns the stat of l's znode,
// nil when it is gone already.
func (a *acquisition) watch(ctx context.Context, l *lease, older, orphans []string) (*zk.Stat, error) {
	s := a.s
	var st *zk.Stat
	present := false
	_, err := call(s, ctx, "acquire: watch", func(c *zk.Conn) (struct{}, error) {
		return struct{}{}, together(1+len(older)+len(orphans), func(i int) error {
			switch {
			case i == 0:
				var err error
				present, st, _, err = c.ExistsW(l.path)
				return err
			case i <= len(older):
				ok, _, _, err := c.ExistsW(older[i-1])
				if err == nil && !ok {
					s.mu.Lock()
					delete(l.older, older[i-1])
					s.mu.Unlock()
				}
				return err
			default:
				err := c.Delete(orphans[i-1-len(older)], -1)
				if errors.Is(err, zk.ErrNoNode) {
					err = nil
				}
				return err
			}
		})
	})
	if err != nil || !present {
		return nil, err
	}
	return st, nil
}

// await waits until every candidacy older than l is gone, and returns l,
// held; or neither when l's znode was deleted meanwhile, to register
// again; or an error when ctx ends (l is withdrawn) or the session is
// over.
func (a *acquisition) await(ctx context.Context, l *lease) (*lease, error) {
	s := a.s
	for {
		s.mu.Lock()
		switch {
		case s.over:
			s.mu.Unlock()
			return nil, s.live("acquire")
		case l.deleted:
			s.mu.Unlock()
			return nil, nil // deleted while it waited: register again
		case len(l.older) == 0:
			l.state = leaseHeld
			s.mu.Unlock()
			return l, nil
		}
		s.mu.Unlock()
		select {
		case <-l.wake:
		case <-ctx.Done():
			a.withdraw(l.path, l.version)
			return nil, a.stopped(ctx)
		case <-s.ctx.Done():
			return nil, s.live("acquire")
		}
	}
}

// withdrawWait bounds how long an Acquire whose ctx has ended waits for
// the delete of its candidacy before it returns, leaving the rest to the
// session.
const withdrawWait = time.Second

// withdraw deletes the candidacy at path (with version, or -1 for any),
// waiting for the server's answer for at most withdrawWait; until it is
// answered, and after a failure, a goroutine of the session tries again.
func (a *acquisition) withdraw(path string, version int32) {
	s := a.s
	done := make(chan struct{})
	if !s.goCall(func() {
		defer close(done)
		for attempt := 1; attempt <= 5; attempt++ {
			err := s.conn.Delete(path, version)
			if errors.Is(err, zk.ErrBadVersion) {
				version = -1 // its data was changed by hand: still this attempt's
				continue
			}
			if err == nil || errors.Is(err, zk.ErrNoNode) {
				return
			}
			if !s.sleep(s.ctx, backoff.Jitter(time.Duration(attempt)*50*time.Millisecond)) {
				return
			}
		}
	}) {
		return
	}
	t := time.NewTimer(withdrawWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-s.ctx.Done():
	}
}

// sweepAfter deletes, once the creates have returned, every candidacy of
// this session for the name that is not its current one: the ones those
// creates may have made.
func (a *acquisition) sweepAfter(creates []*request[string]) {
	s := a.s
	s.goCall(func() {
		sent := false
		for _, c := range creates {
			select {
			case <-c.done:
				sent = sent || c.sent
			case <-s.ctx.Done():
				return
			}
		}
		if !sent {
			return // they ended while they waited for a slot: nothing to sweep
		}
		unlock, err := s.lockName(s.ctx, "acquire: clean up", a.name)
		if err != nil {
			return
		}
		defer unlock()
		for attempt := 1; attempt <= 5; attempt++ {
			children, _, err := s.conn.Children(a.dir)
			if errors.Is(err, zk.ErrNoNode) {
				return
			}
			if err == nil {
				s.mu.Lock()
				var keep string
				if l := s.leases[a.name]; l != nil {
					keep = l.path
				}
				s.mu.Unlock()
				var mine []string
				for _, c := range queue(children) {
					if p := a.dir + "/" + c.name; c.sid == s.sid && p != keep {
						mine = append(mine, p)
					}
				}
				err = together(len(mine), func(i int) error {
					err := s.conn.Delete(mine[i], -1)
					if errors.Is(err, zk.ErrNoNode) {
						err = nil
					}
					return err
				})
				if err == nil {
					return
				}
			}
			if !s.sleep(s.ctx, backoff.Jitter(time.Duration(attempt)*50*time.Millisecond)) {
				return
			}
		}
	})
}

// holding returns the session's current holding of name with token, or
// nil.
func (s *session) holding(name string, token uint64) *lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[name]
	if l != nil && l.state == leaseHeld && l.token == token {
		return l
	}
	return nil
}

// holds reports whether token is the session's current holding of name.
func (s *session) holds(name string, token uint64) bool { return s.holding(name, token) != nil }

// Release deletes the lease's znode with the version seen when it was
// acquired, if it is still this holding: the czxid (the token) and the
// owner were checked then, and the watch set then closes Lost, and
// makes Release return an error wrapping [backend.ErrNotHeld] without
// asking the server, once the znode is deleted by anything else. After the
// session is over Release returns ErrNotHeld too.
//
// ZooKeeper cannot make a delete conditional on the czxid, and the version
// of a new znode is 0 again. Only this session deletes its znode while the
// session lives, so the znode can only have been replaced if something
// outside simba deleted it and another session created it again within
// the round trip before the delete, before the watch event reached this
// session. Reading the znode first would not close that window, only move
// it, and would cost a round trip.
func (l *lease) Release(ctx context.Context) error {
	const op = "release"
	return l.withName(ctx, op, func() error { return l.s.release(ctx, op, l, false) })
}

// withName runs release, a release of l, under the lock of l's name,
// unless l is no longer held.
func (l *lease) withName(ctx context.Context, op string, release func() error) error {
	s := l.s
	s.mu.Lock()
	state := l.state
	s.mu.Unlock()
	if state != leaseHeld {
		return l.notHeld(op, nil)
	}
	unlock, err := s.lockName(ctx, op, l.name)
	if err != nil {
		if errors.Is(err, backend.ErrSessionDone) {
			return l.notHeld(op, err)
		}
		return err
	}
	defer unlock()
	return release()
}

// ReleaseWithRecords writes records fenced by the holding and deletes its
// candidacy znode in one multi-operation: the optional
// [backend.RecordReleaser] capability. The multi-operation is built from
// what the session last read or wrote of each record (its leaf's and its
// directory's data versions, and the token stored), and the candidacy's
// version known since Acquire: no read before it, one round trip in all.
// It checks that none of them changed, as PutRecord does. When one did
// (the cache was stale), or a record was never seen by the session, or
// the token it last saw there is newer than the holding's, the records,
// their directories and the candidacy are read first (one round trip; a
// new key's directory is created then), and it is tried again. A record
// whose stored token is newer than the holding's is left out.
func (l *lease) ReleaseWithRecords(ctx context.Context, records []backend.Record) error {
	s := l.s
	const op = "release with records"
	for _, r := range records {
		if err := checkRecord(r.Key, r.Value); err != nil {
			return err
		}
	}
	cond := backend.Condition{Lease: l.name, Token: l.token}
	writes := make([]*recordWrite, len(records))
	for i, r := range records {
		writes[i] = &recordWrite{s: s, op: op, key: r.Key, put: true, value: r.Value, cond: cond, fence: l.path}
	}
	return l.withName(ctx, op, func() error { return s.releaseWith(ctx, op, l, l.recordOps(writes)) })
}

// recordOps returns, for releaseWith, the operations that write writes:
// built from the record cache on the first call when every record is in
// it, else (and on every later call) from reads on c, leaving out those a
// newer token has written.
func (l *lease) recordOps(writes []*recordWrite) func(c *zk.Conn) (ops []any, again bool, err error) {
	first := true
	return func(c *zk.Conn) (ops []any, again bool, err error) {
		if first {
			first = false
			if ops, ok := l.cachedOps(writes); ok {
				return ops, false, nil
			}
		}
		reads := make([]recordRead, len(writes))
		if err := together(len(writes), func(i int) (err error) {
			reads[i], err = writes[i].read(c)
			return err
		}); err != nil {
			return nil, false, err
		}
		for i, w := range writes {
			if _, err := w.check(reads[i]); err != nil {
				if errors.Is(err, backend.ErrConflict) && reads[i].leaseOK && uint64(reads[i].lease.Czxid) == l.token {
					continue // written with a newer token: left as it is
				}
				return nil, false, errLeaseGone
			}
			wops, again, err := w.ops(c, reads[i])
			if again || err != nil {
				return nil, again, err
			}
			ops = append(ops, wops...)
		}
		return ops, false, nil
	}
}

// cachedOps builds the operations of writes from the record cache, as
// ops does from a read, and reports false when a record is not cached
// or was last seen with a newer token than the holding's. The fence is
// the delete of the candidacy that releaseWith puts last.
func (l *lease) cachedOps(writes []*recordWrite) ([]any, bool) {
	s := l.s
	var ops []any
	for _, w := range writes {
		leaf := s.p.record(w.key)
		cr, ok := s.cachedRecordAt(leaf)
		if !ok || (cr.present && cr.token > l.token) {
			return nil, false
		}
		ops = append(ops, s.writeOps(w.key, true, encodeRecord(l.token, w.value), cr.state())...)
	}
	return ops, true
}

// notHeld returns an error wrapping ErrNotHeld (and cause, if not nil).
func (l *lease) notHeld(op string, cause error) error {
	if cause != nil {
		return fmt.Errorf("simba/zookeeper: %s %q (token %d): %w: %w", op, l.name, l.token, backend.ErrNotHeld, cause)
	}
	return fmt.Errorf("simba/zookeeper: %s %q (token %d): %w", op, l.name, l.token, backend.ErrNotHeld)
}

// release deletes l's znode if it is still l's; the name lock is held.
// lost says whether l's Lost channel closes when it succeeds (a holding
// replaced by a new Acquire).
func (s *session) release(ctx context.Context, op string, l *lease, lost bool) error {
	if err := s.startRelease(op, l); err != nil {
		return err
	}
	_, err := call(s, ctx, op, func(c *zk.Conn) (struct{}, error) {
		err := c.Delete(l.path, l.version)
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
			err = errLeaseGone
		}
		return struct{}{}, err
	})
	return s.released(op, l, lost, err)
}

// startRelease marks l as being released, or returns an error wrapping
// ErrNotHeld if it is not held. The name lock is held.
func (s *session) startRelease(op string, l *lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.state != leaseHeld {
		return l.notHeld(op, nil)
	}
	l.releasing, l.deleted = true, false
	return nil
}

// releaseWith is release with the operations of before sent in the same
// multi-operation as the delete, retried while before reports again. The
// name lock is held.
func (s *session) releaseWith(ctx context.Context, op string, l *lease, before func(*zk.Conn) (ops []any, again bool, err error)) error {
	if err := s.startRelease(op, l); err != nil {
		return err
	}
	var err error
	again := true
	for attempt := 1; again && err == nil; attempt++ {
		if attempt > 5 {
			// The records keep changing under us: a transient error; the
			// holding is kept, and the caller may try again.
			err = fmt.Errorf("simba/zookeeper: %s %q: records changed in each of 5 attempts", op, l.name)
			break
		}
		again, err = call(s, ctx, op, func(c *zk.Conn) (bool, error) {
			ops, again, err := before(c)
			if again || err != nil {
				return again, err
			}
			ops = append(ops, &zk.DeleteRequest{Path: l.path, Version: l.version})
			res, err := c.Multi(ops...)
			if err == nil {
				s.noteMulti(ops, res)
				return false, nil
			}
			if len(res) != len(ops) {
				return false, err // no answer: maybe applied
			}
			failed := slices.IndexFunc(res, func(r zk.MultiResponse) bool { return r.Error != nil })
			if failed == len(ops)-1 {
				return false, errLeaseGone
			}
			if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) {
				return true, nil // a record or the lease changed since read: read again
			}
			return false, err
		})
	}
	return s.released(op, l, false, err)
}

// released ends the bookkeeping of a release whose request returned err.
func (s *session) released(op string, l *lease, lost bool, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.releasing = false
	forget := func(lost bool) {
		l.endLocked(lost)
		if s.leases[l.name] == l {
			delete(s.leases, l.name)
		}
	}
	switch {
	case err == nil:
		forget(lost)
		return nil
	case errors.Is(err, errLeaseGone):
		forget(true)
		return l.notHeld(op, nil)
	case errors.Is(err, backend.ErrSessionDone):
		return l.notHeld(op, err) // the session's end ended the holding
	case l.deleted:
		// The znode is gone, maybe by this very request whose reply was
		// lost: the holding is over; a retry returns ErrNotHeld.
		forget(lost)
	}
	return err
}

// ensureDir creates the missing znodes of dir, as containers: dir first,
// and its parents only when it has none (one request when the parent is
// there).
func (s *session) ensureDir(c *zk.Conn, dir string) error {
	for attempt := 0; ; attempt++ {
		_, err := c.CreateContainer(dir, nil, zk.FlagContainer, s.b.cfg.acl)
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			return nil
		case !errors.Is(err, zk.ErrNoNode) || attempt == 3:
			return fmt.Errorf("create %s: %w", dir, err)
		}
		parent := dir[:strings.LastIndexByte(dir, '/')]
		if parent == "" {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		if err := s.ensureDir(c, parent); err != nil {
			return err
		}
	}
}

// HeldLeases lists, sorted, the names starting with prefix of the leases
// with at least one candidacy now, whoever holds them. It implements
// [backend.LeaseLister].
//
// One listing of <root>/lease gives the containers; an empty container
// waits to be reaped by the server (containerCheckIntervalMs, 60 s by
// default) and is not held. Whether a container has candidacies is read
// once (a listing with a child watch) and cached until its watch fires, so
// that a group of 10,000 partitions, which lists its held leases every
// half grace period on every member, costs one request each time while its
// holders stay, and one listing per container that changed since.
func (s *session) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	return callWith(s, ctx, "held leases", false, func(c *zk.Conn) ([]string, error) {
		names, _, err := c.Children(s.p.root + leaseDir)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		names = slices.DeleteFunc(names, func(n string) bool { return !strings.HasPrefix(n, prefix) || !backend.ValidName(n) })
		held := make([]bool, len(names))
		var unknown []int
		epochs := make(map[string]uint64)
		s.heldMu.Lock()
		gen := s.heldGen
		for i, n := range names {
			if h, ok := s.held[n]; ok {
				held[i] = h
			} else {
				unknown = append(unknown, i)
				epochs[n] = s.heldEpoch[n]
			}
		}
		s.heldMu.Unlock()
		if err := togetherN(len(unknown), heldLeasesInFlight, func(j int) error {
			n := names[unknown[j]]
			s.heldReads.Add(1)
			children, _, _, err := c.ChildrenW(s.p.lease(n))
			if errors.Is(err, zk.ErrNoNode) {
				return nil // reaped meanwhile: no watch is set
			}
			if err != nil {
				return err
			}
			held[unknown[j]] = len(children) > 0
			s.noteHeld(n, len(children) > 0, epochs[n], gen)
			return nil
		}); err != nil {
			return nil, err
		}
		out := names[:0]
		for i, n := range names {
			if held[i] {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return out, nil
	})
}

// noteHeld caches whether the container of name has candidacies, as a
// listing sent when the name's watch epoch was epoch and the reconnection
// generation gen read it, unless a watch event or a reconnection came
// since (the listing's own watch may already have fired, or be lost).
func (s *session) noteHeld(name string, held bool, epoch, gen uint64) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if s.heldEpoch[name] != epoch || s.heldGen != gen {
		return
	}
	if s.held == nil {
		s.held = make(map[string]bool)
	}
	s.held[name] = held
}

// heldChanged forgets what HeldLeases cached of name: a child watch on its
// container fired (a candidacy came or went, or the container was deleted).
func (s *session) heldChanged(name string) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	delete(s.held, name)
	if s.heldEpoch == nil {
		s.heldEpoch = make(map[string]uint64)
	}
	s.heldEpoch[name]++
}

// heldLeasesInFlight bounds the listings HeldLeases has in flight.
const heldLeasesInFlight = 256

// Candidates returns the session IDs of the candidacies for the lease
// name, oldest first: one listing of its container. It implements
// [backend.CandidateLister].
func (s *session) Candidates(ctx context.Context, name string) ([]string, error) {
	if err := checkName("lease", name); err != nil {
		return nil, err
	}
	return call(s, ctx, "candidates", func(c *zk.Conn) ([]string, error) {
		children, _, err := c.Children(s.p.lease(name))
		if errors.Is(err, zk.ErrNoNode) {
			return []string{}, nil
		}
		if err != nil {
			return nil, err
		}
		out := []string{}
		for _, c := range queue(children) {
			out = append(out, c.sid)
		}
		return out, nil
	})
}
