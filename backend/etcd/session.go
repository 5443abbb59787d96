package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
)

// Why a session ended, for the callers that ask afterwards.
var (
	errClosed        = errors.New("closed")
	errExpired       = errors.New("expired on the server")
	errBackendClosed = errors.New("backend closed")
	errClientClosed  = errors.New("etcd client closed")
	errAbandoned     = errors.New("abandoned while opening")
	errOverwritten   = errors.New("lost: its key was overwritten by another writer")
)

// session is one etcd lease and what hangs off it. It implements
// [backend.Session].
type session struct {
	b     *Backend
	id    string // the lease ID in hex
	lease clientv3.LeaseID
	ttl   time.Duration // granted
	key   string        // <prefix>session/<id>, bound to the lease

	// ctx is cancelled, with the reason as its cause, when the session is
	// over for the caller; Done returns its channel.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// epoch is the session key's value, a counter: every Acquire
	// transaction compares it, and the undo of an interrupted Acquire bumps
	// it, so that the interrupted transaction fails if applied afterwards.
	epoch atomic.Int64

	mu     sync.Mutex
	ended  bool
	closed bool             // Close was called
	wg     sync.WaitGroup   // the session's goroutines
	unsure map[string]*undo // lease names being cleaned up after an uncertain Acquire
	undos  []string         // names in unsure not yet taken by the undo worker, in order
	undoer bool             // the undo worker is running

	lw leaseWatch // the holdings, told of their loss by one watch
}

func newSession(b *Backend, id clientv3.LeaseID, ttl time.Duration) *session {
	ctx, cancel := context.WithCancelCause(b.ctx)
	hex := fmt.Sprintf("%016x", int64(id))
	return &session{
		b:      b,
		id:     hex,
		lease:  id,
		ttl:    ttl,
		key:    b.sessionKey(hex),
		ctx:    ctx,
		cancel: cancel,
		unsure: make(map[string]*undo),
		lw:     leaseWatch{names: make(map[string]*slot)},
	}
}

// ID returns the etcd lease ID in 16 hexadecimal digits: unique in the
// cluster, and sorted like the sessions' creation only by chance.
func (s *session) ID() string { return s.id }

// TTL returns the TTL etcd granted, in whole seconds.
func (s *session) TTL() time.Duration { return s.ttl }

// Done is closed when the backend knows the session is over: etcd deleted
// its key (the lease expired or was revoked), a keep-alive found the lease
// gone, Close or Backend.Close was called, or the client was closed.
func (s *session) Done() <-chan struct{} { return s.ctx.Done() }

// KeepAlive renews the lease once, with a single keep-alive request (not the
// client's background keep-alive stream), and returns the TTL etcd reports.
// etcd counts the TTL from the instant it receives the request, which is
// after the call began, so the TTL holds from the call's start. A reply
// from another cluster, or one behind the revisions seen that an ordered
// read confirms, ends the session (see [ErrRestored]).
func (s *session) KeepAlive(ctx context.Context) (time.Duration, error) {
	if err := s.overErr("keep-alive"); err != nil {
		return 0, err
	}
	cctx, release := s.bind(ctx)
	defer release()
	floor := s.b.floor()
	resp, err := s.b.cli.KeepAliveOnce(cctx, s.lease)
	if err != nil {
		return 0, s.failure(ctx, "keep-alive", err)
	}
	behind, err := s.b.observe(resp.ResponseHeader, floor, false)
	if behind {
		// The member that answered may only lag behind the others: an
		// ordered read tells.
		_, err = s.b.kv.KV.Get(cctx, s.key, clientv3.WithCountOnly())
		if err != nil && !errors.Is(err, ErrRestored) {
			err = nil // no news: the renewal itself succeeded
		}
	}
	if err != nil {
		return 0, s.failure(ctx, "keep-alive", err)
	}
	return time.Duration(resp.TTL) * time.Second, nil
}

// Close revokes the lease, which deletes every key bound to it at once:
// the session key, lease keys and member keys. The session is over for the
// caller before the request is sent, whatever its outcome.
func (s *session) Close(ctx context.Context) error {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	s.mu.Unlock()
	if !first {
		return nil
	}
	s.end(errClosed)
	s.wg.Wait()
	if s.b.isClosed() || s.b.cli.Ctx().Err() != nil {
		return nil // abandoned: it expires by itself
	}
	_, err := s.b.cli.Revoke(ctx, s.lease)
	if err != nil && !isLeaseNotFound(err) {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("simba/etcd: close session %s: revoke lease: %w", s.id, err)
	}
	return nil
}

// end makes the session over for the caller, once, for the reason given.
func (s *session) end(why error) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.cancel(why)
	s.mu.Unlock()
	s.b.unregister(s)
}

// spawn runs f on a goroutine of the session, unless the session is over.
// Close and Backend.Close wait for it. (Backend.Close ends every live
// session before it waits, and an ended session spawns nothing, so every
// Add happens before the Wait.)
func (s *session) spawn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.wg.Add(1)
	s.b.wg.Add(1)
	go func() {
		defer s.b.wg.Done()
		defer s.wg.Done()
		f()
	}()
	return true
}

// bind returns a context that ends when ctx ends or the session is over.
func (s *session) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	return bindTo(ctx, s.ctx)
}

// bindTo returns a context that ends when ctx or owner ends (a session's,
// a view's, the backend's context), and its cancel function.
func bindTo(ctx, owner context.Context) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(owner, cancel)
	return cctx, func() {
		stop()
		cancel()
	}
}

// overErr returns an error wrapping ErrSessionDone if the session is over.
func (s *session) overErr(op string) error {
	if s.ctx.Err() == nil {
		return nil
	}
	return s.doneErr(op)
}

// doneErr is the error of a call made on a session that is over.
func (s *session) doneErr(op string) error {
	cause := context.Cause(s.ctx)
	if errors.Is(cause, ErrRestored) {
		return fmt.Errorf("simba/etcd: %s: session %s: %w: %w", op, s.id, cause, backend.ErrSessionDone)
	}
	return fmt.Errorf("simba/etcd: %s: session %s %v: %w", op, s.id, cause, backend.ErrSessionDone)
}

// failure turns the error of a request made for the caller's ctx into the
// error of op: the caller's ctx error, ErrSessionDone when the session is
// over (or etcd says its lease is gone, which ends it), and otherwise a
// transient error.
func (s *session) failure(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(err, ErrRestored):
		s.end(err) // ended already by the refusal, with the same cause
		return s.doneErr(op)
	case isLeaseNotFound(err):
		s.end(errExpired)
		return s.doneErr(op)
	case ctx.Err() != nil:
		return fmt.Errorf("simba/etcd: %s: %w", op, ctx.Err())
	case s.ctx.Err() != nil:
		return s.doneErr(op)
	case s.b.cli.Ctx().Err() != nil:
		s.end(errClientClosed)
		return s.doneErr(op)
	}
	return fmt.Errorf("simba/etcd: %s: %w", op, err)
}

// isLeaseNotFound reports whether err is etcd's answer that a lease does
// not exist (any more).
func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound)
}

// watchSelf watches the session key from revision rev and ends the session
// when etcd deletes it: the lease expired or was revoked. It runs on a
// goroutine of the session until the session is over.
func (s *session) watchSelf(rev int64) {
	for {
		if s.ctx.Err() != nil {
			return
		}
		gone, next, err := s.watchKey(s.ctx, s.key, rev, func(ev *clientv3.Event) bool {
			return ev.Type == mvccpb.DELETE || clientv3.LeaseID(ev.Kv.Lease) != s.lease
		})
		switch {
		case gone:
			s.end(errExpired)
			return
		case err != nil:
			if !s.pause(retryDelay) {
				return
			}
		}
		// The watch broke (compaction, cancellation by the server): read the
		// key again and watch from there.
		resp, err := s.b.kv.Get(s.ctx, s.key)
		if err != nil {
			if s.ctx.Err() == nil && s.b.cli.Ctx().Err() != nil {
				s.end(errClientClosed)
				return
			}
			if !s.pause(retryDelay) {
				return
			}
			continue
		}
		if len(resp.Kvs) == 0 || clientv3.LeaseID(resp.Kvs[0].Lease) != s.lease {
			s.end(errExpired)
			return
		}
		rev = max(next, resp.Header.Revision+1)
	}
}

// retryDelay is the pause before a watch is set up again after an error.
const retryDelay = 100 * time.Millisecond

// pause waits d, jittered (see backend/kit/backoff), unless the session
// ends first; it reports whether the wait passed.
func (s *session) pause(d time.Duration) bool { return backoff.Sleep(s.ctx, backoff.Jitter(d)) }

// watchKey watches key from revision rev, under ctx, until gone reports
// true for an event, which watchKey then reports. It returns early, not gone,
// when ctx ends or the watch breaks, with the revision to go on from; a
// closed client ends the session.
func (s *session) watchKey(ctx context.Context, key string, rev int64, gone func(*clientv3.Event) bool) (bool, int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := rev
	wch := s.b.cli.Watch(ctx, key, clientv3.WithRev(rev))
	for {
		select {
		case <-ctx.Done():
			return false, next, nil
		case resp, ok := <-wch:
			if !ok {
				if s.ctx.Err() == nil && s.b.cli.Ctx().Err() != nil {
					s.end(errClientClosed)
				}
				return false, next, nil
			}
			if err := resp.Err(); err != nil {
				return false, next, err
			}
			if _, err := s.b.observe(resp.Header, 0, false); err != nil {
				return false, next, err // the session is over
			}
			for _, ev := range resp.Events {
				if gone(ev) {
					return true, next, nil
				}
				next = ev.Kv.ModRevision + 1
			}
		}
	}
}
