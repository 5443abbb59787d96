package backendtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/backend"
)

// Option configures [Run]. Options refuse bad values: Run fails the test
// with their error.
type Option func(*config) error

type config struct {
	ttl         time.Duration
	synctest    bool
	malformed   Malformer
	fingerprint func(t *testing.T, b backend.Backend) string
	clockRate   float64
}

// WithTTL sets the session TTL the cases request (default 1s). The cases
// time everything from the TTL the backend grants, which may differ. It
// must be positive.
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("simba/backendtest: WithTTL(%v): the TTL must be positive", d)
		}
		c.ttl = d
		return nil
	}
}

// WithSynctest runs the body of every case inside [synctest.Test], in a
// bubble with virtual time: for backends, like the in-memory one, that use
// only the time package and channels. Subtests are still started outside
// the bubbles.
func WithSynctest() Option {
	return func(c *config) error {
		c.synctest = true
		return nil
	}
}

// WithServerClockRate lets the server time sessions on a clock that runs
// up to rate faster than the test's monotonic clock (0.01: 1%), as a
// server does that times them by its wall clock while that clock is being
// slewed (PostgreSQL's clock_timestamp()). The expiry case then accepts a
// lease freed once ttl×(1−rate) has passed since the start of the last
// KeepAlive, instead of ttl. The core's drift margin (10% of the TTL by
// default) is what covers such a server, so rate must be in [0, 0.05].
// Without the option the server must not run fast at all, as etcd and
// ZooKeeper, which time sessions by their monotonic clocks, do not.
func WithServerClockRate(rate float64) Option {
	return func(c *config) error {
		if !(rate >= 0 && rate <= 0.05) {
			return fmt.Errorf("simba/backendtest: WithServerClockRate(%v): want a rate in [0, 0.05]", rate)
		}
		c.clockRate = rate
		return nil
	}
}

// Malformer plants, for the case MalformedSkipped, entries that the backend
// did not write, as another program writing to its server could leave
// them (see backend.MalformedError). Each hook works on the backend the
// case was given, through a client of the test's own, and cleans up after
// itself with t.Cleanup where the backend's tests require it.
type Malformer struct {
	// SpoilRecord replaces the stored value of the record at key, which
	// exists, with one that is not a record of the backend (for etcd and
	// ZooKeeper, data too short to hold the token).
	SpoilRecord func(t *testing.T, b backend.Backend, key string)
	// PlantMember adds to group, which has a live member, an entry that is
	// not a member record of the backend, and returns the part of its key
	// that names its session (what Member.Session would be). Nil: the case
	// checks records only.
	PlantMember func(t *testing.T, b backend.Backend, group string) (session string)
}

// WithMalformed gives the case MalformedSkipped the means to plant
// malformed entries; m.SpoilRecord must not be nil. Without it the case
// checks only that SkipReporter, if the sessions implement it, agrees with
// the plain listings when nothing is malformed.
func WithMalformed(m Malformer) Option {
	return func(c *config) error {
		if m.SpoilRecord == nil {
			return errors.New("simba/backendtest: WithMalformed: the Malformer has no SpoilRecord")
		}
		c.malformed = m
		return nil
	}
}

// Run runs the conformance suite against backends made by newBackend, one
// subtest per case. Each case calls newBackend for a fresh, empty backend;
// the factory registers the backend's clean-up with t.Cleanup. Under
// [WithSynctest] the factory is called inside the case's bubble.
func Run(t *testing.T, newBackend func(t *testing.T) backend.Backend, opts ...Option) {
	t.Helper()
	cfg, err := configure(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := func(t *testing.T) {
				c.run(&harness{T: t, b: newBackend(t), ttl: cfg.ttl, clockRate: cfg.clockRate, malformed: cfg.malformed, fingerprint: cfg.fingerprint})
			}
			if cfg.synctest {
				synctest.Test(t, body)
			} else {
				body(t)
			}
		})
	}
}

// configure applies opts over the defaults.
func configure(opts []Option) (config, error) {
	cfg := config{ttl: time.Second}
	for _, o := range opts {
		if o == nil {
			return cfg, errors.New("simba/backendtest: nil Option")
		}
		if err := o(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// opTimeout bounds every call that is expected to succeed promptly.
const opTimeout = 10 * time.Second

// harness is the state of one case: its test, its backend and the requested
// TTL, with helpers that report failures on the test.
type harness struct {
	*testing.T
	b           backend.Backend
	ttl         time.Duration
	clockRate   float64 // how much faster the server's clock may run (WithServerClockRate)
	malformed   Malformer
	fingerprint func(t *testing.T, b backend.Backend) string
}

// timeout returns a context that ends after d (or with the test).
func (h *harness) timeout(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(h.Context(), d)
	h.Cleanup(cancel)
	return ctx
}

// deadline returns a context that ends at t (or with the test).
func (h *harness) deadline(t time.Time) context.Context {
	ctx, cancel := context.WithDeadline(h.Context(), t)
	h.Cleanup(cancel)
	return ctx
}

// op returns a context for a call expected to return promptly.
func (h *harness) op() context.Context { return h.timeout(opTimeout) }

// open opens a session that a background goroutine renews every TTL/3
// until the end of the test; it stops the test if Open fails.
func (h *harness) open() backend.Session {
	h.Helper()
	s := h.openIdle()
	h.renew(s)
	return s
}

// openIdle opens a session that nothing renews; it stops the test if Open
// fails. The session is closed at the end of the test.
func (h *harness) openIdle() backend.Session {
	h.Helper()
	s, err := h.b.Open(h.op(), backend.SessionOptions{TTL: h.ttl})
	if err != nil {
		h.Fatalf("Open(TTL %v): %v", h.ttl, err)
	}
	if s == nil {
		h.Fatalf("Open(TTL %v) returned a nil session and no error", h.ttl)
	}
	h.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			// A session the test let lapse may be expiring on the server
			// while Close runs (ZooKeeper drops its connection): then
			// Close cannot be confirmed, and the session ends anyway.
			select {
			case <-s.Done():
				h.Logf("clean-up: Close of session %s: %v; it had expired (Done is closed)", s.ID(), err)
			case <-time.After(max(s.TTL(), h.ttl) + grace):
				h.Errorf("clean-up: Close of session %s: %v, and it did not end within its TTL", s.ID(), err)
			}
		}
	})
	return s
}

// renew keeps s alive, renewing it every TTL/3 on a goroutine, until the
// session is over or the test ends.
func (h *harness) renew(s backend.Session) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ttl := s.TTL()
		renewed := time.Now()
		for {
			t := time.NewTimer(ttl / 3)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			sent := time.Now()
			got, err := s.KeepAlive(ctx)
			switch {
			case err == nil:
				ttl, renewed = got, sent
			case ctx.Err() != nil:
				return
			case errors.Is(err, backend.ErrSessionDone):
				// Not an error of the suite's (a case may let a session
				// lapse), but what a later failure of the session's
				// calls needs to be understood: on a starved machine, a
				// renewal every TTL/3 may not keep a session.
				h.Logf("session %s: background KeepAlive: %v; the last renewal confirmed was sent %v before this one (TTL %v)",
					s.ID(), err, sent.Sub(renewed).Round(time.Millisecond), ttl)
				return
			default:
				h.Errorf("session %s: background KeepAlive: %v", s.ID(), err)
			}
		}
	}()
	h.Cleanup(func() {
		cancel()
		<-done
	})
}

// acquire acquires name on s; it stops the test if Acquire fails.
func (h *harness) acquire(s backend.Session, name string) backend.Lease {
	h.Helper()
	l, err := s.Acquire(h.op(), name)
	if err != nil {
		h.Fatalf("session %s: Acquire(%q): %v", s.ID(), name, err)
	}
	if l == nil {
		h.Fatalf("session %s: Acquire(%q) returned a nil lease and no error", s.ID(), name)
	}
	if l.Name() != name {
		h.Errorf("session %s: Acquire(%q): lease Name() = %q", s.ID(), name, l.Name())
	}
	return l
}

// maxTTL returns the largest granted TTL of the sessions.
func maxTTL(ss ...backend.Session) time.Duration {
	var d time.Duration
	for _, s := range ss {
		d = max(d, s.TTL())
	}
	return d
}

// wantErr reports unless err wraps target.
func (h *harness) wantErr(what string, err, target error) {
	h.Helper()
	if !errors.Is(err, target) {
		h.Errorf("%s: error %v, want one wrapping %v", what, err, target)
	}
}

// wantNoErr reports a non-nil err.
func (h *harness) wantNoErr(what string, err error) bool {
	h.Helper()
	if err != nil {
		h.Errorf("%s: %v", what, err)
		return false
	}
	return true
}

// waitClosed waits up to d for ch to be closed; it reports if it is not.
// Values received on ch are skipped.
func (h *harness) waitClosed(ch <-chan struct{}, d time.Duration, what string) bool {
	h.Helper()
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		case <-t.C:
			h.Errorf("%s: not closed within %v", what, d)
			return false
		}
	}
}

// isClosed reports whether ch is closed now, skipping pending values.
func isClosed(ch <-chan struct{}) bool {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		default:
			return false
		}
	}
}

// wantOpen reports if ch is closed.
func (h *harness) wantOpen(ch <-chan struct{}, what string) {
	h.Helper()
	if isClosed(ch) {
		h.Errorf("%s: closed, want open", what)
	}
}

// wantBlocked checks that s cannot acquire name within d: Acquire must end
// with an error wrapping context.DeadlineExceeded. A lease obtained anyway is
// released.
func (h *harness) wantBlocked(s backend.Session, name string, d time.Duration, why string) {
	h.Helper()
	l, err := s.Acquire(h.timeout(d), name)
	if l != nil {
		h.Errorf("session %s acquired %q (token %d) although %s", s.ID(), name, l.Token(), why)
		_ = l.Release(h.op())
		return
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		h.Errorf("session %s: Acquire(%q) with a %v timeout while %s: error %v, want one wrapping context.DeadlineExceeded", s.ID(), name, d, why, err)
	}
}

// eventually calls check every poll until it returns nil or d has passed; it
// reports the last error then.
func (h *harness) eventually(d time.Duration, what string, check func() error) bool {
	h.Helper()
	poll := max(d/50, 5*time.Millisecond)
	end := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return true
		}
		if time.Now().After(end) {
			h.Errorf("%s: still failing after %v: %v", what, d, err)
			return false
		}
		time.Sleep(poll)
	}
}

// catch runs f and turns a panic into an error.
func catch(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// Acquired is the outcome of an Acquire run by AcquireAsync.
type Acquired struct {
	Lease backend.Lease
	Err   error
}

// AcquireAsync runs s.Acquire(ctx, name) on a new goroutine and delivers
// its outcome on the returned channel (buffered: the goroutine never
// blocks on it). For a backend's own tests of waiting Acquires.
func AcquireAsync(ctx context.Context, s backend.Session, name string) <-chan Acquired {
	ch := make(chan Acquired, 1)
	go func() {
		l, err := s.Acquire(ctx, name)
		ch <- Acquired{l, err}
	}()
	return ch
}

// drain empties a member-watch channel of pending hints.
func drain(ch <-chan struct{}) {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// wantHint waits up to d for a hint on ch.
func (h *harness) wantHint(ch <-chan struct{}, d time.Duration, what string) {
	h.Helper()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case _, ok := <-ch:
		if !ok {
			h.Errorf("member watch closed, want a hint after %s", what)
		}
	case <-t.C:
		h.Errorf("no member-watch hint within %v after %s", d, what)
	}
}
