package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/go-zookeeper/zk"
)

// DefaultRoot is the znode under which a [Backend] keeps its data when
// [WithRoot] is not given.
const DefaultRoot = "/simba"

// Option configures a [Backend]. Options refuse bad values: [New] returns
// their error instead of correcting them.
type Option func(*config) error

// DialFunc opens one TCP (or TLS) connection to a ZooKeeper server. It
// should honour ctx, whose deadline is the connection attempt's timeout
// (see [WithConnectTimeout]): the backend gives up on a dial at that
// deadline either way, and closes the connection if one comes later, but
// a dial that ignores ctx keeps its goroutine until it returns.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

type credential struct {
	scheme string
	auth   []byte
}

type config struct {
	root    string
	acl     []zk.ACL // nil until WithACL, or until New picks the default (see defaultACL)
	auth    []credential
	dial    DialFunc
	logger  *slog.Logger
	lag     time.Duration
	max     int           // requests in flight per session
	connect time.Duration // see WithConnectTimeout
}

// defaults returns the configuration used when no option is given.
func defaults() config {
	var d net.Dialer
	return config{
		root:    DefaultRoot,
		dial:    d.DialContext,
		logger:  slog.Default(),
		max:     DefaultMaxRequests,
		connect: DefaultConnectTimeout,
	}
}

// defaultACL sets the ACL when WithACL was not given: the creator's alone
// when the sessions authenticate, anyone's otherwise.
func (c *config) defaultACL() {
	switch {
	case c.acl != nil:
	case len(c.auth) > 0:
		c.acl = zk.AuthACL(zk.PermAll)
	default:
		c.acl = zk.WorldACL(zk.PermAll)
	}
}

// DefaultConnectTimeout is the connect timeout when [WithConnectTimeout]
// is not given.
const DefaultConnectTimeout = 10 * time.Second

// WithConnectTimeout bounds each attempt to connect to a server: the dial,
// the TLS handshake a TLS dialer makes in it, and the wait for the server's
// answer to the session request (default [DefaultConnectTimeout], 10 s).
//
// Until the server has granted a session, an attempt has the whole of d:
// a TLS handshake with a loaded server (the JVM's TLS is slow to start) can
// take longer than the second go-zookeeper allows, and Open gives up once
// an attempt on every server has failed. Open's ctx bounds the whole.
//
// Once the session lives, an attempt to reconnect has, as the Java
// client's connect timeout, the granted session timeout divided by the
// number of servers, so that each can be tried before the session
// expires; at least a second (go-zookeeper's own), and at most d. d must
// be positive.
func WithConnectTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("simba/zookeeper: WithConnectTimeout: timeout must be positive, got %v", d)
		}
		c.connect = d
		return nil
	}
}

// DefaultMaxRequests is the bound on requests in flight per session when
// [WithMaxRequests] is not given.
const DefaultMaxRequests = 64

// WithMaxRequests bounds the calls each session has in flight at once
// (default [DefaultMaxRequests], 64): reads, writes, creates and the
// reads that go with them; more wait their turn, each within its caller's
// ctx. Keep-alives are not counted, nor the requests whose number does not
// grow with the leases held (group membership, the list of held leases):
// a group's view decides which of thousands of acquisitions to start or
// stop, and must not wait behind them. ZooKeeper answers a session's requests
// in order, so a keep-alive sent behind thousands of requests (thousands of
// elections starting at once, each reading and writing its records) is
// answered only after all of them, which can take longer than the session's
// deadline; the bound keeps the queue in front of it short. n must be
// positive.
func WithMaxRequests(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("simba/zookeeper: max requests must be positive, got %d", n)
		}
		c.max = n
		return nil
	}
}

// WithRoot sets the znode under which the backend keeps its leases and
// groups (default [DefaultRoot], "/simba"). It must be an absolute path
// other than "/", without a trailing slash. Missing znodes on the way are
// created as container znodes, which the server deletes once they are
// empty. Backends with different roots never see each other's leases.
func WithRoot(path string) Option {
	return func(c *config) error {
		if err := checkRoot(path); err != nil {
			return err
		}
		c.root = path
		return nil
	}
}

// WithACL sets the ACL of every znode the backend creates: the root and
// its missing parents, the container directories, lease and member znodes,
// and records.
//
// Without WithACL, the default depends on [WithAuth]: with credentials,
// zk.AuthACL(zk.PermAll), ZooKeeper's CREATOR_ALL_ACL: every permission,
// reads included, to the identities the creating session authenticated as
// (for "digest", user:password), and none to anyone else; without
// credentials, zk.WorldACL(zk.PermAll), every permission to anyone. Given,
// WithACL wins in both cases: WithACL(zk.WorldACL(zk.PermAll)...) keeps
// the znodes of a client with credentials open as before, and
//
//	zookeeper.WithACL(append(zk.AuthACL(zk.PermAll), zk.WorldACL(zk.PermRead)...)...)
//
// lets anyone read them (the CLI or a monitor without credentials) while
// only the creator's identities write, create and delete. An ACL naming
// other identities (zk.DigestACL) lets several credentials share one root.
//
// ZooKeeper checks the delete and create permissions of a znode's parent,
// and each znode's ACL is set once, when it is created: a directory
// created by a client with another ACL, or before credentials were
// configured, keeps its ACL (see "Access control" in the package
// documentation).
func WithACL(acl ...zk.ACL) Option {
	return func(c *config) error {
		if len(acl) == 0 {
			return errors.New("simba/zookeeper: WithACL: empty ACL")
		}
		for _, a := range acl {
			if a.Perms == 0 || a.Perms&^zk.PermAll != 0 {
				return fmt.Errorf("simba/zookeeper: WithACL: invalid permissions %#x for %s:%s", a.Perms, a.Scheme, a.ID)
			}
			if a.Scheme == "" {
				return errors.New("simba/zookeeper: WithACL: empty scheme")
			}
		}
		c.acl = append([]zk.ACL(nil), acl...)
		return nil
	}
}

// WithAuth adds credentials (for example scheme "digest", auth
// []byte("user:password")) that every session presents to the server when
// it opens, and again after each reconnection. It may be given several
// times.
//
// With credentials and no [WithACL], the znodes the backend creates are
// its creator's alone (zk.AuthACL(zk.PermAll)): a client that has not
// authenticated as one of the same identities can neither read, write nor
// delete them. Every client and tool of one root must then present the same
// credentials, or the ACL must name each of them (see WithACL).
func WithAuth(scheme string, auth []byte) Option {
	return func(c *config) error {
		if scheme == "" {
			return errors.New("simba/zookeeper: WithAuth: empty scheme")
		}
		c.auth = append(c.auth, credential{scheme, append([]byte(nil), auth...)})
		return nil
	}
}

// WithDialer sets the function that opens connections to the servers
// (default: a [net.Dialer]), for example a [crypto/tls.Dialer]'s
// DialContext. The backend wraps the connections it returns to learn the
// negotiated session timeout (see the package documentation).
func WithDialer(dial DialFunc) Option {
	return func(c *config) error {
		if dial == nil {
			return errors.New("simba/zookeeper: WithDialer: nil dialer")
		}
		c.dial = dial
		return nil
	}
}

// WithLogger sets the logger for the backend and for the go-zookeeper
// client under it, whose lines are logged at debug level (default:
// [slog.Default] when New is called; slog.New(slog.DiscardHandler) logs
// nothing).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("simba/zookeeper: WithLogger: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithLeaderLag sets how much later than the server a client talks to the
// ensemble's leader may learn that the session was renewed (default 0).
// Every TTL the backend reports is shortened by it.
//
// A standalone server, or the leader itself, expires a session one session
// timeout after the last packet it received from the client, so 0 is exact
// there. A follower records renewals locally and reports them to the leader,
// which is the server that expires sessions, with its reply to the leader's
// ping, every half tick; a follower cut off from the leader goes on
// answering for up to syncLimit × tickTime before it gives up, and the
// renewal it answered just before the cut may never reach the leader. So
// the leader may count from a renewal up to syncLimit × tickTime + half a
// tick + one renewal interval (a third of the session timeout) earlier than
// the client. Against an ensemble, set the lag to syncLimit × tickTime +
// tickTime + a third of the session timeout of its configuration to stay
// safe in that case (TestEnsemblePartitionedFollower: without the third,
// one run in three overlapped, by 131 ms). The granted session timeout must
// exceed the lag.
func WithLeaderLag(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("simba/zookeeper: WithLeaderLag: negative lag %v", d)
		}
		c.lag = d
		return nil
	}
}
