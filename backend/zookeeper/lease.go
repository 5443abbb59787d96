package zookeeper

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/backoff"
)

// leaseState is where a holding stands.
type leaseState int

const (
	leasePending leaseState = iota // Acquire is creating it
	leaseHeld
	leaseEnded
)

// lease is one holding of a lease: the ephemeral znode <root>/lease/<name>
// created by the session. It implements [backend.Lease].
type lease struct {
	s       *session
	name    string
	path    string
	token   uint64 // the znode's czxid
	version int32  // the znode's version when acquired
	lost    chan struct{}

	// Guarded by s.mu.
	state      leaseState
	releasing  bool           // Release or a re-Acquire is deleting the znode
	deleted    bool           // the znode was deleted while pending or releasing
	onLost     map[int]func() // OnLost functions not yet called
	nextOnLost int
}

// Name returns the lease name.
func (l *lease) Name() string { return l.name }

// Token returns the czxid of the lease's znode: the zxid of the
// transaction that created it, which is larger than that of every earlier
// transaction on the server, so larger than the token of every earlier
// holding of the name.
func (l *lease) Token() uint64 { return l.token }

// Lost is closed when the znode is deleted by anything but Release, or the
// session is over. It hears of a deletion from a watch on the
// znode, so it closes late, or only once the session is declared over,
// while the server cannot be reached.
func (l *lease) Lost() <-chan struct{} { return l.lost }

// OnLost arranges for f to run once when Lost is closed: it implements
// [backend.LostNotifier]. f runs on go-zookeeper's receiving goroutine or
// on the goroutine that ends the session, with the session's lock held, or
// before OnLost returns when Lost is closed already; it must not block nor
// call the session. stop cancels the call and reports whether it did so
// before f started.
func (l *lease) OnLost(f func()) (stop func() bool) {
	s := l.s
	s.mu.Lock()
	select {
	case <-l.lost:
		s.mu.Unlock()
		f()
		return func() bool { return false }
	default:
	}
	if l.onLost == nil {
		l.onLost = make(map[int]func())
	}
	id := l.nextOnLost
	l.nextOnLost++
	l.onLost[id] = f
	s.mu.Unlock()
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := l.onLost[id]
		delete(l.onLost, id)
		return ok
	}
}

// endLocked ends the holding; lost closes the Lost channel and runs the
// OnLost functions. s.mu is held.
func (l *lease) endLocked(lost bool) {
	if l.state == leaseEnded {
		return
	}
	l.state = leaseEnded
	if lost {
		close(l.lost)
		fs := l.onLost
		l.onLost = nil
		for _, f := range fs {
			f()
		}
	}
}

// leaseEvent handles a watch event for the znode of lease name.
func (s *session) leaseEvent(name string, typ zk.EventType) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[name]
	switch {
	case l == nil:
	case typ == zk.EventNodeDeleted && (l.state == leasePending || l.releasing):
		l.deleted = true
	case typ == zk.EventNodeDeleted:
		l.endLocked(true)
		delete(s.leases, name)
	case l.state == leaseHeld && !s.over:
		// The data changed (nothing of simba's changes it): the watch is
		// used up; set another.
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

// errLeaseGone is how a release step reports that the znode is not (or no
// longer) the holding's.
var errLeaseGone = errors.New("znode gone or not ours")

// Acquire blocks until the session holds the lease called name: it creates
// the ephemeral znode <root>/lease/<name> and, while another session's
// znode is there, waits for a watch to report its deletion.
//
// When it finds a znode of its own session that is not a current holding
// (left by a create whose reply was lost, or by an Acquire that gave up),
// it deletes it and creates a new one: such an orphan never blocks the
// lease. A current holding of name by this session is first released (its
// Lost channel closes), so that the new holding has a new token.
//
// When ctx ends first, Acquire returns an error wrapping ctx.Err(). If a
// create request was on its way, the znode it may have made is deleted as
// soon as its reply arrives (or goes with the session): until then another
// session may find the name held.
func (s *session) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	if !validName(name) {
		return nil, nameError("lease", name)
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

	a := &acquisition{s: s, name: name, path: s.p.lease(name)}
	l, err := a.run(ctx)
	if err != nil && a.unsure {
		a.sweepAfter(a.create)
	}
	return l, err
}

// acquisition is the state of one Acquire call.
type acquisition struct {
	s          *session
	name, path string
	create     *request[string] // the last create request
	unsure     bool             // a znode of this call may exist that is not a holding
	earlier    bool             // an earlier create of this call was sent, its outcome unknown
}

// run tries until the lease is held or an error ends it.
func (a *acquisition) run(ctx context.Context) (backend.Lease, error) {
	s := a.s
	failures := 0
	for {
		l, wait, err := a.attempt(ctx)
		switch {
		case l != nil:
			return l, nil
		case err != nil:
			if ctx.Err() != nil || errors.Is(err, backend.ErrSessionDone) || refused(err) {
				return nil, err
			}
			failures++
			if !s.sleep(ctx, backoff.Wait(failures, s.link.granted()/10)) {
				return nil, a.stopped(ctx)
			}
		case wait != nil:
			failures = 0
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, a.stopped(ctx)
			case <-s.ctx.Done():
				return nil, a.stopped(ctx)
			}
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

// attempt tries once to create the znode. It returns the lease, or a watch
// to wait on while another session holds the lease, or an error; or none of
// these, to try again at once.
//
// One round trip: the create request carries a nonce of this attempt as
// the znode's data, and a read of the znode (getData with a watch) is sent
// right behind it, as soon as the create is on the wire; the server
// answers a session's requests in order, so the read sees what the create
// did. Its reply gives the token (the czxid) and sets the watch behind
// Lost, both before Acquire returns, exactly as a read sent after the
// create's reply would; the nonce proves that the znode read is this
// attempt's. Should the read have gone out ahead of the create (a create
// of an earlier attempt, still queued, announced itself first) or failed,
// it is sent again once the create has returned.
func (a *acquisition) attempt(ctx context.Context) (*lease, <-chan zk.Event, error) {
	s := a.s
	l := &lease{s: s, name: a.name, path: a.path, lost: make(chan struct{})}
	s.mu.Lock()
	if s.over {
		s.mu.Unlock()
		return nil, nil, s.live("acquire")
	}
	s.leases[a.name] = l // pending: deletion events are recorded from now on
	s.nonce++
	nonce := binary.BigEndian.AppendUint64(nil, s.nonce)
	s.mu.Unlock()
	held := false
	defer func() {
		if !held {
			s.mu.Lock()
			if s.leases[a.name] == l {
				delete(s.leases, a.name)
			}
			s.mu.Unlock()
		}
	}()

	read := func(c *zk.Conn) (seen, error) {
		data, st, ev, err := c.GetW(a.path)
		if errors.Is(err, zk.ErrNoNode) {
			return seen{}, nil // no watch is set
		}
		return seen{true, data, st, ev}, err
	}
	sent, forget := s.link.awaitCreateSent(a.path)
	defer forget()
	create := start(s, ctx, func(c *zk.Conn) (string, error) {
		return c.Create(a.path, nonce, zk.FlagEphemeral, s.b.cfg.acl)
	})
	if create == nil {
		a.unsure = false
		return nil, nil, s.live("acquire")
	}
	// create.done is closed when the create has returned, or will not be sent.
	if a.unsure && a.create != nil {
		select {
		case <-a.create.done:
			a.earlier = a.earlier || a.create.sent
		default:
			a.earlier = true
		}
	}
	a.create, a.unsure = create, true
	var behind *request[seen]
	select {
	case <-sent:
		behind = start(s, ctx, read)
	case <-create.done:
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
	_, err := create.wait(ctx, "acquire: create")
	exists := errors.Is(err, zk.ErrNodeExists)
	switch {
	case err == nil:
	case exists:
		a.unsure = false // answered: this request created nothing
	case refused(err):
		a.unsure = false // answered: nothing was created
		return nil, nil, err
	case errors.Is(err, zk.ErrNoNode):
		a.unsure = false
		_, err := call(s, ctx, "acquire: create parents", func(c *zk.Conn) (struct{}, error) {
			return struct{}{}, s.ensureDir(c, s.p.root+leaseDir)
		})
		return nil, nil, err
	default:
		return nil, nil, err // maybe applied: the next attempt finds out
	}

	var r seen
	rerr := errors.New("not read")
	if behind != nil {
		r, rerr = behind.wait(ctx, "acquire: read")
	}
	if rerr != nil || (!exists && !r.mine(s.id, nonce)) {
		if ctx.Err() != nil {
			return nil, nil, rerr
		}
		r, rerr = call(s, ctx, "acquire: read", read)
	}
	switch {
	case rerr != nil:
		return nil, nil, rerr
	case !r.ok:
		return nil, nil, nil // deleted meanwhile
	case r.stat.EphemeralOwner != s.id:
		return nil, r.ev, nil // another session holds the lease
	case exists || !r.mine(s.id, nonce):
		// An orphan of this session's own (see Acquire).
		_, err := call(s, ctx, "acquire: delete orphan", func(c *zk.Conn) (struct{}, error) {
			err := c.Delete(a.path, r.stat.Version)
			if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
				err = nil
			}
			return struct{}{}, err
		})
		if err == nil {
			a.unsure = false
		}
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.over:
		return nil, nil, fmt.Errorf("simba/zookeeper: acquire: %w", s.cause)
	case l.deleted:
		return nil, nil, nil // deleted again since: try again
	}
	l.token, l.version = uint64(r.stat.Czxid), r.stat.Version
	l.state = leaseHeld
	held, a.unsure = true, false
	return l, nil, nil
}

// seen is a read of a lease znode: whether it exists, its data and stat,
// and the watch set on it (a data watch: it fires when the znode is
// deleted or its data changes).
type seen struct {
	ok   bool
	data []byte
	stat *zk.Stat
	ev   <-chan zk.Event
}

// mine reports whether the znode read is the one created by the attempt
// with nonce of session id.
func (r seen) mine(id int64, nonce []byte) bool {
	return r.ok && r.stat.EphemeralOwner == id && bytes.Equal(r.data, nonce)
}

// sweepAfter deletes, once create has returned (if it was sent at all),
// any znode of name owned by this session that is not its current holding.
func (a *acquisition) sweepAfter(create *request[string]) {
	s := a.s
	s.goCall(func() {
		select {
		case <-create.done:
		case <-s.ctx.Done():
			return
		}
		if !create.sent && !a.earlier {
			return // it ended while it waited for a slot: nothing to sweep
		}
		unlock, err := s.lockName(s.ctx, "acquire: clean up", a.name)
		if err != nil {
			return
		}
		defer unlock()
		for attempt := 1; attempt <= 5; attempt++ {
			ok, st, err := s.conn.Exists(a.path)
			if err == nil {
				if !ok || st.EphemeralOwner != s.id || s.holds(a.name, uint64(st.Czxid)) {
					return
				}
				err = s.conn.Delete(a.path, st.Version)
				if err == nil || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
					return
				}
			}
			if !s.sleep(s.ctx, backoff.Jitter(time.Duration(attempt)*50*time.Millisecond)) {
				return
			}
		}
	})
}

// holds reports whether token is the session's current holding of name.
func (s *session) holds(name string, token uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[name]
	return l != nil && l.state == leaseHeld && l.token == token
}

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
// znode in one multi-operation: the optional [backend.RecordReleaser]
// capability. The records, their directories and the lease znode are read
// first (one round trip; a new key's directory is created then), and the
// multi-operation checks that none of them changed, as PutRecord does; it
// is tried again when one did. A record whose stored token is newer than
// the holding's is left out.
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
		writes[i] = &recordWrite{s: s, op: op, key: r.Key, put: true, value: r.Value, cond: cond}
	}
	return l.withName(ctx, op, func() error { return s.releaseWith(ctx, op, l, l.recordOps(writes)) })
}

// recordOps returns, for releaseWith, the operations that write writes
// (read first on c), leaving out those a newer token has written.
func (l *lease) recordOps(writes []*recordWrite) func(c *zk.Conn) (ops []any, again bool, err error) {
	return func(c *zk.Conn) (ops []any, again bool, err error) {
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

// HeldLeases lists, sorted, the names starting with prefix of the lease
// znodes that exist now, whoever holds them. It implements
// [backend.LeaseLister].
func (s *session) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	return callWith(s, ctx, "held leases", false, func(c *zk.Conn) ([]string, error) {
		names, _, err := c.Children(s.p.root + leaseDir)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		names = slices.DeleteFunc(names, func(n string) bool { return !strings.HasPrefix(n, prefix) || !validName(n) })
		slices.Sort(names)
		return names, err
	})
}
