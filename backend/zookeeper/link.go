package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/backend"
)

// errLinkStopped refuses connections once the session is over.
var errLinkStopped = errors.New("simba/zookeeper: session over: no more connections")

// link is a session's side of the connections go-zookeeper makes for it. It
// dials them, wraps each in a [wire], and keeps what the wires learn from the
// server's connect responses: the session ID and the timeout the server
// granted. It also enforces that a session never acts on a ZooKeeper session
// other than the one it was opened with: go-zookeeper, after an expiry, would
// silently start a new session on the same connection object; the link
// refuses that connection.
type link struct {
	dialer    DialFunc
	connect   time.Duration // see connectTimeout
	requested int32         // requested session timeout, ms
	nservers  int
	hosts     *hosts
	gone      func(error) // the server ended the session, or the client would start another

	ctx     context.Context // ends with stop: dials in progress are abandoned
	cancel  context.CancelFunc
	stopped atomic.Bool

	mu         sync.Mutex
	id         int64         // 0 until the server grants the session
	timeout    time.Duration // smallest timeout the server granted on any connection
	lastZxid   int64         // largest zxid in a reply (see wire)
	current    *wire
	failures   int // failed connection attempts before the session was granted
	lastErr    error
	ready      chan struct{} // closed when the server grants the session
	failed     chan struct{} // closed when every server failed before that
	failedSet  bool
	closeAcked chan struct{} // closed when the server answers the close request
	ackedSet   bool

	sentMu sync.Mutex
	sent   map[string][]chan struct{} // see awaitCreateSent
}

func newLink(dialer DialFunc, connect time.Duration, requested int32, nservers int, gone func(error)) *link {
	ctx, cancel := context.WithCancel(context.Background())
	l := &link{
		dialer:     dialer,
		connect:    connect,
		requested:  requested,
		nservers:   nservers,
		gone:       gone,
		ctx:        ctx,
		cancel:     cancel,
		ready:      make(chan struct{}),
		failed:     make(chan struct{}),
		closeAcked: make(chan struct{}),
	}
	l.hosts = &hosts{stopped: &l.stopped}
	return l
}

// dial is the go-zookeeper Dialer: it opens a connection with the
// configured DialFunc and wraps it. go-zookeeper's timeout (a second) is
// replaced by connectTimeout's. The DialFunc runs on a goroutine of its
// own, so that a dialer that does not honour its ctx cannot hold up
// go-zookeeper, nor the session's shutdown: its connection, if it comes
// after the bound, is closed.
func (l *link) dial(network, address string, _ time.Duration) (net.Conn, error) {
	if l.stopped.Load() {
		return nil, errLinkStopped
	}
	timeout := l.connectTimeout()
	ctx, cancel := context.WithTimeout(l.ctx, timeout)
	defer cancel()
	type dialed struct {
		c   net.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := l.dialer(ctx, network, address)
		ch <- dialed{c, err}
	}()
	var r dialed
	select {
	case r = <-ch:
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		r.err = fmt.Errorf("simba/zookeeper: dial %s: not connected within %v: %w", address, timeout, ctx.Err())
	}
	if r.err != nil {
		l.attemptFailed(r.err)
		return nil, r.err
	}
	c := r.c
	w := newWire(c, l, address, timeout)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped.Load() {
		c.Close()
		return nil, errLinkStopped
	}
	l.current = w
	return w, nil
}

// minReconnectTimeout is the least connectTimeout gives an attempt to
// reconnect: go-zookeeper's own connect timeout.
const minReconnectTimeout = time.Second

// connectTimeout bounds one connection attempt: the dial (with its TLS
// handshake) and, again, the server's connect response. Until the server
// has granted the session, it is the configured connect timeout (see
// WithConnectTimeout): nothing is lost by waiting, and Open's ctx bounds
// the whole. Once the session lives, an attempt to reconnect has, as the
// Java client's, the granted session timeout shared among the servers, so
// that every server can be tried before the session expires; at least
// minReconnectTimeout, at most the configured timeout.
func (l *link) connectTimeout() time.Duration {
	l.mu.Lock()
	granted := l.timeout
	l.mu.Unlock()
	if granted == 0 {
		return l.connect
	}
	return min(l.connect, max(minReconnectTimeout, granted/time.Duration(max(l.nservers, 1))))
}

// attemptFailed records a failed connection attempt (dial or handshake).
// Before the session is granted, a failure on every server ends Open.
func (l *link) attemptFailed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastErr = err
	if l.id != 0 {
		return
	}
	l.failures++
	if l.failures >= l.nservers && !l.failedSet {
		l.failedSet = true
		close(l.failed)
	}
}

// lastError returns the error of the last failed connection attempt.
func (l *link) lastError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// checkConnect vets the session ID of a connect request go-zookeeper is
// about to send: 0 asks for a new session, which is allowed only for the
// first one.
func (l *link) checkConnect(id int64) error {
	if l.stopped.Load() {
		return errLinkStopped
	}
	l.mu.Lock()
	own := l.id
	l.mu.Unlock()
	if own != 0 && id != own {
		err := fmt.Errorf("%w: session 0x%x is over; the client tried to start session 0x%x in its place", backend.ErrSessionDone, own, id)
		l.gone(err)
		return err
	}
	return nil
}

// accept takes the server's connect response: the session ID (0 when the
// server says the session has expired) and the timeout it granted, in ms.
func (l *link) accept(id int64, timeoutMs int32) error {
	if l.stopped.Load() {
		return errLinkStopped
	}
	l.mu.Lock()
	var gone error
	switch {
	case id == 0 && l.id != 0:
		gone = fmt.Errorf("%w: the server expired session 0x%x", backend.ErrSessionDone, l.id)
	case id == 0:
		l.mu.Unlock()
		return errors.New("simba/zookeeper: the server granted no session")
	case timeoutMs <= 0:
		l.mu.Unlock()
		return fmt.Errorf("simba/zookeeper: the server granted session 0x%x a timeout of %dms", id, timeoutMs)
	case l.id == 0:
		l.id = id
		l.timeout = time.Duration(timeoutMs) * time.Millisecond
		close(l.ready)
	case id != l.id:
		gone = fmt.Errorf("%w: the server answered for session 0x%x instead of 0x%x", backend.ErrSessionDone, id, l.id)
	default:
		// A server may grant another timeout on reconnection, and the one
		// in force for expiry is the latest. Keeping the smallest ever
		// granted covers both.
		l.timeout = min(l.timeout, time.Duration(timeoutMs)*time.Millisecond)
	}
	l.mu.Unlock()
	if gone != nil {
		l.gone(gone)
		return gone
	}
	return nil
}

// sessionID returns the granted session ID (0 before).
func (l *link) sessionID() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id
}

// granted returns the smallest timeout the server granted the session.
func (l *link) granted() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.timeout
}

// knownTimeout is the granted timeout, or the requested one before.
func (l *link) knownTimeout() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timeout > 0 {
		return l.timeout
	}
	return time.Duration(l.requested) * time.Millisecond
}

// sawZxid records the zxid of a reply.
func (l *link) sawZxid(z int64) {
	l.mu.Lock()
	l.lastZxid = max(l.lastZxid, z)
	l.mu.Unlock()
}

// zxid returns the largest zxid seen in a reply.
func (l *link) zxid() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastZxid
}

// acked records that the server answered the close request.
func (l *link) acked() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ackedSet {
		l.ackedSet = true
		close(l.closeAcked)
	}
}

// awaitCreateSent returns a channel that is closed once a create request
// for path has been written to a connection, for a caller that is about to
// send one and wants to send another request right behind it: go-zookeeper
// sends requests in the order they were queued, and the server answers a
// session's requests in the order they were sent. cancel forgets the
// channel.
func (l *link) awaitCreateSent(path string) (sent <-chan struct{}, cancel func()) {
	ch := make(chan struct{})
	l.sentMu.Lock()
	if l.sent == nil {
		l.sent = make(map[string][]chan struct{})
	}
	l.sent[path] = append(l.sent[path], ch)
	l.sentMu.Unlock()
	return ch, func() {
		l.sentMu.Lock()
		defer l.sentMu.Unlock()
		chs := l.sent[path]
		for i, c := range chs {
			if c == ch {
				chs = append(chs[:i], chs[i+1:]...)
				break
			}
		}
		if len(chs) == 0 {
			delete(l.sent, path)
		} else {
			l.sent[path] = chs
		}
	}
}

// createSent closes the channels waiting for a create request for path.
func (l *link) createSent(path []byte) {
	l.sentMu.Lock()
	defer l.sentMu.Unlock()
	if len(l.sent) == 0 {
		return
	}
	chs, ok := l.sent[string(path)]
	if !ok {
		return
	}
	for _, c := range chs {
		close(c)
	}
	delete(l.sent, string(path))
}

// stop refuses every later connection and abandons dials in progress.
func (l *link) stop() {
	l.stopped.Store(true)
	l.cancel()
}

// closeCurrent closes the current connection, if any.
func (l *link) closeCurrent() {
	l.mu.Lock()
	w := l.current
	l.mu.Unlock()
	if w != nil {
		w.Close()
	}
}

// hosts is the go-zookeeper HostProvider of one session: the servers in
// turn, without DNS look-ups of its own (the dialer resolves, honouring its
// context). It asks go-zookeeper to pause (about a second) only after a
// whole round of failed attempts, so that a dropped connection is retried
// at once, and always once the session is over.
type hosts struct {
	stopped *atomic.Bool

	mu      sync.Mutex
	servers []string
	next    int
	tries   int // attempts since the last successful connection
}

// Init takes the server list.
func (h *hosts) Init(servers []string) error {
	if len(servers) == 0 {
		return errors.New("simba/zookeeper: no server address given")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = append([]string(nil), servers...)
	return nil
}

// Len returns the number of servers.
func (h *hosts) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

// Next returns the server to try next, and whether go-zookeeper should
// pause before trying it.
func (h *hosts) Next() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.servers[h.next]
	h.next = (h.next + 1) % len(h.servers)
	pause := h.tries >= len(h.servers) || h.stopped.Load()
	if pause {
		h.tries = 0
	}
	h.tries++
	return s, pause
}

// Connected records a successful connection.
func (h *hosts) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tries = 0
}
