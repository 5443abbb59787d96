package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/lost"
	"github.com/simba-go/simba/backend/kit/option"
)

var (
	_ backend.Backend         = (*Backend)(nil)
	_ backend.Backend         = (*Node)(nil)
	_ backend.Session         = (*session)(nil)
	_ backend.LeaseLister     = (*session)(nil)
	_ backend.CandidateLister = (*session)(nil)
	_ backend.Lease           = (*lease)(nil)
	_ backend.LostNotifier    = (*lease)(nil)
)

// defaultNode is the name of the node behind [Backend.Open].
const defaultNode = "default"

// Reasons a holding ends, as recorded in [Grant.Reason].
const (
	reasonReleased   = "released"   // Lease.Release
	reasonExpired    = "expired"    // the session's TTL ran out
	reasonEvicted    = "evicted"    // Node.Expire or Backend.ExpireSession: the server ended it early
	reasonClosed     = "closed"     // Session.Close
	reasonReacquired = "reacquired" // the same session acquired the name again
	reasonCancelled  = "cancelled"  // Acquire's ctx ended before its reply or its turn arrived
)

// Backend is the in-memory server: the shared state of every session, lease
// and group. It implements [backend.Backend] for an implicit node named
// "default"; use [Backend.Node] for more nodes.
//
// A Backend is safe for concurrent use by multiple goroutines.
type Backend struct {
	cfg config

	mu          sync.Mutex
	closed      bool
	nodes       map[string]*Node
	def         *Node
	sessions    map[string]*session                  // live sessions by ID
	leases      map[string]*lease                    // current holding by lease name: the head of its queue
	queues      map[string][]*lease                  // candidacies by lease name, oldest (the holder) first
	token       uint64                               // last token given to a candidacy
	history     []Grant                              // every holding, in grant order
	groups      map[string]map[string]backend.Member // group -> session ID -> member
	watchers    map[string][]*watcher                // group -> watchers, in registration order
	records     map[string]*record                   // key -> record
	recVersion  uint64                               // the last record version given
	recWatchers []*watcher                           // WatchRecords watchers, in registration order
	stats       Stats
}

// Option configures a [Backend] made by [NewWithOptions]. Options refuse
// bad values: NewWithOptions returns their error instead of correcting
// them.
type Option func(*config) error

type config struct {
	minTTL, maxTTL time.Duration
}

// WithTTLBounds makes the server grant every session the requested TTL
// clamped to [min, max]. Zero means no bound on that side; by default the
// requested TTL is granted unchanged. It lets tests have a granted TTL that
// differs from the requested one, as etcd (which raises small TTLs to its
// minimum) and ZooKeeper (which negotiates the session timeout) do.
//
// A negative bound, or min above max (both given), is an error.
func WithTTLBounds(min, max time.Duration) Option {
	return func(c *config) error {
		switch {
		case min < 0 || max < 0:
			return fmt.Errorf("simba/memory: WithTTLBounds: negative bound in [%v, %v]", min, max)
		case min > 0 && max > 0 && min > max:
			return fmt.Errorf("simba/memory: WithTTLBounds: min %v above max %v", min, max)
		}
		c.minTTL, c.maxTTL = min, max
		return nil
	}
}

// grant returns the TTL granted for the requested one.
func (c config) grant(requested time.Duration) time.Duration {
	if c.minTTL > 0 && requested < c.minTTL {
		requested = c.minTTL
	}
	if c.maxTTL > 0 && requested > c.maxTTL {
		requested = c.maxTTL
	}
	return requested
}

// New returns a new, empty server that grants every session the TTL it
// requests. [NewWithOptions] configures it.
func New() *Backend { return newBackend(config{}) }

// NewWithOptions returns a new, empty server configured by opts, or the
// error of the first option that refuses its value.
func NewWithOptions(opts ...Option) (*Backend, error) {
	var cfg config
	if err := option.Apply("simba/memory", &cfg, opts); err != nil {
		return nil, err
	}
	return newBackend(cfg), nil
}

// newBackend returns a new, empty server with cfg.
func newBackend(cfg config) *Backend {
	b := &Backend{
		cfg:      cfg,
		nodes:    make(map[string]*Node),
		sessions: make(map[string]*session),
		leases:   make(map[string]*lease),
		queues:   make(map[string][]*lease),
		groups:   make(map[string]map[string]backend.Member),
		watchers: make(map[string][]*watcher),
		records:  make(map[string]*record),
	}
	b.def = b.Node(defaultNode)
	return b
}

// Node returns the node called name: one process's connection to this
// server. The same name always returns the same *Node, faults included; a
// crashed process that restarts is a Node with a new name. The empty name is
// the default node, the one behind [Backend.Open].
func (b *Backend) Node(name string) *Node {
	if name == "" {
		name = defaultNode
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n, ok := b.nodes[name]; ok {
		return n
	}
	n := &Node{b: b, name: name, gone: make(chan struct{})}
	if b.closed {
		n.closed = true
		close(n.gone)
	}
	b.nodes[name] = n
	return n
}

// Open opens a session through the default node. See [Node.Open].
func (b *Backend) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	return b.def.Open(ctx, o)
}

// Close shuts the server down: timers stop, every waiting call returns, and
// every later call through any node fails (Open with an error wrapping
// [backend.ErrClosed], session calls with one wrapping
// [backend.ErrSessionDone]). Done, Lost and member-watch channels of nodes
// that have not crashed are closed. The inspection methods go on reporting
// the state at Close. Close is idempotent and always returns nil.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	for _, s := range b.sessions {
		s.timer.Stop()
	}
	for _, name := range slices.Sorted(maps.Keys(b.nodes)) {
		b.nodes[name].shutLocked()
	}
	return nil
}

// ExpireSession makes the server expire the session with the given ID now,
// as if its TTL had run out. It does nothing if there is no such live
// session.
func (b *Backend) ExpireSession(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.sessions[id]; ok && !b.closed {
		b.endSession(s, reasonEvicted)
	}
}

// openSession creates a live session of node n on the server.
func (b *Backend) openSession(n *Node, requested time.Duration) *session {
	n.seq++
	ttl := b.cfg.grant(requested)
	s := &session{
		b:         b,
		n:         n,
		id:        fmt.Sprintf("%s-%d", n.name, n.seq),
		ttl:       ttl,
		done:      make(chan struct{}),
		live:      true,
		expiresAt: time.Now().Add(ttl),
		ended:     make(chan struct{}),
		leases:    make(map[string]*lease),
		cands:     make(map[*lease]struct{}),
		groups:    make(map[string]struct{}),
	}
	s.timer = time.AfterFunc(ttl, func() { b.expireDue(s) })
	b.sessions[s.id] = s
	return s
}

// renew applies a KeepAlive of s at the server.
func (b *Backend) renew(s *session) {
	s.expiresAt = time.Now().Add(s.ttl)
	s.timer.Reset(s.ttl)
}

// expireDue runs on the expiry timer of s.
func (b *Backend) expireDue(s *session) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || !s.live {
		return
	}
	if d := time.Until(s.expiresAt); d > 0 { // renewed while the timer fired
		s.timer.Reset(d)
		return
	}
	b.endSession(s, reasonExpired)
}

// endSession ends s on the server, for the given reason: its leases and
// memberships end, its waiters wake, and its node is told. b.mu is held.
func (b *Backend) endSession(s *session, reason string) {
	if !s.live {
		return
	}
	s.live = false
	s.timer.Stop()
	delete(b.sessions, s.id)
	close(s.ended)
	s.n.notify(s.closeDone) // before the leases' Lost: a holder learns why
	// Waiting candidacies first, so that none of them is served on the way.
	for _, l := range s.waitingCandidacies() {
		b.withdraw(l, reason)
	}
	for _, name := range slices.Sorted(maps.Keys(s.leases)) {
		b.endHolding(s.leases[name], reason, true)
	}
	for _, group := range slices.Sorted(maps.Keys(s.groups)) {
		b.removeMember(group, s)
	}
	for _, w := range slices.Clone(s.watchers) {
		b.unwatch(w)
		s.n.notify(w.close)
	}
}

// register queues a new candidacy of s for name, with the next token, and
// serves it at once if the queue was empty. b.mu is held.
func (b *Backend) register(s *session, name string) *lease {
	b.token++
	l := &lease{s: s, name: name, token: b.token, sig: lost.New(), told: make(chan struct{}), grant: -1}
	b.queues[name] = append(b.queues[name], l)
	s.cands[l] = struct{}{}
	if len(b.queues[name]) == 1 {
		b.serve(l)
	}
	return l
}

// serve makes l, the head of its queue, the holder of its name: its grant
// starts now, and its session's node is told (its waiting Acquire
// returns). b.mu is held.
func (b *Backend) serve(l *lease) {
	s := l.s
	l.grant = len(b.history)
	b.leases[l.name] = l
	s.leases[l.name] = l
	b.history = append(b.history, Grant{
		Name:    l.name,
		Token:   l.token,
		Session: s.id,
		Node:    s.n.name,
		Start:   time.Now(),
	})
	s.n.notify(l.closeTold)
}

// dequeue removes the candidacy l from its queue and, if it was the head,
// serves the next one, in the same step. b.mu is held.
func (b *Backend) dequeue(l *lease) {
	q := b.queues[l.name]
	i := slices.Index(q, l)
	if i < 0 {
		return
	}
	q = slices.Delete(q, i, i+1)
	delete(l.s.cands, l)
	if len(q) == 0 {
		delete(b.queues, l.name)
		return
	}
	b.queues[l.name] = q
	if i == 0 {
		b.serve(q[0])
	}
}

// withdraw removes the candidacy l, for the given reason, whether it holds
// or waits; its Lost is not closed (its Acquire has returned an error, or
// its session is over). It does nothing if l is gone already. b.mu is held.
func (b *Backend) withdraw(l *lease, reason string) {
	if b.leases[l.name] == l {
		b.endHolding(l, reason, false)
		return
	}
	b.dequeue(l)
}

// endHolding ends the current holding l for the given reason and serves
// the next candidacy of its name; lost says whether l's Lost channel is to
// be closed. b.mu is held.
func (b *Backend) endHolding(l *lease, reason string, lost bool) {
	g := &b.history[l.grant]
	g.End, g.Ended, g.Reason = time.Now(), true, reason
	delete(b.leases, l.name)
	delete(l.s.leases, l.name)
	if lost {
		l.s.n.notify(l.closeLost)
	}
	b.dequeue(l)
}

// candidates returns the IDs of the sessions of the candidacies for name,
// oldest first. b.mu is held.
func (b *Backend) candidates(name string) []string {
	ids := []string{}
	for _, l := range b.queues[name] {
		ids = append(ids, l.s.id)
	}
	return ids
}

// checkName is [backend.CheckName] with the package prefix and what the
// name is for ("lease", "group").
func checkName(what, name string) error {
	if err := backend.CheckName(name); err != nil {
		return fmt.Errorf("simba/memory: %s %w", what, err)
	}
	return nil
}
