package kubernetes

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	k8s "k8s.io/client-go/kubernetes"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/option"
)

var _ backend.Backend = (*Backend)(nil)

// Role is the RBAC Role the backend needs in its namespace (bind it to the
// service account of the pods that run simba): leases only.
const Role = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: simba
rules:
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "delete"]
`

// Labels and annotations of the objects (see the package documentation).
const (
	labelManaged  = "app.kubernetes.io/managed-by"
	managedBy     = "simba"
	labelKind     = "simba.io/kind"
	kindSession   = "session"
	kindLease     = "lease"
	kindRecord    = "record"
	annTTL        = "simba.io/ttl-ms"
	annName       = "simba.io/name"
	annLast       = "simba.io/last"
	annQueue      = "simba.io/queue"
	annKey        = "simba.io/key"
	annValue      = "simba.io/value"
	annToken      = "simba.io/token"
	annVersion    = "simba.io/version"
	groupLabelPfx = "g.simba.io/"
	memberAnnPfx  = "m.simba.io/"
)

// maxToken bounds the tokens this backend grants (see the package
// documentation).
const maxToken = 1 << 62

// Backend is the Kubernetes backend. It is safe for concurrent use by
// multiple goroutines.
type Backend struct {
	client k8s.Interface
	leases coordclient.LeaseInterface
	ns     string
	log    *slog.Logger

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	hub *hub
	obs *observer

	// beforeFencedWrite, when not nil, runs between the read of a lease
	// name object and a record write to it (set by the tests, through
	// export_test.go, to open the window in which a deposed holder's
	// write used to land).
	beforeFencedWrite func()

	closeOnce sync.Once
	// conns are the connections of a backend made by New, which Close
	// closes (nil for NewFromClient: the caller's client is the caller's).
	conns *conns
}

// Option configures a Backend. Options refuse bad values: [New] and
// [NewFromClient] return their error instead of correcting them.
type Option func(*config) error

// config is what the options set.
type config struct {
	ns  string
	log *slog.Logger
}

// WithNamespace sets the namespace of the backend's Lease objects (default
// "default"): a valid namespace name (a DNS-1123 label). Backends on the
// same namespace share leases, groups and records.
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("simba/kubernetes: namespace %q is not a valid namespace name: %s", ns, errs[0])
		}
		c.ns = ns
		return nil
	}
}

// WithLogger sets the logger of the backend's own events (its watch lost
// and regained, a withdrawal retried): default [slog.Default] when New is
// called. Pass slog.New(slog.DiscardHandler) to log nothing; nil is
// refused.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("simba/kubernetes: WithLogger: nil logger")
		}
		c.log = l
		return nil
	}
}

// defaultQPS is the client-side rate limit New sets when cfg sets none.
const defaultQPS = 50

// New returns a backend on a clientset made from cfg. It does not contact
// the server. When cfg sets no rate limit (QPS 0), New allows 50 requests a
// second with bursts of 100 rather than client-go's 5; a client given to
// [NewFromClient] keeps its own.
func New(cfg *rest.Config, opts ...Option) (*Backend, error) {
	if cfg == nil {
		return nil, errors.New("simba/kubernetes: New: nil *rest.Config (use rest.InClusterConfig or clientcmd to make one)")
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		// client-go's default (5 requests a second, bursts of 10) would
		// starve renewals behind a few waiters' reads.
		cfg.QPS, cfg.Burst = defaultQPS, 2*defaultQPS
	}
	// The backend's connections are its own (a dialer of its own also
	// keeps client-go from sharing the transport), so that Close can close
	// them all: idle ones, and those a request ending with Close still
	// used (a watch's stream, a dial under way).
	conns := &conns{dial: cfg.Dial, open: map[*conn]struct{}{}}
	cfg.Dial = conns.dialContext
	c, err := k8s.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("simba/kubernetes: making the client: %w", err)
	}
	b, err := NewFromClient(c, opts...)
	if err != nil {
		return nil, err
	}
	b.conns = conns
	return b, nil
}

// conns are the connections of a backend made by New.
type conns struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error) // the caller's, or nil

	mu     sync.Mutex
	open   map[*conn]struct{}
	closed bool
}

func (cs *conns) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := cs.dial
	if dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	nc, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		nc.Close()
		return nil, fmt.Errorf("simba/kubernetes: dialing %s: %w", addr, backend.ErrClosed)
	}
	c := &conn{Conn: nc, cs: cs}
	cs.open[c] = struct{}{}
	return c, nil
}

// closeAll closes every connection, and refuses new ones.
func (cs *conns) closeAll() {
	cs.mu.Lock()
	open := cs.open
	cs.open, cs.closed = nil, true
	cs.mu.Unlock()
	for c := range open {
		c.Conn.Close()
	}
}

// conn is a connection of conns, which forgets it when it is closed.
type conn struct {
	net.Conn
	cs   *conns
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.cs.mu.Lock()
		delete(c.cs.open, c)
		c.cs.mu.Unlock()
	})
	return c.Conn.Close()
}

// NewFromClient returns a backend on the caller's client. It does not
// contact the server.
func NewFromClient(c k8s.Interface, opts ...Option) (*Backend, error) {
	if c == nil {
		return nil, errors.New("simba/kubernetes: NewFromClient: nil client")
	}
	cfg := config{ns: "default", log: slog.Default()}
	if err := option.Apply("simba/kubernetes", &cfg, opts); err != nil {
		return nil, err
	}
	b := &Backend{client: c, ns: cfg.ns, log: cfg.log}
	b.leases = c.CoordinationV1().Leases(b.ns)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.obs = newObserver()
	b.hub = newHub(b)
	return b, nil
}

// Namespace returns the backend's namespace.
func (b *Backend) Namespace() string { return b.ns }

// Client returns the backend's client (for tests and tools).
func (b *Backend) Client() k8s.Interface { return b.client }

// Close stops the backend's watch and goroutines and, for a backend made
// by [New], closes its connections. Sessions still open are abandoned:
// their objects stay until a contender takes over from them (see the
// package documentation) or someone deletes them. Close is idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.cancel()
		b.wg.Wait()
		if b.conns != nil {
			// Else they, and their goroutines, outlive the backend for
			// as long as the server keeps them open.
			b.conns.closeAll()
		}
	})
	return nil
}

func (b *Backend) closed() bool { return b.ctx.Err() != nil }

// apiErr wraps an error of the API server for what, naming refusals
// plainly.
func (b *Backend) apiErr(what string, err error) error {
	if b.closed() && errors.Is(err, context.Canceled) {
		return fmt.Errorf("simba/kubernetes: %s: %w", what, backend.ErrClosed)
	}
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("simba/kubernetes: %s: the API server refused access to leases in namespace %q (see kubernetes.Role for the permissions needed): %w", what, b.ns, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("simba/kubernetes: %s: the API server did not accept the credentials: %w", what, err)
	case apierrors.IsNotFound(err) && isNamespaceMissing(err):
		return fmt.Errorf("simba/kubernetes: %s: namespace %q does not exist: %w", what, b.ns, err)
	}
	return fmt.Errorf("simba/kubernetes: %s: %w", what, err)
}

func isNamespaceMissing(err error) bool {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		d := se.Status().Details
		return d != nil && d.Kind == "namespaces"
	}
	return false
}

// hashName is the object-name part for a name or key.
func hashName(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:20])
}

func sessionObject(id string) string { return "simba-s-" + id }
func nameObject(name string) string  { return "simba-l-" + hashName(name) }
func recordObject(key string) string { return "simba-r-" + hashName(key) }
func groupLabel(group string) string { return groupLabelPfx + hashName(group) }
func memberAnn(group string) string  { return memberAnnPfx + hashName(group) }

func selector(kind string) string {
	return labelManaged + "=" + managedBy + "," + labelKind + "=" + kind
}

func newLabels(kind string) map[string]string {
	return map[string]string{labelManaged: managedBy, labelKind: kind}
}

// Open creates a session object whose TTL is counted, by this client, from
// the instant Open was called.
func (b *Backend) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	if b.closed() {
		return nil, backend.ErrClosed
	}
	ttl := o.TTL.Round(time.Millisecond)
	if o.TTL <= 0 {
		return nil, fmt.Errorf("simba/kubernetes: Open: TTL %v: want a positive TTL", o.TTL)
	}
	if ttl < time.Millisecond {
		ttl = time.Millisecond
	}
	if ttl > 24*time.Hour {
		return nil, fmt.Errorf("simba/kubernetes: Open: TTL %v: want at most 24h", o.TTL)
	}
	b.hub.start()
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	start := time.Now()
	now := metav1.NewMicroTime(start)
	obj := &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: sessionObject(id), Labels: newLabels(kindSession)},
		Spec:       coordv1.LeaseSpec{HolderIdentity: &id, AcquireTime: &now, RenewTime: &now},
	}
	setTTL(obj, ttl)
	got, err := b.leases.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		if ctx.Err() != nil {
			// The create may have happened: the object is abandoned, and
			// contenders take over from it after its TTL.
			return nil, fmt.Errorf("simba/kubernetes: opening a session: no answer from the API server before the context ended (%v): %w", err, context.Cause(ctx))
		}
		return nil, b.apiErr("opening a session", err)
	}
	return newSession(b, id, ttl, start, got), nil
}

// takeoverAfter is how long a contender must see a session object unchanged
// before it may end the session: its TTL plus the margin for clock rates.
func takeoverAfter(ttl time.Duration) time.Duration { return ttl + ttl/10 }

// maxTTL bounds the TTL of a session: Open refuses a longer one.
const maxTTL = 24 * time.Hour

// sessionTTL reads the TTL of a session object, for a contender's
// observation. Open writes it twice, and renewals rewrite it unchanged:
// the annotation simba.io/ttl-ms, in milliseconds, and
// spec.leaseDurationSeconds, the same rounded up to seconds. When either
// is missing or unreadable, or they disagree, the object was edited by
// hand (or written by another program), and neither value can be trusted
// not to be shorter than the TTL the session's own client counts with: the
// contender then counts with maxTTL, the longest TTL a session of this
// backend can have, so that it never ends a live session early, and
// problem says what is wrong. A live session repairs its object at its
// next renewal (see KeepAlive); a dead one with a spoilt object keeps its
// leases for maxTTL plus margin, unless someone deletes its object.
func sessionTTL(l *coordv1.Lease) (ttl time.Duration, problem string) {
	raw, ok := l.Annotations[annTTL]
	if !ok {
		return maxTTL, fmt.Sprintf("annotation %s is missing", annTTL)
	}
	ms, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || ms <= 0 || ms > maxTTL.Milliseconds() {
		return maxTTL, fmt.Sprintf("annotation %s is %q, want a TTL in milliseconds (1 to %d)", annTTL, trunc(raw), maxTTL.Milliseconds())
	}
	secs := l.Spec.LeaseDurationSeconds
	if want := int32((ms + 999) / 1000); secs == nil || *secs != want {
		got := "missing"
		if secs != nil {
			got = strconv.Itoa(int(*secs))
		}
		return maxTTL, fmt.Sprintf("spec.leaseDurationSeconds is %s, want %d for annotation %s %q", got, want, annTTL, raw)
	}
	return time.Duration(ms) * time.Millisecond, ""
}

// setTTL writes ttl into a session object (see sessionTTL).
func setTTL(l *coordv1.Lease, ttl time.Duration) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	ms := ttl.Milliseconds()
	l.Annotations[annTTL] = strconv.FormatInt(ms, 10)
	secs := int32((ms + 999) / 1000)
	l.Spec.LeaseDurationSeconds = &secs
}
