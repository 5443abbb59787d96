package limit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrNotSent is matched by the error of Take and TakeUntil when they end
// without a slot: the request was never sent, so it cannot have taken
// effect.
var ErrNotSent = errors.New("simba/limit: not sent: no request slot came free in time")

// Limiter bounds the requests in flight to its slots. Make it with New. A
// Limiter is safe for concurrent use.
type Limiter struct {
	slots   chan struct{}
	waiting atomic.Int64 // callers of Take waiting for a slot now
}

// New returns a Limiter of n slots; n must be positive.
func New(n int) (*Limiter, error) {
	if n <= 0 {
		return nil, fmt.Errorf("simba/limit: the number of slots must be positive, got %d", n)
	}
	return &Limiter{slots: make(chan struct{}, n)}, nil
}

// Cap returns the number of slots.
func (l *Limiter) Cap() int { return cap(l.slots) }

// InUse returns the number of slots taken now.
func (l *Limiter) InUse() int { return len(l.slots) }

// Waiting returns the number of callers of Take and TakeUntil waiting for
// a slot now.
func (l *Limiter) Waiting() int { return int(l.waiting.Load()) }

// Take waits for a slot until ctx ends. It returns nil with a slot taken,
// which the caller gives back with Free once its request is answered; or,
// when ctx ended first (or as the slot came: the request is then not sent
// either), an error wrapping ctx's error, its cause if it has another, and
// ErrNotSent.
func (l *Limiter) Take(ctx context.Context) error {
	return l.take(ctx, nil)
}

// TakeUntil is Take, which also gives up when stop ends: the context of
// what the request belongs to (a session, a view, the backend), which may
// end before the caller's ctx. Its error then wraps stop's error (and
// cause) and ErrNotSent.
func (l *Limiter) TakeUntil(ctx, stop context.Context) error {
	return l.take(ctx, stop)
}

// take is Take, and TakeUntil when stop is not nil.
func (l *Limiter) take(ctx, stop context.Context) error {
	select {
	case l.slots <- struct{}{}:
	default:
		var stopped <-chan struct{} // nil: never ready
		if stop != nil {
			stopped = stop.Done()
		}
		l.waiting.Add(1)
		select {
		case l.slots <- struct{}{}:
			l.waiting.Add(-1)
		case <-ctx.Done():
			l.waiting.Add(-1)
			return notSent(ctx)
		case <-stopped:
			l.waiting.Add(-1)
			return notSent(stop)
		}
	}
	if ctx.Err() != nil {
		l.Free() // ended as the slot came: send nothing
		return notSent(ctx)
	}
	return nil
}

// notSent is the error of a request given up because ctx ended.
func notSent(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return fmt.Errorf("%w (%w)", err, ErrNotSent)
	}
	return fmt.Errorf("%w: %w (%w)", err, cause, ErrNotSent)
}

// TryTake takes a slot if one is free now, and reports whether it did; the
// caller then frees it with Free.
func (l *Limiter) TryTake() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// Free gives back a slot taken by Take, TakeUntil or TryTake. Free with no
// slot taken does nothing.
func (l *Limiter) Free() {
	select {
	case <-l.slots:
	default:
	}
}

// Do runs f, a request, with a slot taken by Take, and frees the slot when
// f returns; when no slot came before ctx ended, it returns Take's error
// and does not run f.
func Do[T any](ctx context.Context, l *Limiter, f func() (T, error)) (T, error) {
	if err := l.Take(ctx); err != nil {
		var zero T
		return zero, err
	}
	defer l.Free()
	return f()
}
