package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/limit"
)

// Causes of a session's end; each wraps backend.ErrSessionDone.
var (
	errClosedByCaller = fmt.Errorf("%w (closed)", backend.ErrSessionDone)
	errExpired        = fmt.Errorf("%w: expired on the server", backend.ErrSessionDone)
)

// session is one ZooKeeper session on a go-zookeeper connection of its own.
// It implements [backend.Session].
type session struct {
	b    *Backend
	p    paths
	link *link

	connSet chan struct{} // closed once conn and events are set
	conn    *zk.Conn
	events  <-chan zk.Event // closed when go-zookeeper's goroutines have exited

	id  int64  // set by open
	sid string // id as 16 hex digits

	ctx    context.Context // cancelled when the session is over
	cancel context.CancelFunc

	mu         sync.Mutex
	over       bool
	cause      error                     // why it is over; wraps backend.ErrSessionDone
	leases     map[string]*lease         // current and pending holdings by name
	names      map[string]*nameLock      // per-name locks of Acquire and Release
	nonce      uint64                    // of the last Acquire attempt (see acquisition.attempt)
	recWatches map[*recordWatch]struct{} // WatchRecords calls running
	leaves     map[string]uint64         // Leave calls per group (see Join)
	reconnects chan struct{}             // closed at the next reconnection (see reconnection)

	connections atomic.Int64 // connections the server granted the session on (see sessionEstablished)

	cacheMu  sync.Mutex
	recCache map[string]cachedRecord // see reccache.go
	// recordReads counts the reads of record writes (for tests: a
	// ReleaseWithRecords served from the cache makes none).
	recordReads atomic.Int64
	// listReads counts the listings ListRecordsWithSkipped sent (for
	// tests: one answered from a watch's kept listing sends none).
	listReads atomic.Int64

	// held caches, by lease name, whether its container has candidacies,
	// kept true by a child watch on the container (see HeldLeases);
	// heldEpoch counts the watch events of each name, and heldGen the
	// reconnections (which clear held: see reconnected), so that a reading
	// overtaken by either is not cached. Guarded by heldMu.
	heldMu    sync.Mutex
	held      map[string]bool
	heldEpoch map[string]uint64
	heldGen   uint64
	heldReads atomic.Int64 // container listings by HeldLeases (for tests)

	// memberMu orders the member writes of Join and Leave on the server
	// (held by their requests, not by the callers).
	memberMu sync.Mutex

	calls        sync.WaitGroup // goroutines running requests and watches
	lim          *limit.Limiter // a slot per call in flight (see WithMaxRequests)
	shutdownDone chan struct{}  // closed when the connection is shut down
}

func newSession(b *Backend, requestedMs int32) (*session, error) {
	lim, err := limit.New(b.cfg.max)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{
		b:            b,
		p:            b.paths,
		connSet:      make(chan struct{}),
		ctx:          ctx,
		cancel:       cancel,
		leases:       make(map[string]*lease),
		names:        make(map[string]*nameLock),
		leaves:       make(map[string]uint64),
		lim:          lim,
		shutdownDone: make(chan struct{}),
	}
	s.link = newLink(b.cfg.dial, b.cfg.connect, requestedMs, len(b.servers), func(err error) { s.end(err, false) })
	return s, nil
}

func (s *session) setConn(conn *zk.Conn, events <-chan zk.Event) {
	s.conn, s.events = conn, events
	close(s.connSet)
}

// open waits for the server to grant the session, then presents the
// credentials.
func (s *session) open(ctx context.Context) error {
	var err error
	select {
	case <-s.link.ready:
	case <-s.link.failed:
		err = fmt.Errorf("simba/zookeeper: open: no server of %v reachable: %w", s.b.servers, s.link.lastError())
	case <-ctx.Done():
		err = fmt.Errorf("simba/zookeeper: open: %w", ctx.Err())
		if last := s.link.lastError(); last != nil {
			err = fmt.Errorf("%w (last connection error: %v)", err, last)
		}
	case <-s.ctx.Done():
		err = s.live("open")
	}
	if err == nil {
		s.id = s.link.sessionID()
		s.sid = fmt.Sprintf("%016x", uint64(s.id))
		err = s.prepare(ctx)
	}
	if err != nil {
		s.end(err, true) // a session granted meanwhile is closed, not left behind
		return err
	}
	return nil
}

// prepare makes a granted session ready for use. Transient errors (a
// connection lost meanwhile) are retried until ctx ends.
func (s *session) prepare(ctx context.Context) error {
	if ttl := s.TTL(); ttl <= 0 {
		return fmt.Errorf("simba/zookeeper: open: granted session timeout %v does not exceed the leader lag %v", s.link.granted(), s.b.cfg.lag)
	}
	retry := func(op string, f func(*zk.Conn) error) error {
		for failures := 1; ; failures++ {
			_, err := call(s, ctx, op, func(c *zk.Conn) (struct{}, error) { return struct{}{}, f(c) })
			if err == nil || ctx.Err() != nil || errors.Is(err, backend.ErrSessionDone) || errors.Is(err, zk.ErrAuthFailed) {
				return err
			}
			if !s.sleep(ctx, backoff.Wait(failures, s.link.granted()/3)) {
				return err
			}
		}
	}
	for _, c := range s.b.cfg.auth {
		if err := retry("open: add credentials", func(conn *zk.Conn) error { return conn.AddAuth(c.scheme, c.auth) }); err != nil {
			return err
		}
	}
	return nil
}

// ID returns the ZooKeeper session ID as 16 hexadecimal digits.
func (s *session) ID() string { return s.sid }

// TTL returns the smallest session timeout the server has granted this
// session (on any of its connections), less the leader lag.
func (s *session) TTL() time.Duration { return s.link.granted() - s.b.cfg.lag }

// Done is closed when the session is over: closed, expired (as the client
// learns on reconnecting), or abandoned by Backend.Close.
func (s *session) Done() <-chan struct{} { return s.ctx.Done() }

// KeepAlive renews the session with one round trip (an exists request on
// the root), and returns the granted timeout.
//
// ZooKeeper expires a session when it has heard nothing from the client for
// the session timeout, counted from the last packet the server received. The
// request is received after KeepAlive was called, so a reply proves the
// server will not expire the session before the call's start plus the
// timeout (less the leader lag; see [WithLeaderLag]). The timeout is read
// before and after the call and the smaller one is returned, in case a
// reconnection meanwhile was granted a shorter one.
func (s *session) KeepAlive(ctx context.Context) (time.Duration, error) {
	ttl := s.TTL()
	_, err := callWith(s, ctx, "keep-alive", false, func(c *zk.Conn) (bool, error) {
		ok, _, err := c.Exists(s.p.root)
		return ok, err
	})
	if err != nil {
		return 0, err
	}
	return min(ttl, s.TTL()), nil
}

// Close ends the session on the server: ZooKeeper deletes its ephemeral
// znodes (leases and memberships) at once. It returns nil once the server
// has confirmed, or when the session was already over; an error when the
// server could not confirm before ctx ended or the connection failed, in
// which case the session expires by itself within its timeout. Either way
// the session is over for the caller. Within ctx, Close also waits for the
// session's goroutines to exit. Whatever ctx, Close returns within
// shutdownBound (the session timeout plus 5 s): by then the server has
// ended the session, confirmed or not.
func (s *session) Close(ctx context.Context) error {
	if !s.end(errClosedByCaller, true) {
		return nil
	}
	bound := s.shutdownBound()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-s.link.closeAcked:
		select {
		case <-s.shutdownDone:
		case <-ctx.Done():
		case <-t.C:
		}
		return nil
	case <-s.shutdownDone:
		select {
		case <-s.link.closeAcked:
			return nil
		default:
		}
		return fmt.Errorf("simba/zookeeper: close session %s: the server did not confirm (no connection); it expires by itself within %v", s.sid, s.link.granted())
	case <-ctx.Done():
		return fmt.Errorf("simba/zookeeper: close session %s: %w; it expires by itself within %v", s.sid, ctx.Err(), s.link.granted())
	case <-t.C:
		return fmt.Errorf("simba/zookeeper: close session %s: neither confirmed nor shut down within %v; it expires by itself within %v", s.sid, bound, s.link.granted())
	}
}

// shutdownSlack is what shutdownBound adds to the session timeout:
// go-zookeeper's Close waits up to 3 s (2 s to queue the close request,
// 1 s for its answer), and a TLS connection's Close up to 5 s to send its
// close_notify alert.
const shutdownSlack = 5 * time.Second

// shutdownBound bounds the waits of Session.Close and Backend.Close for
// the session's shutdown: the session timeout (granted, or requested
// before) plus shutdownSlack. Past the session timeout the server has
// expired the session whatever the client still does; the slack covers
// the closes that end the connection on a sound one.
func (s *session) shutdownBound() time.Duration {
	return s.link.knownTimeout() + shutdownSlack
}

// end makes the session over, once: Done and the Lost channels of its
// leases close, later calls fail with cause, and the connection is shut
// down in the background, gracefully (the server is asked to end the
// session) or not (the session is abandoned to expire). It reports whether
// this call ended the session.
func (s *session) end(cause error, graceful bool) bool {
	if !errors.Is(cause, backend.ErrSessionDone) {
		cause = fmt.Errorf("%w: %w", backend.ErrSessionDone, cause)
	}
	s.mu.Lock()
	if s.over {
		s.mu.Unlock()
		return false
	}
	s.over, s.cause = true, cause
	for _, l := range s.leases {
		l.endLocked(true)
	}
	clear(s.leases)
	s.mu.Unlock()
	s.cancel()
	s.link.stop()
	go s.shutdown(graceful)
	return true
}

// shutdown closes the go-zookeeper connection and waits for every goroutine
// of the session, go-zookeeper's included, to exit.
func (s *session) shutdown(graceful bool) {
	defer close(s.shutdownDone)
	defer s.b.forget(s)
	<-s.connSet
	if s.conn != nil {
		if !graceful {
			s.link.closeCurrent() // nothing more reaches the server
		}
		// Requests in flight end first, for a short while at most:
		// go-zookeeper v1.0.4's CreateContainer reads its response
		// unguarded when Close cuts its wait short, while the receiving
		// loop may still be writing it (a data race the race detector
		// reports; Create has the guard).
		s.awaitCalls(callsDrain)
		// Sends the close request if connected and waits for its answer,
		// or for at most a second.
		s.conn.Close()
		s.link.closeCurrent()
		for range s.events { // closed when go-zookeeper's loop has exited
		}
	}
	s.calls.Wait()
}

// callsDrain bounds how long shutdown waits for the requests in flight
// before it closes the connection.
const callsDrain = 250 * time.Millisecond

// awaitCalls waits for the session's calls to return, for at most d. No
// new call starts: the session is over.
func (s *session) awaitCalls(d time.Duration) {
	done := make(chan struct{})
	go func() {
		s.calls.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// live returns an error wrapping ErrSessionDone once the session is over.
func (s *session) live(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over {
		return fmt.Errorf("simba/zookeeper: %s: %w", op, s.cause)
	}
	return nil
}

// goCall starts f on a goroutine owned by the session; it reports false,
// starting nothing, once the session is over.
func (s *session) goCall(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over {
		return false
	}
	s.calls.Add(1)
	go func() {
		defer s.calls.Done()
		f()
	}()
	return true
}

// call runs f, which sends requests on the connection, and returns its
// result, or an error when ctx ends or the session is over first. A
// go-zookeeper request cannot be withdrawn: f then runs on to completion on
// its goroutine, which the session owns. f waits for one of the session's
// slots (see WithMaxRequests) first.
func call[T any](s *session, ctx context.Context, op string, f func(*zk.Conn) (T, error)) (T, error) {
	return callWith(s, ctx, op, true, f)
}

// callWith is call, with f waiting for a slot only if bounded.
func callWith[T any](s *session, ctx context.Context, op string, bounded bool, f func(*zk.Conn) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		if err := s.live(op); err != nil {
			return zero, err
		}
		return zero, fmt.Errorf("simba/zookeeper: %s: %w", op, err)
	}
	r := startWith(s, ctx, bounded, f)
	if r == nil {
		return zero, s.live(op)
	}
	return r.wait(ctx, op)
}

// request is f running on a goroutine of the session (see start).
type request[T any] struct {
	s    *session
	done chan struct{} // closed when f has returned, or will not run
	sent bool          // f ran (set before done is closed)
	v    T
	err  error
}

// start runs f, which sends requests on the connection, on a goroutine
// owned by the session, so that the caller may send other requests
// meanwhile; it returns nil, starting nothing, once the session is over.
// f runs once one of the session's slots is free, and not at all if ctx
// ends or the session is over first (r's error is then ctx's).
func start[T any](s *session, ctx context.Context, f func(*zk.Conn) (T, error)) *request[T] {
	return startWith(s, ctx, true, f)
}

// startWith is start, with f waiting for a slot only if bounded.
func startWith[T any](s *session, ctx context.Context, bounded bool, f func(*zk.Conn) (T, error)) *request[T] {
	r := &request[T]{s: s, done: make(chan struct{})}
	if !s.goCall(func() {
		defer close(r.done)
		if bounded {
			if err := s.lim.TakeUntil(ctx, s.ctx); err != nil {
				r.err = err // gone while waiting, or as the slot came: send nothing
				if s.ctx.Err() != nil {
					r.err = zk.ErrClosing
				}
				return
			}
			defer s.lim.Free()
		}
		r.sent = true
		r.v, r.err = f(s.conn)
	}) {
		return nil
	}
	return r
}

// wait returns the result of r, or an error when ctx ends or the session
// is over first (r then runs on to completion).
func (r *request[T]) wait(ctx context.Context, op string) (T, error) {
	var zero T
	s := r.s
	select {
	case <-r.done:
		return r.v, s.zkErr(op, r.err)
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
	if err := s.live(op); err != nil {
		return zero, err
	}
	return zero, fmt.Errorf("simba/zookeeper: %s: %w", op, ctx.Err())
}

// zkErr wraps an error from go-zookeeper; errors that mean the session is
// over become errors wrapping ErrSessionDone.
func (s *session) zkErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrSessionExpired):
		s.end(errExpired, false)
		return s.live(op)
	case errors.Is(err, zk.ErrClosing), errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer):
		if err := s.live(op); err != nil {
			return err
		}
	}
	return fmt.Errorf("simba/zookeeper: %s: %w", op, err)
}

// onEvent is go-zookeeper's event callback: it must not block.
func (s *session) onEvent(ev zk.Event) {
	switch ev.Type {
	case zk.EventNodeCreated, zk.EventNodeDeleted, zk.EventNodeDataChanged, zk.EventNodeChildrenChanged:
		if name, ok := s.p.leaseContainer(ev.Path); ok {
			s.heldChanged(name)
		} else if name, _, ok := s.p.leaseChild(ev.Path); ok {
			if ev.Type == zk.EventNodeDeleted || ev.Type == zk.EventNodeDataChanged {
				s.leaseEvent(name, ev.Path, ev.Type)
			}
		} else if recs := s.p.root + recordDir; ev.Path == recs || strings.HasPrefix(ev.Path, recs+"/") {
			s.mu.Lock()
			s.recordEventLocked(ev.Path)
			s.mu.Unlock()
		}
	case zk.EventSession:
		switch ev.State {
		case zk.StateExpired:
			s.end(errExpired, false)
		case zk.StateHasSession:
			s.sessionEstablished()
		}
	}
}

// sleep waits for d, or until ctx ends or the session is over; it reports
// whether d passed.
func (s *session) sleep(ctx context.Context, d time.Duration) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	return backoff.Sleep(ctx, d)
}

// nameLock serialises Acquire and Release of one name on one session.
type nameLock struct {
	ch   chan struct{}
	refs int
}

// lockName takes the lock of name, waiting until ctx ends or the session
// is over.
func (s *session) lockName(ctx context.Context, op, name string) (unlock func(), err error) {
	s.mu.Lock()
	nl := s.names[name]
	if nl == nil {
		nl = &nameLock{ch: make(chan struct{}, 1)}
		s.names[name] = nl
	}
	nl.refs++
	s.mu.Unlock()
	drop := func() {
		s.mu.Lock()
		if nl.refs--; nl.refs == 0 {
			delete(s.names, name)
		}
		s.mu.Unlock()
	}
	select {
	case nl.ch <- struct{}{}:
		return func() { <-nl.ch; drop() }, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-s.ctx.Done():
	}
	drop()
	if err := s.live(op); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("simba/zookeeper: %s: %w", op, err)
}

var (
	_ backend.Session          = (*session)(nil)
	_ backend.Lease            = (*lease)(nil)
	_ backend.LostNotifier     = (*lease)(nil)
	_ backend.LeaseLister      = (*session)(nil)
	_ backend.CandidateLister  = (*session)(nil)
	_ backend.Records          = (*session)(nil)
	_ backend.RecordPrefetcher = (*session)(nil)
)
