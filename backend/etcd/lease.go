package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/limit"
	"github.com/simba-go/simba/backend/kit/lost"
)

// Acquire takes the lease called name by queued candidacy: it registers
// the session's candidacy, the key <prefix>lease/<name>/<session ID> bound
// to the session's etcd lease, and the oldest candidacy of a name (the
// lowest create revision under <prefix>lease/<name>/) holds the lease. The
// token is the candidacy key's create revision.
//
// One transaction creates the key, if the session has none for name, and
// reads the name's candidacies at the same revision: those created before
// it are the older ones. Acquire returns when the session's shared watch of
// the lease keys (see leaseWatch) has seen each of them deleted, at once if
// there were none: a hand-off costs the waiter no request of its own. If
// the session has a candidacy for name already (it holds the lease, or a
// Release failed or its reply was lost), Acquire deletes it, conditionally
// on its create revision, so that the holding's Lost closes, and queues
// again at the back.
//
// When ctx ends while Acquire waits, it withdraws its candidacy (a delete
// conditional on its create revision) before it returns if a request slot
// is free (see WithMaxRequests), within withdrawTimeout, and otherwise
// leaves the delete to a goroutine of the session (as below). When ctx
// ends while a transaction is on its way, Acquire cannot know whether it
// took effect: it returns at once, and a goroutine of the session undoes
// it. The transaction also compares the session key's value, the session's
// epoch; the undo bumps the epoch and deletes the candidacy key if it is
// this session's, in one transaction, so the interrupted transaction fails
// if etcd applies it later. The next Acquire of the same name on this
// session waits for the undo. Of concurrent calls of Acquire for one name
// on one session, the later one frees the earlier one's holding, or makes
// its wait fail.
func (s *session) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	if err := checkName("lease", name); err != nil {
		return nil, err
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
	key := s.b.candidacyKey(name, s.id)
	defer s.expect(name, key)() // before the first transaction: see leaseWatch
	free := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	put := clientv3.OpPut(key, s.id, clientv3.WithLease(s.lease))
	queue := clientv3.OpGet(s.b.candidacyPrefix(name), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	for {
		epoch := s.epoch.Load()
		resp, err := s.b.kv.Txn(cctx).
			If(free, s.epochIs(epoch)).
			Then(put, queue).
			Else(clientv3.OpGet(key), clientv3.OpGet(s.key)).
			Commit()
		if err != nil {
			if !isLeaseNotFound(err) && !errors.Is(err, limit.ErrNotSent) {
				s.cleanupLater(name, key) // the put may have been applied
			}
			return nil, s.failure(ctx, op, err)
		}
		if resp.Succeeded {
			token := resp.Header.Revision
			older := make(map[string]int64)
			for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
				if kv.CreateRevision < token {
					older[string(kv.Key)] = kv.CreateRevision
				}
			}
			l, again, err := s.await(ctx, cctx, op, name, key, s.queue(name, token, older))
			switch {
			case again:
				continue
			case err != nil:
				return nil, err // not a nil *lease in the interface
			}
			return l, nil
		}
		// Why the compare failed: the session's key, then the candidacy key.
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
		// The session's own candidacy (a holding, a failed Release, a lost
		// reply; or a key of another etcd lease written under this
		// session's ID, which no one else's Acquire writes): free it, and
		// only it, then queue again.
		mine := clientv3.Compare(clientv3.CreateRevision(key), "=", kvs[0].CreateRevision)
		if _, err := s.b.kv.Txn(cctx).If(mine).Then(clientv3.OpDelete(key)).Commit(); err != nil {
			return nil, s.failure(ctx, op, err)
		}
	}
}

// await waits for the turn of the candidacy of name queued as wt, whose key
// is key, between expect and its done: it returns the holding once every
// older candidacy is gone, or, when ctx (the caller's; cctx is bound to
// the session too) ends first, withdraws the candidacy and returns why.
// again reports that the candidacy is gone (deleted by someone else) and
// Acquire should queue again.
func (s *session) await(ctx, cctx context.Context, op, name, key string, wt *waiter) (l *lease, again bool, err error) {
	select {
	case <-wt.done:
	case <-cctx.Done():
	}
	holds, gone, superseded := s.turn(wt)
	switch {
	case cctx.Err() == nil && holds:
		l = &lease{s: s, key: key, name: name, token: wt.token, sig: lost.New()}
		s.hold(l, wt)
		return l, false, nil
	case s.ctx.Err() != nil:
		s.dequeue(name, wt)
		return nil, false, s.failure(ctx, op, context.Cause(s.ctx)) // the candidacy goes with the session
	case superseded:
		s.dequeue(name, wt)
		return nil, false, fmt.Errorf("simba/etcd: %s: superseded by a concurrent Acquire of the same name on session %s", op, s.id)
	case gone && cctx.Err() == nil:
		s.dequeue(name, wt)
		return nil, true, nil
	}
	s.dequeue(name, wt)
	if !gone {
		s.withdraw(name, key, wt.token)
	}
	err = cctx.Err()
	if err == nil { // not reached: the watch ends only with the session
		err = errors.New("the session's watch of the lease keys ended")
	}
	return nil, false, s.failure(ctx, op, err)
}

// withdrawTimeout bounds the withdrawal of a candidacy before Acquire
// returns; one that takes longer is left to the undo worker.
const withdrawTimeout = time.Second

// withdraw deletes the session's candidacy key of name created at token:
// at once, within withdrawTimeout, if a request slot is free, and
// otherwise, or if that fails, by the undo worker (cleanupLater), which
// batches the withdrawals of many Acquires ending together.
func (s *session) withdraw(name, key string, token int64) {
	if s.b.kv.lim.TryTake() {
		ctx, cancel := context.WithTimeout(s.ctx, withdrawTimeout)
		mine := clientv3.Compare(clientv3.CreateRevision(key), "=", token)
		_, err := s.b.kv.KV.Txn(ctx).If(mine).Then(clientv3.OpDelete(key)).Commit()
		cancel()
		s.b.kv.lim.Free()
		if err == nil || isLeaseNotFound(err) || s.ctx.Err() != nil {
			return // withdrawn, or gone with the session
		}
	}
	s.cleanupLater(name, key)
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

// lease is one holding: a candidacy whose turn came. It implements
// [backend.Lease]. The session's shared watch of the lease keys closes
// Lost (see leaseWatch).
type lease struct {
	s     *session
	key   string // the candidacy key, <prefix>lease/<name>/<session ID>
	name  string
	token int64
	// sig is Lost. A loss seen while a Release is in flight (maybe the
	// Release's own delete, seen by the watch before the Release returns)
	// waits for the Release's outcome.
	sig *lost.Signal
}

// Name returns the lease name.
func (l *lease) Name() string { return l.name }

// Token returns the create revision of the candidacy key.
func (l *lease) Token() uint64 { return uint64(l.token) }

// Lost is closed when the candidacy key is deleted, recreated by another
// candidacy or bound to another etcd lease (seen by the session's watch of the lease
// keys), or when the session is over, unless the holding ended by its own
// Release first.
func (l *lease) Lost() <-chan struct{} { return l.sig.C() }

// Release deletes the candidacy key by a transaction conditional on its
// create revision, so it never deletes a newer candidacy, and returns an
// error wrapping [backend.ErrNotHeld] if the key is gone or belongs to
// another candidacy. The next-oldest candidacy's session learns from its
// watch that its turn has come: the hand-off needs no other request.
func (l *lease) Release(ctx context.Context) error {
	return l.release(ctx, fmt.Sprintf("release %q (token %d)", l.name, l.token), nil)
}

// ReleaseWithRecords writes records fenced by the holding and deletes its
// candidacy key in one transaction, with no read before it: the optional
// [backend.RecordReleaser] capability. Each record is written as PutRecord
// writes it (unless its stored token is newer), inside the transaction
// that compares the key's create revision.
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
	if l.sig.IsReleased() {
		return l.notHeld(op)
	}
	l.sig.BeginRelease()
	cctx, unbind := s.bind(ctx)
	defer unbind()
	mine := clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.token)
	resp, err := s.b.kv.Txn(cctx).If(mine).Then(append(ops, clientv3.OpDelete(l.key))...).Commit()
	switch {
	case err == nil && resp.Succeeded:
		l.sig.EndRelease(true)
		s.unhold(l)
		return nil
	case err == nil:
		// Gone, or another candidacy's: lost, though the watch, from which
		// unhold takes the holding, may not have told it yet.
		l.sig.EndRelease(false)
		l.sig.Lose()
		s.unhold(l)
		return l.notHeld(op)
	}
	l.sig.EndRelease(false) // a loss seen meanwhile is passed on
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
func (l *lease) markLost() { l.sig.Lose() }

// OnLost calls f once when Lost is closed, at once if it is closed already:
// the optional [backend.LostNotifier] capability, so that a caller holding
// many leases needs no goroutine of its own per lease. f runs on the
// session's goroutine watching the lease keys (or the caller's of Release,
// Acquire or OnLost), after the functions registered before it, and must
// not block.
func (l *lease) OnLost(f func()) (stop func() bool) { return l.sig.OnLost(f) }

// HeldLeases lists, sorted, the names starting with prefix that have at
// least one candidacy now, whoever's, each once: one range request over
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

// heldLeases lists the names under prefix with at least one candidacy, one
// range request of keys only: the read of session.HeldLeases and
// view.HeldLeases. A key under lease/ that is not a candidacy's (no
// "/<session ID>" after the name) is not listed.
func (b *Backend) heldLeases(ctx context.Context, prefix string, fail func(error) error) ([]string, error) {
	base := b.leaseKey("")
	resp, err := b.kv.KV.Get(ctx, base+prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fail(err)
	}
	var names []string
	for _, kv := range resp.Kvs {
		name, ok := candidacyName(base, string(kv.Key))
		if ok && (len(names) == 0 || names[len(names)-1] != name) {
			names = append(names, name)
		}
	}
	if names == nil {
		names = []string{}
	}
	return names, nil
}

var _ backend.CandidateLister = (*session)(nil)

// Candidates returns the session IDs of the candidacies for name, oldest
// first: one range request of <prefix>lease/<name>/, keys only, sorted by
// create revision. It implements [backend.CandidateLister].
func (s *session) Candidates(ctx context.Context, name string) ([]string, error) {
	if err := checkName("lease", name); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("candidates of %q", name)
	if err := s.overErr(op); err != nil {
		return nil, err
	}
	cctx, release := s.bind(ctx)
	defer release()
	return s.b.candidates(cctx, name, func(err error) error { return s.failure(ctx, op, err) })
}

// candidates reads the session IDs of the candidacies for name, oldest
// first: the read of session.Candidates and view.Candidates.
func (b *Backend) candidates(ctx context.Context, name string, fail func(error) error) ([]string, error) {
	base := b.candidacyPrefix(name)
	resp, err := b.kv.KV.Get(ctx, base, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, fail(err)
	}
	ids := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		ids = append(ids, strings.TrimPrefix(string(kv.Key), base))
	}
	return ids, nil
}
