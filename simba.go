package simba

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/backend"
)

// Client is one node's handle on a backend: it holds one session, renewed by
// one keeper, on which every election of the client hangs. Create it with
// [New], start work with [Client.Election], and end with [Client.Shutdown]
// (bounded by a ctx) or [Client.Close].
//
// A Client is safe for concurrent use by multiple goroutines.
type Client struct {
	backend backend.Backend
	opts    options
	log     *slog.Logger
	base    time.Time // origin of every monotonic offset
	events  *eventBus
	metrics *metrics
	ops     *opsView
	// renewals are the session's recent renewals, for the health record.
	renewals renewalLog

	ctx        context.Context // ends when the closing begins
	stopClient context.CancelFunc
	stopKeeper context.CancelFunc
	keeperDone chan struct{}
	wg         sync.WaitGroup // every goroutine but the keeper and the event bus

	mu         sync.Mutex
	gen        *generation   // the live session, or nil
	genChanged chan struct{} // closed and replaced when gen changes
	tasks      map[string]*LeaderTask
	groups     map[string]*GroupTask
	running    map[*holding]struct{} // task functions not returned, by term
	closing    bool
	closed     chan struct{} // closed when the closing is complete

	closingTasks []*LeaderTask // the tasks stopped by the closing; set when it begins, guarded by mu
	closeStage   atomic.Int32  // what the closing waits for (closeHandOffs, ...)
}

// New returns a client on b and starts its session keeper. It does not wait
// for the first session: elections start contending as soon as one is open,
// and a backend that cannot be reached is retried in the background (see
// [SessionStarted] and [SessionLost] events).
//
// The client does not own b: closing the client leaves b open.
func New(b backend.Backend, opts ...Option) (*Client, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidArgument)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidArgument)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cctx, ccancel := context.WithCancel(context.Background())
	c := &Client{
		ctx:        cctx,
		stopClient: ccancel,
		backend:    b,
		opts:       o,
		log:        o.logger,
		base:       time.Now(),
		stopKeeper: cancel,
		keeperDone: make(chan struct{}),
		renewals:   newRenewalLog(),
		genChanged: make(chan struct{}),
		tasks:      make(map[string]*LeaderTask),
		groups:     make(map[string]*GroupTask),
		running:    make(map[*holding]struct{}),
		closed:     make(chan struct{}),
	}
	m, err := newMetrics(o.meterProvider, c.headroom)
	if err != nil {
		cancel()
		ccancel()
		return nil, err
	}
	c.metrics = m
	c.ops = newOpsView(c)
	c.events = newEventBus(c.log, o.handlers, m.eventsDropped)
	go c.keep(ctx)
	c.wg.Go(c.ops.watch)
	return c, nil
}

// Ready waits until the client has a live session, and returns nil then,
// or the ctx's error if it ends first, or [ErrClosed] once the client is
// closing. Elections do not need it (they wait for a session by
// themselves); it is for callers that want to start work, or report
// readiness, only once the backend is reachable.
func (c *Client) Ready(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	if _, err := c.awaitGeneration(ctx); err != nil {
		if c.ctx.Err() != nil {
			return ErrClosed
		}
		return err
	}
	return nil
}

// SessionID returns the ID of the client's live session, or "" while it has
// none.
func (c *Client) SessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == nil {
		return ""
	}
	return c.gen.sess.ID()
}

// register reserves a lease name for t on this client.
func (c *Client) register(t *LeaderTask) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return ErrClosed
	}
	if _, ok := c.tasks[t.ref.Election]; ok {
		return fmt.Errorf("%w: %q", ErrAlreadyStarted, t.ref.Election)
	}
	c.tasks[t.ref.Election] = t
	c.wg.Add(1)
	return nil
}

// registerGroup reserves a group name for t on this client.
func (c *Client) registerGroup(t *GroupTask) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return ErrClosed
	}
	if _, ok := c.groups[t.name]; ok {
		return fmt.Errorf("%w: group %q", ErrAlreadyStarted, t.name)
	}
	c.groups[t.name] = t
	c.wg.Add(1)
	return nil
}

func (c *Client) unregisterGroup(t *GroupTask) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups[t.name] == t {
		delete(c.groups, t.name)
	}
}

// memberID is this client's identity in groups on session g.
func (c *Client) memberID(g *generation) string {
	if c.opts.memberID != "" {
		return c.opts.memberID
	}
	return g.sess.ID()
}

// currentMemberID is this client's identity in groups now: the one given,
// or the live session's ID ("" without one).
func (c *Client) currentMemberID() string {
	if c.opts.memberID != "" {
		return c.opts.memberID
	}
	return c.SessionID()
}

// liveGeneration returns the current session if it is valid, or nil.
func (c *Client) liveGeneration() *generation {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != nil && c.gen.valid() {
		return c.gen
	}
	return nil
}

// grantedTTL is the TTL of the current session, or the requested one.
func (c *Client) grantedTTL() time.Duration {
	if g := c.liveGeneration(); g != nil {
		return g.ttl
	}
	return c.opts.ttl
}

func (c *Client) unregister(t *LeaderTask) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tasks[t.ref.Election] == t {
		delete(c.tasks, t.ref.Election)
	}
}
