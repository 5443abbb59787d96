package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/option"
)

var _ backend.Backend = (*Backend)(nil)

// Backend is a [backend.Backend] on a ZooKeeper server or ensemble. Each
// session it opens is one ZooKeeper session on a connection of its own.
//
// A Backend is safe for concurrent use by multiple goroutines.
type Backend struct {
	servers []string
	cfg     config
	paths   paths
	zkLog   zk.Logger

	mu       sync.Mutex
	closed   bool
	sessions map[*session]struct{} // from Open until their connection is shut down

	lagWarning sync.Once // see warnNoLag
}

// warnNoLag warns, once, at the first Open, when the backend has several
// servers, an ensemble, and no leader lag: its sessions' terms may then
// outlast them on the leader (see [WithLeaderLag]). The read-only uses,
// which open no session, are not told.
func (b *Backend) warnNoLag() {
	if len(b.servers) < 2 || b.cfg.lag > 0 {
		return
	}
	b.lagWarning.Do(func() {
		b.cfg.logger.Warn("simba/zookeeper: several servers (an ensemble) and no leader lag: a client whose server is cut off from the leader may count on its term after the leader expired its session; set WithLeaderLag to syncLimit × tickTime + tickTime + a third of the session timeout (see its documentation)",
			"servers", len(b.servers))
	})
}

// New returns a backend on the ZooKeeper servers at the given addresses,
// each "host:port" or "host" (port 2181), one address per element; the
// root is set with [WithRoot], not as a "/chroot" suffix. It connects to
// nothing yet: each [Backend.Open] connects on its own.
func New(servers []string, opts ...Option) (*Backend, error) {
	if len(servers) == 0 {
		return nil, errors.New("simba/zookeeper: no server address given")
	}
	addrs := make([]string, len(servers))
	for i, s := range servers {
		a, err := checkAddress(s)
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	cfg := defaults()
	if err := option.Apply("simba/zookeeper", &cfg, opts); err != nil {
		return nil, err
	}
	cfg.defaultACL()
	return &Backend{
		servers:  addrs,
		cfg:      cfg,
		paths:    paths{cfg.root},
		zkLog:    zkLogger{cfg.logger},
		sessions: make(map[*session]struct{}),
	}, nil
}

// checkAddress validates one server address and adds the default port.
func checkAddress(s string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("simba/zookeeper: invalid server address %q: %s", s, why)
	}
	switch {
	case s == "":
		return bad("empty")
	case strings.ContainsAny(s, ", \t\n"):
		return bad("give one address per element")
	case strings.Contains(s, "/"):
		return bad("a chroot suffix is not supported; use WithRoot")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if !strings.Contains(err.Error(), "missing port") {
			return bad(err.Error())
		}
		host, port = strings.Trim(s, "[]"), strconv.Itoa(zk.DefaultPort)
	}
	if host == "" {
		return bad("empty host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return bad(fmt.Sprintf("port %q is not a number from 1 to 65535", port))
	}
	return net.JoinHostPort(host, port), nil
}

// Root returns the znode under which the backend keeps its data.
func (b *Backend) Root() string { return b.cfg.root }

// ACL returns the ACL the backend gives every znode it creates: the one
// [WithACL] set, or the default that [WithAuth] decides.
func (b *Backend) ACL() []zk.ACL { return slices.Clone(b.cfg.acl) }

// Open opens a new ZooKeeper session on a connection of its own, asking for
// o.TTL as its session timeout; Session.TTL reports the timeout the server
// granted (ZooKeeper clamps it between the server's minSessionTimeout and
// maxSessionTimeout), less [WithLeaderLag].
//
// Open returns once the server has granted the session. It gives up with an
// error when ctx ends, and also when a connection to each server has been
// tried and failed, so that a bad address or a server that is down is
// reported at once rather than retried: the caller retries. A session the
// server granted too late is closed again. After [Backend.Close] it returns
// an error wrapping [backend.ErrClosed].
func (b *Backend) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	if o.TTL <= 0 {
		return nil, fmt.Errorf("simba/zookeeper: open: invalid TTL %v: must be positive", o.TTL)
	}
	ms := (o.TTL + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxInt32 {
		return nil, fmt.Errorf("simba/zookeeper: open: TTL %v is too long", o.TTL)
	}
	b.warnNoLag()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("simba/zookeeper: open: %w", err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, fmt.Errorf("simba/zookeeper: open: %w", backend.ErrClosed)
	}
	s, err := newSession(b, int32(ms))
	if err != nil {
		b.mu.Unlock()
		return nil, fmt.Errorf("simba/zookeeper: open: %w", err)
	}
	b.sessions[s] = struct{}{}
	b.mu.Unlock()

	conn, events, err := zk.Connect(b.servers, time.Duration(ms)*time.Millisecond,
		zk.WithHostProvider(s.link.hosts),
		zk.WithDialer(s.link.dial),
		zk.WithEventCallback(s.onEvent),
		zk.WithLogger(b.zkLog),
		zk.WithLogInfo(false),
	)
	s.setConn(conn, events)
	if err != nil { // only for arguments New has checked
		s.end(err, false)
		return nil, fmt.Errorf("simba/zookeeper: open: %w", err)
	}
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// forget removes s from the open sessions.
func (b *Backend) forget(s *session) {
	b.mu.Lock()
	delete(b.sessions, s)
	b.mu.Unlock()
}

// Close abandons the sessions still open, as package backend asks: it drops
// their connections without ending them on the server, where they expire
// by themselves; their Done channels close and their calls return errors
// wrapping [backend.ErrSessionDone]. Later calls to Open return an error
// wrapping [backend.ErrClosed]. Close is idempotent.
//
// Close waits until every connection the backend made is shut down and
// every goroutine it started has exited, which takes about a second at
// most; but not longer than the largest session timeout of the sessions
// it abandons plus shutdownSlack (5 s): by then the server has expired
// them, whatever the client is still doing. A shutdown that takes longer
// (a connection whose Close does not end its reads, for example) is left
// running, and Close returns an error saying which sessions it left;
// otherwise it returns nil.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	open := make([]*session, 0, len(b.sessions))
	for s := range b.sessions {
		open = append(open, s)
	}
	b.mu.Unlock()
	var bound time.Duration
	for _, s := range open {
		s.end(errBackendClosed, false)
		bound = max(bound, s.shutdownBound())
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	var left []string
	for _, s := range open {
		select {
		case <-s.shutdownDone:
			continue
		case <-t.C:
		}
		for _, s := range open {
			select {
			case <-s.shutdownDone:
			default:
				left = append(left, fmt.Sprintf("0x%x", s.link.sessionID()))
			}
		}
		break
	}
	if len(left) > 0 {
		return fmt.Errorf("simba/zookeeper: close: the connections of sessions %s did not shut down within %v; their goroutines are left running (the server expires the sessions by itself)", strings.Join(left, ", "), bound)
	}
	return nil
}

// errBackendClosed is the cause of sessions ended by Backend.Close.
var errBackendClosed = fmt.Errorf("%w: %w", backend.ErrSessionDone, backend.ErrClosed)

// zkLogger logs the go-zookeeper client's lines at debug level.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	if z.l.Enabled(context.Background(), slog.LevelDebug) {
		z.l.Debug("go-zookeeper: " + fmt.Sprintf(format, args...))
	}
}
