package candidacy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/backend/kit/lost"
	"github.com/simba-go/simba/backend/kit/wake"
)

// Queue is what differs between backends in an Acquire: a session's
// requests on the queues of candidacies. A [Session] calls them; each
// returns errors that start with the backend's prefix, as the backend
// returns them to its caller.
type Queue interface {
	// Watch calls f, until cancel, whenever the queue of the lease name
	// may have changed: a candidacy registered or withdrawn, its session
	// ended. f must not block. A notification may be late or missing:
	// Ahead's wait bounds how long a waiter trusts that nothing changed.
	Watch(name string, f func()) (cancel func())

	// Register adds the session's candidacy for name at the back of its
	// queue, with the name's next token, and removes the session's older
	// candidacies for name in the same step (a re-Acquire frees the old
	// holding and queues at the back). When its outcome is unknown (ctx
	// ended, the connection broke) it withdraws what it may have added
	// before it returns its error, now or in the background (see
	// [Session.Retry]).
	Register(ctx context.Context, name string) (token uint64, err error)

	// Ahead reads the queue of w.Name once for the candidacy w.Token, and
	// removes the dead candidacies ahead of it that it can prove dead. It
	// returns a negative wait when the candidacy holds the lease (it is
	// first), zero to read again at once, or how long to wait before
	// reading again unless woken ([Queue.Watch], [Waiter.Follow]).
	//
	// It returns [ErrGone] when the candidacy is no longer in the queue,
	// and an error wrapped by [Final] to end the wait with that error (a
	// queue that does not decode, a session that the server says is
	// over); every other error is transient: the read is retried with
	// backoff.
	Ahead(ctx context.Context, w *Waiter) (wait time.Duration, err error)

	// Withdraw removes the candidacy (name, token) of an Acquire that
	// gave up, now or, when the server cannot be reached, in the
	// background until it can or the session is over (see
	// [Session.Retry]).
	Withdraw(name string, token uint64)

	// Changed is called when the queue of a name that the session holds
	// may have changed: the backend reads it (off the caller's goroutine:
	// Changed must not block) and ends, with [Session.Lose], the holdings
	// whose candidacy is gone.
	Changed(name string)

	// Release ends the holding h on the server if, and only if, it is
	// still h (its candidacy is still in the queue and its session alive)
	// and writes records, each fenced by h (as backend.RecordReleaser's
	// ReleaseWithRecords says), in the same step; records is empty for a
	// plain Release. It reports whether it ended the holding: false, with
	// a nil error, when the holding had already ended (the caller's
	// error then wraps backend.ErrNotHeld); an error when the server
	// could not be asked, which op (`release "name" (token 7)`) starts.
	// The records are checked (backend.CheckRecord) before it is called.
	Release(ctx context.Context, h *Holding, op string, records []backend.Record) (released bool, err error)
}

// ErrGone is returned by [Queue.Ahead] when the waiting candidacy is no
// longer in its queue: a later Acquire of the same session and name
// replaced it, or someone deleted it. Acquire then fails with an error
// that says so.
var ErrGone = errors.New("simba/candidacy: the candidacy is no longer in its queue")

// Final wraps an error of [Queue.Ahead] that ends the wait: Acquire
// returns err itself. A nil err stays nil.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return &finalError{err}
}

type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
func (e *finalError) Unwrap() error { return e.err }

// Config configures a [Session].
type Config struct {
	// Prefix starts every error of the session's, and names the backend
	// in its logs: "simba/postgres".
	Prefix string
	// ID is the session's ID (backend.Session's ID), for errors and logs.
	ID string
	// Queue is the backend's side of Acquire and Release. Acquire fails
	// without it.
	Queue Queue
	// Logger receives the session's debug lines (a read of a queue that
	// failed): default slog.Default().
	Logger *slog.Logger
	// WaitGroup counts the goroutines the session starts ([Session.Retry]),
	// so that the backend's Close can wait for them; nil: a group of the
	// session's own.
	WaitGroup *sync.WaitGroup
	// TTL returns the session's TTL: background retries wait at most a
	// third of it between attempts. Nil: a second.
	TTL func() time.Duration
}

// Session is the part of a backend session that queued candidacy needs:
// its life, its holdings and Acquire. Make it with [New]. It is safe for
// concurrent use by multiple goroutines.
type Session struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	over bool
	held map[*Holding]struct{}
	// grants counts the holdings granted (see Mark).
	grants uint64
}

// New returns a session that lasts until [Session.End] or until parent
// ends (the backend's Close).
func New(parent context.Context, c Config) *Session {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.WaitGroup == nil {
		c.WaitGroup = new(sync.WaitGroup)
	}
	if c.TTL == nil {
		c.TTL = func() time.Duration { return time.Second }
	}
	ctx, cancel := context.WithCancel(parent)
	return &Session{cfg: c, ctx: ctx, cancel: cancel, done: make(chan struct{}), held: map[*Holding]struct{}{}}
}

// Context ends when the session is over ([Session.End]) or its parent
// ends: the backend's requests on the session's behalf use it.
func (s *Session) Context() context.Context { return s.ctx }

// Done is closed by [Session.End] (backend.Session's Done).
func (s *Session) Done() <-chan struct{} { return s.done }

// Over reports whether [Session.End] was called.
func (s *Session) Over() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.over
}

// OverErr returns the error of op on a session that is over, wrapping
// backend.ErrSessionDone, or nil while it lasts.
func (s *Session) OverErr(op string) error {
	if s.Over() {
		return s.overErr(op)
	}
	return nil
}

func (s *Session) overErr(op string) error {
	return fmt.Errorf("%s: %s: session %s: %w", s.cfg.Prefix, op, s.cfg.ID, backend.ErrSessionDone)
}

// End makes the session over: every holding is lost (its Lost closes),
// Done closes and Context ends. It reports whether this call ended it
// (false: over already).
func (s *Session) End() bool {
	s.mu.Lock()
	if s.over {
		s.mu.Unlock()
		return false
	}
	s.over = true
	held := s.held
	s.held = nil
	s.mu.Unlock()
	for h := range held {
		h.lose()
	}
	close(s.done)
	s.cancel()
	return true
}

// CheckName returns the error of op about the lease name on this
// session: an invalid name (see backend.CheckName), or the session over;
// nil otherwise.
func (s *Session) CheckName(op, name string) error {
	if err := backend.CheckName(name); err != nil {
		return fmt.Errorf("%s: lease name: %w", s.cfg.Prefix, err)
	}
	return s.OverErr(op)
}

// Acquire is backend.Session's Acquire: it watches the queue of name,
// registers a candidacy ([Queue.Register]), and waits until it is first
// ([Queue.Ahead]), reading again when the queue changes, when the wait
// Ahead returned has passed, and, with backoff, after a failed read. When
// ctx ends first it withdraws the candidacy ([Queue.Withdraw]) and returns
// an error wrapping ctx's cause; when the session ends first, one wrapping
// backend.ErrSessionDone. The holding it returns is counted as held until
// it is released ([Holding.ReleaseWithRecords]) or lost ([Session.Lose],
// [Session.End]); the session's earlier holdings of name, which the
// registration removed, are lost. The lease it returns is a *Holding.
func (s *Session) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	op := fmt.Sprintf("acquire %q", name)
	if err := s.CheckName(op, name); err != nil {
		return nil, err
	}
	q := s.cfg.Queue
	if q == nil {
		return nil, fmt.Errorf("%s: %s: the session's candidacy.Config has no Queue", s.cfg.Prefix, op)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %s: %w", s.cfg.Prefix, op, context.Cause(ctx))
	}
	// Watch before registering, so that no hand-off goes unseen.
	w := &Waiter{Name: name, Op: op, wake: make(chan struct{}, 1)}
	unwatch := q.Watch(name, w.Wake)
	defer unwatch()
	defer w.unfollow()
	token, err := q.Register(ctx, name)
	if err != nil {
		return nil, err
	}
	w.Token = token
	s.replace(name, token)
	if err := s.wait(ctx, w); err != nil {
		return nil, err
	}
	h := &Holding{s: s, name: name, token: token, sig: lost.New(), atGrant: w.AtGrant}
	h.unwatch = sync.OnceFunc(q.Watch(name, func() { q.Changed(name) }))
	s.mu.Lock()
	if s.over {
		s.mu.Unlock()
		h.unwatch()
		return nil, s.overErr(op)
	}
	s.grants++
	h.seq = s.grants
	s.held[h] = struct{}{}
	s.mu.Unlock()
	select {
	case <-w.wake: // a change since the last read: the backend reads again
		q.Changed(name)
	default:
	}
	return h, nil
}

// wait waits until the candidacy of w is first in its queue.
func (s *Session) wait(ctx context.Context, w *Waiter) error {
	gaveUp := func() error {
		s.cfg.Queue.Withdraw(w.Name, w.Token)
		return fmt.Errorf("%s: %s: %w", s.cfg.Prefix, w.Op, context.Cause(ctx))
	}
	var final *finalError
	for failures := 0; ; {
		if ctx.Err() != nil {
			return gaveUp()
		}
		if s.ctx.Err() != nil { // the session is over, or the backend closed
			return s.overErr(w.Op)
		}
		w.AtGrant = nil // what this read lists, if it grants
		wait, err := s.cfg.Queue.Ahead(ctx, w)
		switch {
		case err == nil && wait < 0:
			return nil
		case err != nil && ctx.Err() != nil:
			return gaveUp()
		case errors.As(err, &final):
			return final.err
		case err != nil && s.ctx.Err() != nil:
			return s.overErr(w.Op)
		case errors.Is(err, ErrGone):
			return fmt.Errorf("%s: %s: the candidacy with token %d was deleted while it waited", s.cfg.Prefix, w.Op, w.Token)
		case err != nil:
			failures++
			s.cfg.Logger.Debug(s.cfg.Prefix+": reading the queue", "lease", w.Name, "err", err)
			backoff.Sleep(ctx, backoff.Wait(failures, time.Second))
			continue
		}
		failures = 0
		if wait == 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-s.ctx.Done():
		case <-w.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// replace ends the session's holdings of name older than token, which
// the registration of token removed.
func (s *Session) replace(name string, token uint64) {
	s.LoseIf(func(h *Holding) bool { return h.name == name && h.token < token })
}

// Holdings returns the holdings the session counts as held now.
func (s *Session) Holdings() []*Holding {
	s.mu.Lock()
	defer s.mu.Unlock()
	hs := make([]*Holding, 0, len(s.held))
	for h := range s.held {
		hs = append(hs, h)
	}
	return hs
}

// Lose ends the holdings hs, which the backend found lost: the session
// counts them held no more, and their Lost closes, unless their owner
// released them meanwhile (see [Holding.ReleaseWithRecords]).
func (s *Session) Lose(hs ...*Holding) {
	s.mu.Lock()
	for _, h := range hs {
		delete(s.held, h)
	}
	s.mu.Unlock()
	for _, h := range hs {
		h.lose()
	}
}

// LoseIf ends, as Lose does, the held holdings for which gone reports
// true. gone runs with the session's lock held: it must not call the
// session.
func (s *Session) LoseIf(gone func(*Holding) bool) {
	var hs []*Holding
	s.mu.Lock()
	for h := range s.held {
		if gone(h) {
			hs = append(hs, h)
			delete(s.held, h)
		}
	}
	s.mu.Unlock()
	for _, h := range hs {
		h.lose()
	}
}

// Mark returns how many holdings the session has granted so far. A
// backend takes it before it sends a read of the session's candidacies,
// and gives it to [Session.LoseMissing] with what the read found: every
// holding granted up to the mark had its candidacy registered before the
// read was sent, so the read saw it unless it is gone.
func (s *Session) Mark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grants
}

// LoseMissing ends, as Lose does, the held holdings granted up to mark
// (see [Session.Mark]) for which missing reports true: their candidacy is
// gone. A holding granted after mark is left alone, as its candidacy may
// have been registered after the read was sent; LoseMissing reports
// whether missing reported true for one (the backend reads again, with a
// new mark). missing runs with the session's lock held: it must not call
// the session.
func (s *Session) LoseMissing(mark uint64, missing func(*Holding) bool) (again bool) {
	var hs []*Holding
	s.mu.Lock()
	for h := range s.held {
		if !missing(h) {
			continue
		}
		if h.seq > mark {
			again = true
			continue
		}
		hs = append(hs, h)
		delete(s.held, h)
	}
	s.mu.Unlock()
	for _, h := range hs {
		h.lose()
	}
	return again
}

// Retry runs f within first and returns its error. When f fails while
// the session lasts, Retry also runs it again in the background, with
// backoff (at most a third of the TTL between attempts), each attempt
// within each, until it succeeds or the session is over: a withdrawal
// that must happen, whenever the server can be reached. It returns nil
// when f succeeded or failed because the session ended.
func (s *Session) Retry(first, each time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(s.ctx, first)
	err := f(ctx)
	cancel()
	if err == nil || s.ctx.Err() != nil {
		return nil
	}
	wg := s.cfg.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for attempt := 1; ; attempt++ {
			if !backoff.Sleep(s.ctx, backoff.Wait(attempt, s.cfg.TTL()/3)) {
				return
			}
			ctx, cancel := context.WithTimeout(s.ctx, each)
			err := f(ctx)
			cancel()
			if err == nil {
				return
			}
		}
	}()
	return err
}

// Waiter is one Acquire waiting for its candidacy to be first, as
// [Queue.Ahead] sees it.
type Waiter struct {
	Name  string // the lease name
	Token uint64 // the candidacy's token
	Op    string // what the caller does, for errors: `acquire "name"`

	// AtGrant is what the queue read that granted the lease listed of
	// the records (see backend.GrantSnapshot): nil before each Ahead,
	// which may set it when it returns a negative wait.
	AtGrant *Snapshot

	wake     chan struct{}
	followed string
	cancel   func()
}

// Snapshot is the records under Prefix as a grant's queue read saw them.
type Snapshot struct {
	Prefix  string
	Records []backend.Record
}

// Wake makes the waiter read the queue again now rather than at the end
// of its wait. It does not block.
func (w *Waiter) Wake() { wake.Poke(w.wake) }

// Follow keeps, while the waiter waits, one more subscription that wakes
// it besides its queue's: subscribe is called with [Waiter.Wake] and
// returns its cancel (the Kubernetes backend follows the deletion of the
// session object of the candidacy ahead). A later Follow with another
// key cancels this one; one with the same key keeps it. Only Ahead calls
// it, on the waiter's goroutine.
func (w *Waiter) Follow(key string, subscribe func(f func()) (cancel func())) {
	if w.cancel != nil && w.followed == key {
		return
	}
	w.unfollow()
	w.followed = key
	w.cancel = subscribe(w.Wake)
}

func (w *Waiter) unfollow() {
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
}

var (
	_ backend.Lease          = (*Holding)(nil)
	_ backend.LostNotifier   = (*Holding)(nil)
	_ backend.RecordReleaser = (*Holding)(nil)
	_ backend.GrantSnapshot  = (*Holding)(nil)
)

// Holding is one holding of a lease: the candidacy (name, token) of its
// session once first in its queue. It is the backend.Lease that
// [Session.Acquire] returns, a backend.LostNotifier, and a
// backend.RecordReleaser (for a backend whose sessions implement
// backend.Records: the core uses it only then). It is safe for
// concurrent use by multiple goroutines.
type Holding struct {
	s       *Session
	name    string
	token   uint64
	sig     *lost.Signal
	unwatch func() // the subscription that tells the backend of changes
	atGrant *Snapshot
	seq     uint64 // the session's count of grants at this one (see Session.Mark)
}

// RecordsAtGrant implements [backend.GrantSnapshot]: the records the
// queue read that granted the holding listed, if it listed prefix.
func (h *Holding) RecordsAtGrant(prefix string) ([]backend.Record, bool) {
	if h.atGrant == nil || h.atGrant.Prefix != prefix {
		return nil, false
	}
	return slices.Clone(h.atGrant.Records), true
}

// Name is the lease name given to Acquire.
func (h *Holding) Name() string { return h.name }

// Token is the candidacy's token.
func (h *Holding) Token() uint64 { return h.token }

// Lost is closed when the holding is lost: found gone by the backend
// ([Session.Lose]), replaced by a later Acquire of the same name, or
// ended with its session.
func (h *Holding) Lost() <-chan struct{} { return h.sig.C() }

// OnLost runs f once when Lost closes (backend.LostNotifier).
func (h *Holding) OnLost(f func()) (stop func() bool) { return h.sig.OnLost(f) }

// Held reports whether the session counts the holding as held: not
// released, not lost.
func (h *Holding) Held() bool {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	_, ok := h.s.held[h]
	return ok
}

// lose closes Lost and runs the OnLost functions, unless released.
func (h *Holding) lose() {
	if h.sig.Lose() {
		h.unwatch()
	}
}

// Release ends the holding ([Queue.Release]) if it is still this
// holding: it never frees a newer holder. It returns an error wrapping
// backend.ErrNotHeld when the holding had already ended.
func (h *Holding) Release(ctx context.Context) error { return h.ReleaseWithRecords(ctx, nil) }

// ReleaseWithRecords writes records, fenced by the holding, and ends it,
// in one step of the backend's ([Queue.Release]). A loss reported while
// the release is in flight (maybe the release's own write, seen by the
// backend's watch before it returns) waits for its outcome: once the
// release ended the holding, Lost never closes; when it failed, a loss
// reported meanwhile closes Lost now.
func (h *Holding) ReleaseWithRecords(ctx context.Context, records []backend.Record) error {
	op := fmt.Sprintf("release %q (token %d)", h.name, h.token)
	for _, r := range records {
		if err := backend.CheckRecord(r.Key, r.Value); err != nil {
			return fmt.Errorf("%s: %s: %w", h.s.cfg.Prefix, op, err)
		}
	}
	if h.s.Over() || h.sig.IsReleased() {
		return h.notHeld(op)
	}
	h.sig.BeginRelease()
	released, err := h.s.cfg.Queue.Release(ctx, h, op, records)
	if h.sig.EndRelease(released) {
		h.unwatch() // lost while the release was in flight, and it failed
	}
	switch {
	case released:
		h.sig.Released()
		h.unwatch()
		h.s.mu.Lock()
		delete(h.s.held, h)
		h.s.mu.Unlock()
		return nil
	case err != nil:
		return err
	}
	return h.notHeld(op)
}

// notHeld returns the error of a release that found the holding ended,
// wrapping backend.ErrNotHeld. While the session still counts the
// holding as held it tells the backend ([Queue.Changed]), whose read then
// closes Lost.
func (h *Holding) notHeld(op string) error {
	if h.s.Over() {
		return fmt.Errorf("%s: %s: the session is over: %w", h.s.cfg.Prefix, op, backend.ErrNotHeld)
	}
	if h.Held() {
		h.s.cfg.Queue.Changed(h.name)
	}
	return fmt.Errorf("%s: %s: %w", h.s.cfg.Prefix, op, backend.ErrNotHeld)
}
