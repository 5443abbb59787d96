package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/limit"
	"github.com/simba-go/simba/backend/kit/option"
)

var _ backend.Backend = (*Backend)(nil)

// DefaultPrefix is the key prefix used when [WithPrefix] is not given.
const DefaultPrefix = "/simba/"

// Backend is an etcd cluster seen through one client: it implements
// [backend.Backend], opening one etcd lease per session. Create it with
// [New] or [NewFromClient].
//
// A Backend is safe for concurrent use by multiple goroutines.
type Backend struct {
	cli    *clientv3.Client
	kv     *limitedKV // cli's KV, with a bound on the requests in flight
	owned  bool       // cli was created by New and is closed by Close
	prefix string
	log    *slog.Logger

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	wg sync.WaitGroup // every goroutine of every session

	mu       sync.Mutex
	closed   bool
	sessions map[*session]struct{} // live sessions

	hist history // the highest revision and the cluster ID seen
}

// Option configures a [Backend]. Options refuse bad values: [New] and
// [NewFromClient] return an error instead of silently correcting them.
type Option func(*config) error

type config struct {
	prefix      string
	logger      *slog.Logger
	maxRequests int
	lim         *limit.Limiter // of maxRequests slots, made by configure
	// Only for New: the client's TLS and credentials.
	tls            *tls.Config
	user, password string
	auth           bool
}

// DefaultMaxRequests is the bound on requests in flight when
// [WithMaxRequests] is not given.
const DefaultMaxRequests = 64

func defaultConfig() config {
	return config{prefix: DefaultPrefix, logger: slog.Default(), maxRequests: DefaultMaxRequests}
}

// WithMaxRequests bounds the key-value requests (reads, writes,
// transactions) the backend's sessions have in flight at once, all
// together (default [DefaultMaxRequests], 64); more wait their turn, each
// within its caller's ctx. Keep-alives, watches and the requests whose
// number does not grow with the leases held (group membership, the list of
// held leases) are not counted. The bound keeps a burst (thousands of
// elections starting at once) from queueing in front of the sessions'
// keep-alives on the server: see "Goroutines and requests" in the package
// documentation. n must be positive.
func WithMaxRequests(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("simba/etcd: max requests must be positive, got %d", n)
		}
		c.maxRequests = n
		return nil
	}
}

// WithPrefix sets the prefix of every key the backend writes (default
// [DefaultPrefix], "/simba/"). Backends with different prefixes on one etcd
// cluster do not see each other's leases, sessions or groups. The prefix must
// be valid UTF-8, at most 512 bytes, and end with "/".
func WithPrefix(p string) Option {
	return func(c *config) error {
		switch {
		case p == "":
			return errors.New("simba/etcd: empty key prefix")
		case !strings.HasSuffix(p, "/"):
			return fmt.Errorf("simba/etcd: key prefix %q must end with \"/\"", p)
		case len(p) > 512:
			return fmt.Errorf("simba/etcd: key prefix of %d bytes is longer than 512", len(p))
		case !utf8.ValidString(p):
			return fmt.Errorf("simba/etcd: key prefix %q is not valid UTF-8", p)
		}
		c.prefix = p
		return nil
	}
}

// WithLogger sets the logger for what the backend cannot report through an
// error, such as a clean-up that failed after a call gave up (default:
// [slog.Default] when New is called; slog.New(slog.DiscardHandler) logs
// nothing).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("simba/etcd: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithTLS makes the client that [New] creates connect with TLS, configured
// by cfg: its RootCAs (nil: the system's), its Certificates for etcd's
// --client-cert-auth, its ServerName (empty: the endpoint's host). The
// endpoints may be "host:port" or "https://host:port". New keeps a clone
// of cfg. [NewFromClient] refuses it: configure that client yourself.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) error {
		if cfg == nil {
			return errors.New("simba/etcd: WithTLS: nil TLS configuration")
		}
		c.tls = cfg.Clone()
		return nil
	}
}

// WithAuth makes the client that [New] creates authenticate as user with
// password, as etcdctl --user does. New does not wait for the cluster to
// check them: the client authenticates on its first request, and again
// when its token has expired, so a wrong password shows as the error of a
// call (etcd's "authentication failed, invalid user ID or password",
// [rpctypes.ErrAuthFailed]), and a user without the permissions the keys
// under the prefix need as etcd's "permission denied"
// ([rpctypes.ErrPermissionDenied]). The user must not be empty. (A client
// certificate whose common name is the user, with [WithTLS], authenticates
// without a password.) [NewFromClient] refuses it: configure that client
// yourself.
//
// [rpctypes.ErrAuthFailed]: https://pkg.go.dev/go.etcd.io/etcd/api/v3/v3rpc/rpctypes#pkg-variables
// [rpctypes.ErrPermissionDenied]: https://pkg.go.dev/go.etcd.io/etcd/api/v3/v3rpc/rpctypes#pkg-variables
func WithAuth(user, password string) Option {
	return func(c *config) error {
		if user == "" {
			return errors.New("simba/etcd: WithAuth: empty user name")
		}
		c.user, c.password, c.auth = user, password, true
		return nil
	}
}

// Reconnection settings of the client that [New] creates.
const (
	reconnectBaseDelay  = 100 * time.Millisecond
	reconnectMaxDelay   = 2 * time.Second
	keepAliveTime       = 10 * time.Second // gRPC's minimum
	keepAliveTimeout    = 5 * time.Second
	minConnectTimeout   = 5 * time.Second
	reconnectMultiplier = 1.6
	reconnectJitter     = 0.2
)

// placeholderToken is the token the client of New starts with under
// WithAuth (see New). etcd knows no such token.
const placeholderToken = "simba-authenticates-on-first-request"

// New returns a backend on a client it creates for endpoints ("host:port"
// or URLs), with TLS and authentication when [WithTLS] and [WithAuth] say
// so; for anything else (interceptors, a token), configure a client
// yourself and use [NewFromClient]. The client connects in the background:
// New does not wait for the cluster, and a request made while it cannot be
// reached waits for it until its ctx ends; [Backend.Open] then says that the
// client is not connected. (simba's client opens its session in the
// background, so simba.New does not wait either.) [Backend.Close] closes the
// client.
//
// The client discards its logs, reconnects with a back-off of 100ms growing
// to at most 2s (gRPC's default grows to two minutes, longer than any lease),
// and probes idle connections every 10s, so that a connection that went
// silent is replaced within about 15s.
func New(endpoints []string, opts ...Option) (*Backend, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("simba/etcd: no endpoints")
	}
	for _, ep := range endpoints {
		if strings.TrimSpace(ep) == "" {
			return nil, fmt.Errorf("simba/etcd: empty endpoint in %q", endpoints)
		}
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	ccfg := clientv3.Config{
		Endpoints:            endpoints,
		Logger:               zap.NewNop(),
		DialKeepAliveTime:    keepAliveTime,
		DialKeepAliveTimeout: keepAliveTimeout,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: grpcbackoff.Config{
				BaseDelay:  reconnectBaseDelay,
				Multiplier: reconnectMultiplier,
				Jitter:     reconnectJitter,
				MaxDelay:   reconnectMaxDelay,
			},
			MinConnectTimeout: minConnectTimeout,
		})},
		TLS: cfg.tls,
	}
	if cfg.auth {
		// Given a user and a password, clientv3.New authenticates before
		// it returns, waiting for the cluster without a bound. Given a
		// token instead, it waits for nothing; the fields set below then
		// make the client authenticate on its first request (etcd refuses
		// the placeholder token, and the client's retry interceptor asks
		// for a token with the user and password, within that request's
		// ctx) and on every stream it opens.
		ccfg.Token = placeholderToken
	}
	cli, err := clientv3.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("simba/etcd: client for %q: %w", endpoints, err)
	}
	if cfg.auth {
		// Before any request: nothing reads them yet.
		cli.Token, cli.Username, cli.Password = "", cfg.user, cfg.password
	}
	return newBackend(cli, true, cfg), nil
}

// NewFromClient returns a backend on cli, a client configured by the caller
// (endpoints, TLS, authentication, interceptors). The backend does not own
// cli: [Backend.Close] leaves it open, and the caller closes it after the
// backend. Closing cli first ends every session of the backend.
func NewFromClient(cli *clientv3.Client, opts ...Option) (*Backend, error) {
	if cli == nil {
		return nil, errors.New("simba/etcd: nil client")
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	if cfg.tls != nil || cfg.auth {
		return nil, errors.New("simba/etcd: WithTLS and WithAuth configure the client New creates: give the client of NewFromClient its TLS and credentials in its clientv3.Config")
	}
	return newBackend(cli, false, cfg), nil
}

func configure(opts []Option) (config, error) {
	cfg := defaultConfig()
	if err := option.Apply("simba/etcd", &cfg, opts); err != nil {
		return cfg, err
	}
	lim, err := limit.New(cfg.maxRequests)
	if err != nil {
		return cfg, fmt.Errorf("simba/etcd: %w", err)
	}
	cfg.lim = lim
	return cfg, nil
}

func newBackend(cli *clientv3.Client, owned bool, cfg config) *Backend {
	ctx, cancel := context.WithCancel(context.Background())
	b := &Backend{
		cli:      cli,
		owned:    owned,
		prefix:   cfg.prefix,
		log:      cfg.logger,
		ctx:      ctx,
		cancel:   cancel,
		sessions: make(map[*session]struct{}),
	}
	b.kv = newLimitedKV(checkedKV{KV: cli.KV, b: b}, cfg.lim)
	return b
}

// Client returns the etcd client the backend uses.
func (b *Backend) Client() *clientv3.Client { return b.cli }

// Prefix returns the key prefix.
func (b *Backend) Prefix() string { return b.prefix }

// Open grants an etcd lease with the requested TTL rounded up to whole
// seconds (etcd raises it to its minimum when it is smaller), writes the
// session's key bound to it, and starts watching that key, so that the
// session learns of its expiry without renewing. Session.TTL reports the TTL
// etcd granted.
//
// Open honours ctx: when ctx ends first it returns an error wrapping
// ctx.Err(), saying whether the client was connected, and leaves at most a
// lease with no keys, which expires by itself within its TTL. After
// [Backend.Close], or once the client is closed, it returns an error wrapping
// [backend.ErrClosed]. Once the backend found the cluster restored from a
// backup or replaced, it returns an error wrapping [ErrRestored] (see "etcd
// restored from a backup" in the package documentation).
func (b *Backend) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	if o.TTL <= 0 {
		return nil, fmt.Errorf("simba/etcd: open: invalid TTL %v: must be positive", o.TTL)
	}
	if b.isClosed() {
		return nil, fmt.Errorf("simba/etcd: open: %w", backend.ErrClosed)
	}
	if b.cli.Ctx().Err() != nil {
		return nil, fmt.Errorf("simba/etcd: open: etcd client closed: %w", backend.ErrClosed)
	}
	if err := b.refusal(); err != nil {
		return nil, fmt.Errorf("simba/etcd: open: %w", err)
	}
	seconds := int64((o.TTL + time.Second - 1) / time.Second) // never round down
	cctx, cancel := bindTo(ctx, b.ctx)
	defer cancel()

	floor := b.floor()
	grant, err := b.cli.Grant(cctx, seconds)
	if err == nil && grant.Error != "" {
		err = errors.New(grant.Error)
	}
	if err != nil {
		return nil, b.openError(ctx, "grant a lease", err)
	}
	if _, err := b.observe(grant.ResponseHeader, floor, true); err != nil {
		b.revokeAbandoned(grant.ID)
		return nil, fmt.Errorf("simba/etcd: open: %w", err)
	}
	if grant.TTL <= 0 {
		return nil, fmt.Errorf("simba/etcd: open: etcd granted lease %x a TTL of %ds", grant.ID, grant.TTL)
	}
	s := newSession(b, grant.ID, time.Duration(grant.TTL)*time.Second)
	put, err := b.kv.KV.Put(cctx, s.key, "0", clientv3.WithLease(grant.ID)) // epoch 0
	if err != nil {
		s.end(errAbandoned)
		b.revokeAbandoned(grant.ID)
		if errors.Is(err, ErrRestored) {
			return nil, fmt.Errorf("simba/etcd: open: %w", err)
		}
		return nil, b.openError(ctx, "write the session key", err)
	}
	if !b.register(s) {
		s.end(errBackendClosed)
		return nil, fmt.Errorf("simba/etcd: open: %w", backend.ErrClosed)
	}
	s.spawn(func() { s.watchSelf(put.Header.Revision + 1) })
	if !s.spawn(func() { s.watchLeases(put.Header.Revision + 1) }) {
		s.lw.end()
	}
	return s, nil
}

// revokeAbandoned revokes the lease of a session that Open gave up on after
// the grant (a user without write permission is refused the session key's
// put, say), so that nothing is left of it, within revokeTimeout. A lease
// it cannot revoke expires by itself within its TTL.
func (b *Backend) revokeAbandoned(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(b.ctx, revokeTimeout)
	defer cancel()
	if _, err := b.cli.Revoke(ctx, id); err != nil && !isLeaseNotFound(err) {
		b.log.Debug("simba/etcd: could not revoke the lease of a session abandoned while opening; it expires by itself", "lease", fmt.Sprintf("%016x", int64(id)), "error", err)
	}
}

// revokeTimeout bounds revokeAbandoned.
const revokeTimeout = 2 * time.Second

// openError describes a failed step of Open.
func (b *Backend) openError(ctx context.Context, step string, err error) error {
	if b.isClosed() {
		return fmt.Errorf("simba/etcd: open: %w", backend.ErrClosed)
	}
	if b.cli.Ctx().Err() != nil {
		return fmt.Errorf("simba/etcd: open: etcd client closed: %w", backend.ErrClosed)
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	if state := b.connState(); state != connectivity.Ready {
		return fmt.Errorf("simba/etcd: open: %s: not connected to etcd at %s (connection %s): %w",
			step, strings.Join(b.cli.Endpoints(), ","), state, err)
	}
	return fmt.Errorf("simba/etcd: open: %s: %w", step, err)
}

// connState returns the state of the client's connection.
func (b *Backend) connState() connectivity.State {
	if conn := b.cli.ActiveConnection(); conn != nil {
		return conn.GetState()
	}
	return connectivity.Shutdown
}

// Close ends the backend: later calls to Open return an error wrapping
// [backend.ErrClosed]; the sessions still open are abandoned, not revoked
// (they expire on the server by their TTL), and are over for their callers:
// their Done, Lost and member-watch channels are closed and their methods
// return errors wrapping [backend.ErrSessionDone]. Close waits for every
// goroutine of the backend, then closes the client if [New] created it.
// Close is idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	sessions := make([]*session, 0, len(b.sessions))
	for s := range b.sessions {
		sessions = append(sessions, s)
	}
	b.mu.Unlock()

	b.cancel()
	for _, s := range sessions {
		s.end(errBackendClosed)
	}
	b.wg.Wait()
	if b.owned {
		if err := b.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("simba/etcd: close client: %w", err)
		}
	}
	return nil
}

func (b *Backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// register records a live session; it reports false once the backend is
// closed.
func (b *Backend) register(s *session) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.sessions[s] = struct{}{}
	return true
}

func (b *Backend) unregister(s *session) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.sessions, s)
}

// Key layout, under the prefix.
func (b *Backend) sessionKey(id string) string { return b.prefix + "session/" + id }
func (b *Backend) leaseKey(name string) string { return b.prefix + "lease/" + name }
func (b *Backend) candidacyPrefix(name string) string {
	return b.leaseKey(name) + "/"
}
func (b *Backend) candidacyKey(name, sid string) string { return b.candidacyPrefix(name) + sid }
func (b *Backend) groupPrefix(g string) string          { return b.prefix + "group/" + g + "/" }
func (b *Backend) memberKey(g, id string) string        { return b.groupPrefix(g) + id }
func (b *Backend) recordKey(key string) string          { return b.prefix + "rec/" + key }
