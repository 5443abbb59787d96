package simba

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/internal/plant"
	"github.com/simba-go/simba/internal/records"
)

// generation is one backend session as the client sees it: from Open until
// it ends by deadline, by the backend's word, or by Close. Every term started
// on it ends when it ends.
//
// Times are kept as offsets from the client's base time on the monotonic
// clock, so that validity checks are a load and a compare.
type generation struct {
	sess   backend.Session
	ttl    time.Duration // granted TTL
	margin time.Duration
	base   time.Time

	// deadline is the offset from base until which the session is known to
	// be alive on the server: send time of the last confirmed renewal plus
	// its TTL, minus the margin. It only grows while the generation lives.
	deadline atomic.Int64
	ended    atomic.Bool
	// closeNotBefore, when set, is the offset from base before which the
	// session must not be closed on the server: the deadline it had when
	// the client ended it early on its own (see LeaderTask.giveUpRelease).
	closeNotBefore atomic.Int64

	ctx    context.Context // cancelled when the generation ends
	cancel context.CancelFunc

	mu     sync.Mutex
	timer  *time.Timer // fires at the deadline
	reason RevokeReason
	cause  error
}

func newGeneration(sess backend.Session, base, sent time.Time, margin, ttl time.Duration) *generation {
	ctx, cancel := context.WithCancel(context.Background())
	g := &generation{
		sess:   sess,
		ttl:    ttl,
		margin: margin,
		base:   base,
		ctx:    ctx,
		cancel: cancel,
	}
	g.deadline.Store(int64(sent.Sub(base) + g.ttl - margin))
	g.mu.Lock()
	g.timer = time.AfterFunc(g.left(), g.checkDeadline)
	g.mu.Unlock()
	return g
}

// now is the current offset from base.
func (g *generation) now() time.Duration { return time.Since(g.base) }

// left is the time until the deadline (negative when passed).
func (g *generation) left() time.Duration {
	return time.Duration(g.deadline.Load()) - g.now()
}

// valid reports whether the session is known alive now.
func (g *generation) valid() bool {
	return !g.ended.Load() && g.left() > 0
}

// extend records a renewal confirmed for a request sent at sent. It reports
// false when the generation has already ended: a late confirmation never
// revives it.
func (g *generation) extend(sent time.Time, ttl time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended.Load() {
		return false
	}
	d := int64(sent.Sub(g.base) + ttl - g.margin)
	if d > g.deadline.Load() {
		g.deadline.Store(d)
	}
	return true
}

// checkDeadline runs when the deadline timer fires: it ends the generation if
// the deadline has passed, and otherwise waits for the new one.
func (g *generation) checkDeadline() {
	g.mu.Lock()
	if g.ended.Load() {
		g.mu.Unlock()
		return
	}
	if left := g.left(); left > 0 || plant.Is(plant.DeadlineTimerDead) {
		if left > 0 {
			g.timer.Reset(left)
		}
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	g.end(RevokeDeadline, nil)
}

// end ends the generation once; later calls do nothing. The deadline is
// frozen at the moment of the end, so no term of it is valid afterwards.
func (g *generation) end(reason RevokeReason, cause error) {
	g.mu.Lock()
	if g.ended.Load() {
		g.mu.Unlock()
		return
	}
	if now := int64(g.now()); now < g.deadline.Load() {
		g.deadline.Store(now)
	}
	g.ended.Store(true)
	g.reason, g.cause = reason, cause
	g.timer.Stop()
	g.mu.Unlock()
	g.cancel()
}

// why returns the reason the generation ended.
func (g *generation) why() (RevokeReason, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reason, g.cause
}

// keep is the session keeper: it opens a session, renews it every third of
// its TTL (retrying quickly on failure), ends it when the deadline passes or
// the backend reports it gone, and opens the next one, until ctx ends.
func (c *Client) keep(ctx context.Context) {
	defer close(c.keeperDone)
	var failures int
	var out outage
	for ctx.Err() == nil {
		sent := time.Now()
		// Each attempt is bounded, so that an unreachable backend is
		// reported rather than waited for in silence.
		octx, cancel := context.WithTimeout(ctx, max(c.opts.ttl, time.Second))
		sess, err := c.backend.Open(octx, backend.SessionOptions{TTL: c.opts.ttl, GrantRecords: records.OpsPrefix})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			out.failed(c.log, sent, c.opts.ttl, err)
			if !backoff.Sleep(ctx, backoff.Wait(failures, c.opts.ttl/3)) {
				return
			}
			continue
		}
		out.ended(c.log)
		ttl := sess.TTL()
		if plant.Is(plant.RequestedTTL) {
			ttl = c.opts.ttl
		}
		g := newGeneration(sess, c.base, sent, c.opts.marginFor(ttl), ttl)
		if ttl < MinTTL || !g.valid() {
			// A TTL too short to renew, or one that ran out before Open
			// returned: nothing on this session could be valid for long,
			// if at all. Retried with backoff, not in a tight loop.
			g.end(RevokeDeadline, nil)
			c.closeSession(g)
			failures++
			c.log.Error("session unusable: the backend granted a TTL that leaves no valid deadline; opening another", "session", sess.ID(),
				"granted", ttl, "min", MinTTL, "margin", g.margin, "open", time.Since(sent), "attempt", failures)
			if !backoff.Sleep(ctx, backoff.Wait(failures, c.opts.ttl/3)) {
				return
			}
			continue
		}
		failures = 0
		// Said before the elections see the session, so that no Elected
		// comes before its SessionStarted.
		c.log.Info("session started", "session", sess.ID(), "ttl", g.ttl, "margin", g.margin)
		c.events.publish(SessionStarted{Session: sess.ID(), TTL: g.ttl, At: time.Now()})
		c.setGeneration(g)

		published := make(chan struct{})
		go func() {
			defer close(published)
			c.publishHealth(g)
		}()
		c.renew(ctx, g, sent)
		<-published // it ends with g

		reason, cause := g.why()
		c.setGeneration(nil)
		if reason != RevokeClosed {
			c.log.Warn("session lost", "session", sess.ID(), "reason", reason, "err", cause)
			c.metrics.sessionLost(reason)
			c.events.publish(SessionLost{Session: sess.ID(), Reason: reason, Err: cause, At: time.Now()})
		}
		c.closeSession(g)
	}
}

// renew keeps g alive until it ends; it returns with g ended.
func (c *Client) renew(ctx context.Context, g *generation, lastSent time.Time) {
	interval := g.ttl / 3
	next := time.NewTimer(time.Until(lastSent.Add(interval)))
	defer next.Stop()
	var failures int
	for {
		select {
		case <-ctx.Done():
			g.end(RevokeClosed, nil)
			return
		case <-g.ctx.Done():
			return
		case <-g.sess.Done():
			g.end(RevokeSessionLost, backend.ErrSessionDone)
			return
		case <-next.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithDeadline(g.ctx, g.base.Add(time.Duration(g.deadline.Load())))
		ttl, err := c.keepAlive(rctx, g.sess)
		cancel()
		c.metrics.renewed(time.Since(sent), err)
		if plant.Is(plant.DeadlineFromReply) {
			sent = time.Now()
		}
		if plant.Is(plant.RequestedTTL) {
			ttl = c.opts.ttl
		}
		switch {
		case err == nil && ttl < MinTTL:
			// No deadline to move to: retried like a failure, so that a
			// backend granting nothing is not renewed in a tight loop.
			failures++
			c.renewals.failedOne()
			c.log.Error("session renewal granted a TTL too short to use", "session", g.sess.ID(), "granted", ttl, "min", MinTTL, "attempt", failures, "left", g.left())
			next.Reset(backoff.Wait(failures, interval))
		case err == nil:
			left := g.left()
			if !g.extend(sent, ttl) {
				return
			}
			c.renewals.confirmed(time.Now(), left, time.Since(sent))
			failures = 0
			interval = ttl / 3
			next.Reset(time.Until(sent.Add(interval)))
		case errors.Is(err, backend.ErrSessionDone):
			g.end(RevokeSessionLost, err)
			return
		default:
			failures++
			c.renewals.failedOne()
			// Not a warning yet: the next attempt may well succeed, and if
			// none does the session's loss is one.
			c.log.Debug("session renewal failed", "session", g.sess.ID(), "err", err, "attempt", failures, "left", g.left())
			next.Reset(backoff.Wait(failures, interval))
		}
	}
}

// keepAlive is the one place the renewal's TTL enters the deadline math;
// tests may plant faults in it.
func (c *Client) keepAlive(ctx context.Context, s backend.Session) (time.Duration, error) {
	return s.KeepAlive(ctx)
}

// closeSession ends g's session on the backend in the background, not
// before g.closeNotBefore when that is set, and bounded by
// its deadline (past it the server expires it anyway).
func (c *Client) closeSession(g *generation) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if d := g.closeNotBefore.Load(); d > 0 {
			// Not renewed any more, it expires on the server by then too.
			time.Sleep(time.Duration(d) - g.now())
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(g.left(), 0)+g.margin)
		defer cancel()
		if err := g.sess.Close(ctx); err != nil {
			c.log.Warn("closing a session failed; it expires by itself", "session", g.sess.ID(), "err", err)
		}
	}()
}

func (c *Client) setGeneration(g *generation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen = g
	close(c.genChanged)
	c.genChanged = make(chan struct{})
}

// awaitGeneration returns the live generation, waiting for one if needed.
func (c *Client) awaitGeneration(ctx context.Context) (*generation, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c.mu.Lock()
		g, changed := c.gen, c.genChanged
		c.mu.Unlock()
		if g != nil && g.valid() {
			return g, nil
		}
		if g != nil { // ending: wait for the end, then for the next one
			select {
			case <-g.ctx.Done():
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// outage reports a run of failed attempts to open a session: at Debug
// while it is shorter than a TTL (a restart of the server, a blip), then
// at Warn, each time it has grown by its length so far (at most five
// minutes apart), and at Info once a session opens again after a warning.
type outage struct {
	since    time.Time // the send time of the run's first attempt
	nextWarn time.Time
	attempts int
	warned   bool
}

// maxOutageQuiet is the longest spacing of the warnings of one outage.
const maxOutageQuiet = 5 * time.Minute

// failed records the failure of an attempt sent at sent.
func (o *outage) failed(log *slog.Logger, sent time.Time, ttl time.Duration, err error) {
	if o.attempts == 0 {
		o.since, o.nextWarn = sent, sent.Add(ttl)
	}
	o.attempts++
	now := time.Now()
	lasting := now.Sub(o.since)
	if now.Before(o.nextWarn) {
		log.Debug("opening a session failed", "err", err, "attempt", o.attempts, "for", lasting)
		return
	}
	log.Warn("backend unreachable: opening a session failed", "for", lasting.Round(time.Millisecond), "attempts", o.attempts, "err", err)
	o.warned = true
	o.nextWarn = now.Add(min(max(lasting, ttl), maxOutageQuiet))
}

// ended records a session opened: the outage, if any, is over.
func (o *outage) ended(log *slog.Logger) {
	if o.warned {
		log.Info("backend reachable again: session opened", "after", time.Since(o.since).Round(time.Millisecond), "attempts", o.attempts+1)
	}
	*o = outage{}
}
