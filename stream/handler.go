package stream

import (
	"context"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/kit/backoff"
)

// Handler processes the messages of one partition in one term. A [Task]
// gets a new Handler from its handler function for every term of every
// partition, so a handler may keep per-partition state in its fields: with
// the default [WithMaxConcurrency] of 1 the loop calls it from one call at a
// time, and every call, Window and checkpoint happens before the next (see
// the package documentation for the exact guarantees).
//
// A Handler may also implement [Initializer], [Windower] and [Closer]. The
// ctx of its calls carries the term's [Coordinator] (see [CoordinatorFrom]),
// through which it can ask for a checkpoint now or for a hand-off.
type Handler interface {
	// Process handles msg. A nil error marks the message processed: a
	// checkpoint may then cover it, so Process returns only once its
	// effects are where they must be (written, sent, acknowledged). Write
	// them fenced by term.Token() where the sink can check it.
	//
	// ctx ends when the term ends, at the hand-off's bound, or at the
	// call's timeout ([WithCallTimeout]). An error, a panic or a timeout
	// fails the partition on this node: the message is not marked
	// processed, and the partition's next owner processes it again (see
	// [PartitionError]). Use [OnError] to decide otherwise per message.
	Process(ctx context.Context, term *simba.Term, msg Message) error
}

// HandlerFunc adapts a function to [Handler].
type HandlerFunc func(ctx context.Context, term *simba.Term, msg Message) error

// Process calls f.
func (f HandlerFunc) Process(ctx context.Context, term *simba.Term, msg Message) error {
	return f(ctx, term, msg)
}

// Initializer is implemented by a [Handler] that prepares itself before its
// term's first message (Samza's InitableTask).
type Initializer interface {
	// Init runs once per term, after the checkpoint is loaded and before
	// the first Process call. An error fails the partition on this node.
	Init(ctx context.Context, term *simba.Term) error
}

// Windower is implemented by a [Handler] that wants a periodic callback
// (Samza's WindowableTask), for example to emit aggregates. Window is called
// every [WithWindow] interval, only when no Process call is pending, and no
// Process call starts until it returns. Without WithWindow it is never
// called.
type Windower interface {
	// Window runs the periodic work. An error, a panic or a timeout fails
	// the partition on this node, like a failed Process call.
	Window(ctx context.Context, term *simba.Term) error
}

// Closer is implemented by a [Handler] that releases what it holds at the
// end of its term (Samza's ClosableTask).
type Closer interface {
	// Close runs once per term in which Init succeeded (or that had no
	// Init), after the final checkpoint: no Process or Window call of the
	// term is pending, except calls abandoned at the hand-off's bound. Its
	// error is logged. Its ctx ends at the term's deadline (the last one
	// seen while the term was valid).
	Close(ctx context.Context, term *simba.Term) error
}

// Wrapper wraps a [Handler] with shared logic (error handling, retries,
// metrics, tracing): middleware. A wrapper sees only Process; the optional
// [Initializer], [Windower] and [Closer] are found on the handler the handler
// function returned, whatever the wrappers. A Wrapper is called for every
// term of every partition, and once by [WithWrappers] to check it: it
// should only build the handler it returns.
type Wrapper func(Handler) Handler

// Chain returns h wrapped by ws, the first outermost: Chain(h, a, b) is
// a(b(h)).
func Chain(h Handler, ws ...Wrapper) Handler {
	for i := len(ws) - 1; i >= 0; i-- {
		h = ws[i](h)
	}
	return h
}

// refused is the handler of a Wrapper made with bad arguments: its Process
// returns the error, and [WithWrappers] refuses the wrapper with it.
type refused struct{ err error }

func (r refused) Process(context.Context, *simba.Term, Message) error { return r.err }

// refuse returns a Wrapper made with bad arguments: [WithWrappers] refuses
// it with an error matching [simba.ErrInvalidArgument], and a handler it
// wraps anyway (through [Chain]) fails every Process call with that error.
func refuse(format string, args ...any) Wrapper {
	err := invalid(format, args...)
	return func(Handler) Handler { return refused{err} }
}

// refusal returns the error of a wrapper made with bad arguments, or nil.
// It calls w once, on a handler that does nothing; a wrapper that panics
// there is left for the loop to find.
func refusal(w Wrapper) (err error) {
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	if r, ok := w(HandlerFunc(func(context.Context, *simba.Term, Message) error { return nil })).(refused); ok {
		return r.err
	}
	return nil
}

// OnError returns a Wrapper that calls f when Process fails (an error, not a
// panic), and returns what f returns instead: nil marks the message processed
// (skipped, sent to a dead-letter queue, logged), an error still fails the
// partition. f is not called for failures after the term ended (ctx done).
// A nil f makes a wrapper that [WithWrappers] refuses with an error matching
// [simba.ErrInvalidArgument].
func OnError(f func(ctx context.Context, term *simba.Term, msg Message, err error) error) Wrapper {
	if f == nil {
		return refuse("OnError: nil function")
	}
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, term *simba.Term, msg Message) error {
			err := next.Process(ctx, term, msg)
			if err == nil || ctx.Err() != nil {
				return err
			}
			return f(ctx, term, msg, err)
		})
	}
}

// Retry returns a Wrapper that calls Process up to attempts times while it
// fails, waiting delay after the first failure and twice as long after each
// next one. It stops early when ctx ends, and returns the last error.
// attempts < 1 or delay < 0 make a wrapper that [WithWrappers] refuses with
// an error matching [simba.ErrInvalidArgument]. Mind [WithCallTimeout]: the
// attempts and waits together make one call.
func Retry(attempts int, delay time.Duration) Wrapper {
	if attempts < 1 || delay < 0 {
		return refuse("Retry(%d, %v): want attempts ≥ 1 and delay ≥ 0", attempts, delay)
	}
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, term *simba.Term, msg Message) error {
			wait := delay
			for i := 1; ; i++ {
				err := next.Process(ctx, term, msg)
				if err == nil || i == attempts || ctx.Err() != nil {
					return err
				}
				if !backoff.Sleep(ctx, wait) {
					return err
				}
				wait *= 2
			}
		})
	}
}

// Observe returns a Wrapper that calls f after every Process call with the
// message, how long the call took and what it returned (after the wrappers
// inside it): a hook for metrics and traces. f runs on the call's goroutine
// and delays the call's completion; keep it short. A nil f makes a wrapper
// that [WithWrappers] refuses with an error matching
// [simba.ErrInvalidArgument].
func Observe(f func(msg Message, took time.Duration, err error)) Wrapper {
	if f == nil {
		return refuse("Observe: nil function")
	}
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, term *simba.Term, msg Message) error {
			start := time.Now()
			err := next.Process(ctx, term, msg)
			f(msg, time.Since(start), err)
			return err
		})
	}
}
