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
	running    map[*holding]uint64 // task functions not returned, by term: their goroutine (see runOn)
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
		running:    make(map[*holding]uint64),
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
	c.events = newEventBus(c.log, o.handlers)
	go c.keep(ctx)
	c.wg.Go(c.ops.watch)
	return c, nil
}

// Subscribe registers h for the events published from now on (see [Event])
// and returns a function that unregisters it. Use [WithEventHandler] to see
// the events of the client's start too.
func (c *Client) Subscribe(h func(Event)) (unsubscribe func()) {
	if h == nil {
		return func() {}
	}
	return c.events.subscribe(h)
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

// Close stops every task of the client and hands each off (task first, then
// lease), then ends the session on the backend, and waits for all of it:
// when Close returns, no goroutine of the client runs and no event handler
// will be called again, with the exceptions below. It is [Client.Shutdown]
// without a bound of the caller's: Close waits
//
//   - for every task function to return. One that ignores the cancellation
//     of its ctx delays Close until it returns (its lease is handed off at
//     its term's deadline all the same). Use Shutdown to bound this wait.
//   - for every lease to be released, retrying failures for about one TTL
//     from the start of the release. A lease not released by then is logged
//     and goes with the session.
//   - for the session to end on the backend, at most until its deadline
//     plus the drift margin; past it the session expires by itself. (A
//     session the client ended early because a lease could not be
//     released is closed only at the deadline it had reached, at most one
//     TTL later.)
//   - for the event handlers to be called with the events published before,
//     at most 5 seconds. A handler still running then is abandoned: Close
//     logs an error and returns, that handler call is the last one (its
//     goroutine ends when it returns), and the events not yet delivered are
//     dropped.
//
// Close may be called from an event handler. It then hands off and ends the
// session as above, but no handler is called from then on (the calling one
// is the last; the events not yet delivered, including those of the
// hand-offs, are dropped), and Close returns without waiting for the event
// goroutine, which ends when the calling handler returns.
//
// Close called from a task function of the client (on the goroutine the
// client runs it on) begins the closing and returns at once, as Shutdown
// does there: it cannot wait for the function that called it.
//
// Close is idempotent and safe to call concurrently with Shutdown; a second
// call waits for the first. It always returns nil.
func (c *Client) Close() error {
	c.Shutdown(context.Background()) // without a deadline it returns nil
	return nil
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
