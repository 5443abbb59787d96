package simba

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/simba-go/simba/internal/plant"

	"github.com/simba-go/simba/backend"
)

// Option configures a [Client]. Options refuse bad values: [New] returns an
// error matching [ErrInvalidArgument] instead of silently correcting them.
type Option func(*options) error

type options struct {
	memberID string
	noStatus bool
	ttl      time.Duration
	margin   time.Duration // < 0: default
	logger   *slog.Logger
	handlers []func(Event)

	meterProvider metric.MeterProvider
}

// Defaults, written once here and in each option's doc comment.
const (
	// DefaultTTL is the session TTL requested when [WithTTL] is not given.
	DefaultTTL = 10 * time.Second
	// MinTTL is the shortest session TTL: the shortest [WithTTL] accepts,
	// and the shortest granted TTL the client uses. Terms are renewed every
	// third of the TTL, and the default drift margin is 10% of it but at
	// least 100ms; at MinTTL the margin (100ms) is one renewal period, so a
	// renewal still has a whole period (100ms) to be confirmed before the
	// deadline. A shorter TTL would leave the margin below its minimum (it
	// is capped at half the TTL) or the renewals no time, and a TTL of
	// nanoseconds none at all.
	//
	// A session whose backend grants less than MinTTL (or a TTL that has
	// run out before Open returned) is not used: the client closes it, logs
	// an error and opens another after a backoff. A renewal granting less
	// than MinTTL is a failed renewal: logged, retried after a backoff, and
	// the session's deadline is not moved.
	MinTTL = 300 * time.Millisecond
	// minDefaultMargin is the smallest default drift margin.
	minDefaultMargin = 100 * time.Millisecond
)

func defaultOptions() options {
	return options{
		ttl:    DefaultTTL,
		margin: -1,
		logger: slog.Default(),
	}
}

// WithTTL sets the session TTL requested from the backend (default 10s, at
// least [MinTTL], 300ms). The backend may grant another (etcd raises small
// TTLs to its minimum, ZooKeeper negotiates); the client always uses the
// granted one. Terms are renewed every third of it, and a crashed node's
// leases are taken over about one TTL after its last renewal.
func WithTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < MinTTL {
			return fmt.Errorf("%w: TTL must be at least %v, got %v", ErrInvalidArgument, MinTTL, d)
		}
		o.ttl = d
		return nil
	}
}

// WithDriftMargin sets the margin subtracted from every session deadline to
// cover clock-rate differences between this process and the backend (default:
// 10% of the granted TTL, at least 100ms). The margin in use is never more than
// half the granted TTL. A margin of zero trusts both clocks to run at the same
// rate; do not use it in production.
func WithDriftMargin(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: drift margin must not be negative, got %v", ErrInvalidArgument, d)
		}
		o.margin = d
		return nil
	}
}

// WithLogger sets the logger of the client, and of its elections, groups
// and schedules (default: [slog.Default] when [New] is called, so that the
// program's own logging set-up applies). At Error: a run that failed (an
// error or a panic); at Warn: a lost session, a backend unreachable for
// longer than a TTL, and what else an operator must act on; at Info: terms
// won and revoked, sessions started, a backend reachable again; at Debug:
// every run completed, every failed renewal. Pass
// slog.New(slog.DiscardHandler) to log nothing.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidArgument)
		}
		o.logger = l
		return nil
	}
}

// WithEventHandler registers h for every event from the client's start, so
// that none is missed (see [Event]). It may be given several times.
func WithEventHandler(h func(Event)) Option {
	return func(o *options) error {
		if h == nil {
			return fmt.Errorf("%w: nil event handler", ErrInvalidArgument)
		}
		o.handlers = append(o.handlers, h)
		return nil
	}
}

// WithMemberID sets the identity this client has in partition groups
// (default: the ID of its current session). Partitions are assigned by member
// id, so a node that restarts with the same id gets its partitions back, and
// the others see no change in the view. Two live clients with the same id
// contend for the same partitions (the lease keeps them apart) and each
// reports a [GroupMismatch].
func WithMemberID(id string) Option {
	return func(o *options) error {
		if id == "" || len(id) > backend.MaxNameLen {
			return fmt.Errorf("%w: member id must be 1 to %d bytes, got %d", ErrInvalidArgument, backend.MaxNameLen, len(id))
		}
		o.memberID = id
		return nil
	}
}

// margin returns the drift margin for a granted TTL.
func (o *options) marginFor(granted time.Duration) time.Duration {
	m := o.margin
	if plant.Is(plant.NoMargin) {
		return 0
	}
	if m < 0 {
		m = max(granted/10, minDefaultMargin)
	}
	return min(m, granted/2)
}

// TaskOption configures one started election (RunWhileLeader or Schedule).
type TaskOption func(*taskOptions) error

type taskOptions struct {
	executor  func(f func())
	claim     func(context.Context, *Term) error
	onFailure func(context.Context, RunFailure)
	watchdog  time.Duration
}

// WithExecutor runs each term's function through e instead of on a new
// goroutine of the client's (by default each term's function runs on a new
// goroutine, which is also the only goroutine the held term costs). e must
// run f exactly once, eventually, on some goroutine; the task's and the
// client's Shutdown wait until f has returned.
func WithExecutor(e func(f func())) TaskOption {
	return func(o *taskOptions) error {
		if e == nil {
			return fmt.Errorf("%w: nil executor", ErrInvalidArgument)
		}
		o.executor = e
		return nil
	}
}

// WithClaim runs claim at the start of every term, before the task's
// function (before a schedule's first run; in a group, for every
// partition's term), and runs the function only once claim has returned
// nil. Use it to claim the fenced resources the task writes, with the
// term's token, before the task reads anything from them: the fence then
// orders every write of a deposed leader still in flight before the new
// leader's reads, or rejects it (Fence.Claim of packages fence/sqlfence,
// fence/redisfence and fence/etcdfence; docs/FENCING.md explains the
// window it closes):
//
//	simba.WithClaim(func(ctx context.Context, term *simba.Term) error {
//		return f.Claim(ctx, db, term.Name(), term.Token())
//	})
//
// claim gets the run's ctx, cancelled when the term ends. An error (or a
// panic) is logged and claim is tried again, with a backoff of up to a
// third of the TTL, until it succeeds or the term ends; the function does
// not run in a term whose claim never succeeded. An error wrapping
// [ErrYield] gives the lease up instead, as from the function itself.
func WithClaim(claim func(ctx context.Context, term *Term) error) TaskOption {
	return func(o *taskOptions) error {
		if claim == nil {
			return fmt.Errorf("%w: nil claim", ErrInvalidArgument)
		}
		o.claim = claim
		return nil
	}
}

// RunFailure describes a failed run, for the handler of
// [WithFailureHandler].
type RunFailure struct {
	TermRef
	Member   string            // the member that ran it
	Source   RunSource         // why it started
	Args     map[string]string // a trigger's arguments, if any
	Start    time.Time         // when its first attempt started
	Duration time.Duration     // from then to the end of its last attempt
	Attempts int               // how many attempts it made
	Err      error             // the last attempt's error
	// Failures is the number of failed runs in a row, this one included.
	Failures int
}

// WithFailureHandler calls h once per failed run (a run whose last attempt
// failed: see [RetryPolicy]), on the node that ran it, after the run ended,
// on a goroutine of the client's: never twice for one run, and never on
// another node after a hand-off. h gets a ctx that ends when the client
// closes; [Client.Shutdown] waits for it. Runs cancelled because their term
// ended are not failures.
func WithFailureHandler(h func(ctx context.Context, f RunFailure)) TaskOption {
	return func(o *taskOptions) error {
		if h == nil {
			return fmt.Errorf("%w: nil failure handler", ErrInvalidArgument)
		}
		o.onFailure = h
		return nil
	}
}

// WithProgressWatchdog gives up a term whose task stops making progress:
// while the task's function runs (each run, for a schedule), it must call
// [Term.Progress] at least once every limit; when limit passes without a
// call, the term ends ([RevokeStuck]: its ctx is cancelled, a [Revoked]
// event and a log say why), the lease is handed off, and the task sits out
// one lease term before contending again, so that another member takes
// over. Use it for long-running leader work that can hang (a stuck
// connection, a deadlock) rather than die. limit must be positive.
//
// The limit counts from the start of each run; between a schedule's runs,
// and after a RunWhileLeader function returned, the watchdog is off. When
// runs overlap, the progress of any of them counts for the term.
func WithProgressWatchdog(limit time.Duration) TaskOption {
	return func(o *taskOptions) error {
		if limit <= 0 {
			return fmt.Errorf("%w: progress watchdog limit must be positive, got %v", ErrInvalidArgument, limit)
		}
		o.watchdog = limit
		return nil
	}
}
