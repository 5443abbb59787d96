// Package peerkit is what the peers of the side-by-side benchmarks
// (tests/internal/pgpeers, mypeers, kubepeers) share: a spell of
// leadership as an elector believes it, and the Run/Resign plumbing of an
// elector.
package peerkit

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Leadership is one spell of leadership as an elector believes it: it
// starts when the elector learns it leads and ends when it stops believing
// so (a failed ping or re-election, a resignation, the elector stopping).
type Leadership struct {
	// Start is when the elector learned that it leads.
	Start time.Time

	once   sync.Once
	done   chan struct{}
	end    time.Time
	ttlEnd time.Time
}

// NewLeadership returns a spell that started at start.
func NewLeadership(start time.Time) *Leadership {
	return &Leadership{Start: start, done: make(chan struct{})}
}

// Finish ends the spell at end (once); ttlEnd is the end a local TTL
// would have given it (see [Leadership.TTLEnd]), or zero for end.
func (l *Leadership) Finish(end, ttlEnd time.Time) {
	l.once.Do(func() {
		l.end = end
		l.ttlEnd = end
		if !ttlEnd.IsZero() && ttlEnd.Before(end) {
			l.ttlEnd = ttlEnd
		}
		close(l.done)
	})
}

// Done is closed when the elector stops believing it leads.
func (l *Leadership) Done() <-chan struct{} { return l.done }

// End returns when the elector stopped believing it leads; it is zero
// until Done is closed.
func (l *Leadership) End() time.Time {
	select {
	case <-l.done:
		return l.end
	default:
		return time.Time{}
	}
}

// TTLEnd returns, for an elector that renews a lease (a leader table, a
// lock table), when the spell would have ended had the leader also stopped
// at its own local TTL after the last successful renewal (the first
// instant at which TTL had passed since the last success it had received),
// if that is before End; for a connection-bound lock it is End. It is
// zero until Done is closed.
func (l *Leadership) TTLEnd() time.Time {
	select {
	case <-l.done:
		return l.ttlEnd
	default:
		return time.Time{}
	}
}

// Runner is the Run/Resign plumbing electors share: Run contends until its
// ctx ends or Resign is called, once.
type Runner struct {
	pkg      string // for errors: "pgpeers"
	stopOnce sync.Once
	stop     chan struct{} // closed by Resign
	started  chan struct{} // closed when Run starts
	done     chan struct{} // closed when Run returns
	runOnce  sync.Once
}

// NewRunner returns a Runner whose errors start with pkg ("pgpeers").
func NewRunner(pkg string) Runner {
	return Runner{pkg: pkg, stop: make(chan struct{}), started: make(chan struct{}), done: make(chan struct{})}
}

// Begin returns a context that ends with ctx or on Resign, and a function
// that Run defers; it fails if Run was called before.
func (r *Runner) Begin(ctx context.Context) (context.Context, func(), error) {
	first := false
	r.runOnce.Do(func() { first = true })
	if !first {
		return nil, nil, errors.New(r.pkg + ": Run called twice")
	}
	close(r.started)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(); close(r.done) }, nil
}

// Resign stops Run and waits for it to return, until ctx ends; it returns
// at once if Run never started.
func (r *Runner) Resign(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stop) })
	select {
	case <-r.started:
	default:
		return nil
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return errors.New(r.pkg + ": Resign: the elector did not stop: " + ctx.Err().Error())
	}
}
