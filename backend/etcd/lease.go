package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend"
)

// Acquire takes the lease called name: the key <prefix>lease/<name>,
// created by a transaction that succeeds only if the key does not exist, and
// bound to the session's etcd lease. The token is the key's create revision.
//
// While another session holds the key, Acquire waits for the session's
// shared watch of the lease keys (see leaseWatch) to see an event on the
// key after the revision its transaction saw, and tries again: the shared
// watch is synced, so the server sends the deletion as it happens, with no
// catch-up delay. If this session holds the key already, Acquire deletes
// it, conditionally on its create revision, and creates it again with a new
// token.
//
// When ctx ends while a transaction is on its way, Acquire cannot know
// whether it took effect: it returns at once, and a goroutine of the session
// undoes it. The transaction also compares the session key's value, the
// session's epoch; the undo bumps the epoch and deletes the lease key if
// this session holds it, in one transaction, so the interrupted transaction
// fails if etcd applies it later. The next Acquire of the same name on this
// session waits for the undo. Concurrent calls of Acquire for one name on
// one session free each other's holdings.
func (s *session) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	if !backend.ValidName(name) {
		return nil, nameError("lease", name)
	}
	op := fmt.Sprintf("acquire %q", name)
	if err := s.overErr(op); err != nil {
		return nil, err
	}
	if err := s.awaitCleanup(ctx, name); err != nil {
		return nil, s.failure(ctx, op, err)
	}
	cctx, release := s.bind(ctx)
	defer release()
	key := s.b.leaseKey(name)
	defer s.expect(key)() // before the first transaction: see leaseWatch
	free := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	take := clientv3.OpPut(key, s.id, clientv3.WithLease(s.lease))
	for {
		epoch := s.epoch.Load()
		resp, err := s.b.kv.Txn(cctx).
			If(free, s.epochIs(epoch)).
			Then(take).
			Else(clientv3.OpGet(key), clientv3.OpGet(s.key)).
			Commit()
		if err != nil {
			if !isLeaseNotFound(err) && !errors.Is(err, errNotSent) {
				s.cleanupLater(name, key) // the put may have been applied
			}
			return nil, s.failure(ctx, op, err)
		}
		if resp.Succeeded {
			return s.newLease(name, key, resp.Header.Revision), nil
		}
		// Why the compare failed: the session's key, then the lease key.
		if err := s.checkEpoch(resp.Responses[1].GetResponseRange().Kvs, epoch); err != nil {
			if errors.Is(err, errEpochMoved) {
				continue // an undo ran meanwhile
			}
			return nil, s.doneErr(op)
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 { // not reached: the compare saw the key in the same revision
			if !s.pause(retryDelay) {
				return nil, s.failure(ctx, op, context.Cause(s.ctx))
			}
			continue
		}
		if cur := kvs[0]; clientv3.LeaseID(cur.Lease) == s.lease {
			// This session's own holding (a failed Release, a lost reply):
			// free it, and only it, then take a new one.
			mine := clientv3.Compare(clientv3.CreateRevision(key), "=", cur.CreateRevision)
			if _, err := s.b.kv.Txn(cctx).If(mine).Then(clientv3.OpDelete(key)).Commit(); err != nil {
				return nil, s.failure(ctx, op, err)
			}
			continue
		}
		if !s.awaitEvent(cctx, key, resp.Header.Revision) {
			err := cctx.Err()
			if err == nil {
				err = errors.New("the session's watch of the lease keys ended")
			}
			return nil, s.failure(ctx, op, err)
		}
	}
}

// epochIs compares the session key's value with epoch.
func (s *session) epochIs(epoch int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(s.key), "=", strconv.FormatInt(epoch, 10))
}

// errEpochMoved reports that the session's epoch is newer than the one a
// transaction compared.
var errEpochMoved = errors.New("epoch moved")

// checkEpoch looks at the session key as read by a transaction that compared
// epoch. It returns errEpochMoved, having recorded the newer epoch, if the
// epoch has moved on; it ends the session and returns why if the key is gone
// (the lease expired) or was overwritten by someone else; and otherwise nil.
func (s *session) checkEpoch(kvs []*mvccpb.KeyValue, epoch int64) error {
	if len(kvs) == 0 || clientv3.LeaseID(kvs[0].Lease) != s.lease {
		s.end(errExpired)
		return errExpired
	}
	e, err := strconv.ParseInt(string(kvs[0].Value), 10, 64)
	switch {
	case err != nil || e < epoch:
		s.end(errOverwritten)
		return errOverwritten
	case e > epoch:
		s.epoch.CompareAndSwap(epoch, e)
		return errEpochMoved
	}
	return nil
}

// awaitCleanup waits until no undo of an interrupted Acquire of name is
// pending.
func (s *session) awaitCleanup(ctx context.Context, name string) error {
	s.mu.Lock()
	pending := s.unsure[name]
	s.mu.Unlock()
	if pending == nil {
		return nil
	}
	select {
	case <-pending.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.ctx.Done():
		return context.Cause(s.ctx)
	}
}

// undo is a pending undo of an interrupted Acquire.
type undo struct {
	key  string
	done chan struct{} // closed when the undo is done or the session over
}

// maxUndoBatch bounds the undos of one transaction: with the epoch's bump,
// well under etcd's default limit of 128 operations per transaction.
const maxUndoBatch = 100

// cleanupLater undoes an Acquire of name whose transaction may or may not
// have taken effect, on a goroutine of the session: one transaction bumps
// the session's epoch (so the interrupted transaction can no longer succeed)
// and deletes key if this session holds it. Undos queued together share a
// transaction (every bump makes the session's Acquires in flight retry, so
// one bump per batch, not per name). It retries until it succeeds or the
// session is over (its keys go with it then).
func (s *session) cleanupLater(name, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.unsure[name] != nil {
		return
	}
	s.unsure[name] = &undo{key: key, done: make(chan struct{})}
	s.undos = append(s.undos, name)
	if s.undoer {
		return
	}
	s.undoer = true
	s.wg.Add(1)
	s.b.wg.Add(1)
	go func() {
		defer s.b.wg.Done()
		defer s.wg.Done()
		s.runUndos()
	}()
}

// runUndos undoes the queued Acquires in batches until none is left or the
// session is over.
func (s *session) runUndos() {
	for {
		s.mu.Lock()
		n := min(len(s.undos), maxUndoBatch)
		batch := slices.Clone(s.undos[:n])
		s.undos = s.undos[n:]
		if n == 0 || s.ctx.Err() != nil {
			// Done, or the session is over: its keys go with it.
			for _, u := range s.unsure {
				close(u.done)
			}
			clear(s.unsure)
			s.undos, s.undoer = nil, false
			s.mu.Unlock()
			return
		}
		ops := make([]clientv3.Op, 0, n+1)
		ops = append(ops, clientv3.Op{}) // the bump, made per attempt
		for _, name := range batch {
			key := s.unsure[name].key
			mine := clientv3.Compare(clientv3.LeaseValue(key), "=", s.lease)
			ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{mine}, []clientv3.Op{clientv3.OpDelete(key)}, nil))
		}
		s.mu.Unlock()
		s.undo(ops)
		s.mu.Lock()
		for _, name := range batch {
			if u := s.unsure[name]; u != nil {
				close(u.done)
				delete(s.unsure, name)
			}
		}
		s.mu.Unlock()
	}
}

// undo runs ops (ops[0] is replaced by the epoch's bump) in one transaction
// that compares the epoch, until it succeeds or the session is over.
func (s *session) undo(ops []clientv3.Op) {
	for attempt := 1; ; attempt++ {
		epoch := s.epoch.Load()
		ops[0] = clientv3.OpPut(s.key, strconv.FormatInt(epoch+1, 10), clientv3.WithLease(s.lease))
		resp, err := s.b.kv.Txn(s.ctx).If(s.epochIs(epoch)).Then(ops...).Else(clientv3.OpGet(s.key)).Commit()
		switch {
		case err == nil && resp.Succeeded:
			s.epoch.CompareAndSwap(epoch, epoch+1)
			return
		case err == nil:
			if err := s.checkEpoch(resp.Responses[0].GetResponseRange().Kvs, epoch); !errors.Is(err, errEpochMoved) {
				return // the session is over (or, not reached, the epoch did not move)
			}
			continue
		case s.ctx.Err() != nil || isLeaseNotFound(err):
			return
		}
		s.b.log.Warn("simba/etcd: undoing interrupted acquires failed; retrying",
			"session", s.id, "acquires", len(ops)-1, "err", err, "attempt", attempt)
		if !s.pause(retryDelay) {
			return
		}
	}
}

var (
	_ backend.LeaseLister  = (*session)(nil)
	_ backend.LostNotifier = (*lease)(nil)
)

// lease is one holding of a lease key. It implements [backend.Lease]. The
// session's shared watch of the lease keys closes Lost (see leaseWatch).
type lease struct {
	s     *session
	key   string
	name  string // the end of key
	token int64

	mu          sync.Mutex
	lost        chan struct{} // made by the first call of Lost
	lostClosed  bool
	onLost      []onLost // OnLost functions not yet called, in order
	nextOnLost  int
	releasing   int  // Release calls in flight
	released    bool // a Release succeeded
	pendingLost bool // the key went while a Release was in flight
}

// onLost is a function registered by OnLost.
type onLost struct {
	id int
	f  func()
}

// newLease returns the holding of key created at revision token and
// registers it with the session's watch of the lease keys.
func (s *session) newLease(name, key string, token int64) *lease {
	l := &lease{s: s, key: key, name: key[len(key)-len(name):], token: token}
	s.hold(l)
	return l
}

// Name returns the lease name.
func (l *lease) Name() string { return l.name }

// Token returns the create revision of the lease key.
func (l *lease) Token() uint64 { return uint64(l.token) }

// Lost is closed when the key is deleted, recreated by another holding or
// bound to another etcd lease (seen by the session's watch of the lease
// keys), or when the session is over, unless the holding ended by its own
// Release first.
func (l *lease) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost = make(chan struct{})
		if l.lostClosed {
			close(l.lost)
		}
	}
	return l.lost
}

// Release deletes the key by a transaction conditional on its create
// revision, so it never deletes a newer holding, and returns an error
// wrapping [backend.ErrNotHeld] if the key is gone or belongs to another
// holding.
func (l *lease) Release(ctx context.Context) error {
	return l.release(ctx, fmt.Sprintf("release %q (token %d)", l.name, l.token), nil)
}

// ReleaseWithRecords writes records fenced by the holding and deletes its
// key in one transaction: the optional [backend.RecordReleaser]
// capability. Each record is written as PutRecord writes it (unless its
// stored token is newer), inside the transaction that compares the key's
// create revision.
func (l *lease) ReleaseWithRecords(ctx context.Context, records []backend.Record) error {
	ops := make([]clientv3.Op, 0, len(records))
	for _, r := range records {
		if err := checkRecord(r.Key, r.Value); err != nil {
			return err
		}
		ops = append(ops, l.s.fencedPut(l.s.b.recordKey(r.Key), r.Value, uint64(l.token)))
	}
	return l.release(ctx, fmt.Sprintf("release %q (token %d) with %d records", l.name, l.token, len(records)), ops)
}

// release deletes the holding's key, with ops in the same transaction.
func (l *lease) release(ctx context.Context, op string, ops []clientv3.Op) error {
	s := l.s
	if err := s.overErr(op); err != nil {
		return fmt.Errorf("%w: %w", backend.ErrNotHeld, err)
	}
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return l.notHeld(op)
	}
	l.releasing++
	l.mu.Unlock()

	cctx, unbind := s.bind(ctx)
	defer unbind()
	mine := clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.token)
	resp, err := s.b.kv.Txn(cctx).If(mine).Then(append(ops, clientv3.OpDelete(l.key))...).Commit()

	l.mu.Lock()
	defer l.mu.Unlock()
	l.releasing--
	switch {
	case err == nil && resp.Succeeded:
		l.released = true
		s.unhold(l)
		return nil
	case err == nil:
		l.closeLostLocked()
		s.unhold(l)
		return l.notHeld(op)
	}
	if l.pendingLost && l.releasing == 0 {
		l.closeLostLocked()
	}
	err = s.failure(ctx, op, err)
	if errors.Is(err, backend.ErrSessionDone) {
		return fmt.Errorf("%w: %w", backend.ErrNotHeld, err)
	}
	return err
}

func (l *lease) notHeld(op string) error {
	return fmt.Errorf("simba/etcd: %s: %w", op, backend.ErrNotHeld)
}

// markLost closes Lost, unless the holding was released; while a Release is
// in flight it leaves the decision to Release.
func (l *lease) markLost() {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.released:
	case l.releasing > 0:
		l.pendingLost = true
	default:
		l.closeLostLocked()
	}
}

// closeLostLocked closes Lost and calls the OnLost functions, once. l.mu
// is held.
func (l *lease) closeLostLocked() {
	if l.lostClosed {
		return
	}
	l.lostClosed = true
	if l.lost != nil {
		close(l.lost)
	}
	calls := l.onLost
	l.onLost = nil
	for _, c := range calls {
		c.f()
	}
}

// OnLost calls f once when Lost is closed, at once if it is closed already:
// the optional [backend.LostNotifier] capability, so that a caller holding
// many leases needs no goroutine of its own per lease. f runs on the
// session's goroutine watching the lease keys (or the caller's of Release,
// Acquire or OnLost), with the lease's lock held, and must not block.
func (l *lease) OnLost(f func()) (stop func() bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostClosed {
		f()
		return func() bool { return false }
	}
	id := l.nextOnLost
	l.nextOnLost++
	l.onLost = append(l.onLost, onLost{id: id, f: f})
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i, c := range l.onLost {
			if c.id == id {
				l.onLost = slices.Delete(l.onLost, i, i+1)
				return true
			}
		}
		return false
	}
}

// HeldLeases lists, sorted, the names starting with prefix of the lease keys
// that exist now, whoever holds them: one range request over
// <prefix>lease/<prefix>, keys only. It implements [backend.LeaseLister].
func (s *session) HeldLeases(ctx context.Context, prefix string) ([]string, error) {
	op := fmt.Sprintf("held leases %q", prefix)
	if err := s.overErr(op); err != nil {
		return nil, err
	}
	cctx, release := s.bind(ctx)
	defer release()
	return s.b.heldLeases(cctx, prefix, func(err error) error { return s.failure(ctx, op, err) })
}

// heldLeases lists the lease keys under prefix, one range request of keys
// only: the read of session.HeldLeases and view.HeldLeases.
func (b *Backend) heldLeases(ctx context.Context, prefix string, fail func(error) error) ([]string, error) {
	base := b.leaseKey("")
	resp, err := b.kv.KV.Get(ctx, base+prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fail(err)
	}
	names := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		names[i] = strings.TrimPrefix(string(kv.Key), base)
	}
	return names, nil
}
