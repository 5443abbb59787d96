package stream

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/simba-go/simba"
)

// Defaults, written once here and in each option's doc comment.
const (
	// DefaultCommitInterval is the time between checkpoints when
	// [WithCommitInterval] is not given.
	DefaultCommitInterval = 5 * time.Second
	// DefaultPollInterval is the wait after an empty poll when
	// [WithPollInterval] is not given.
	DefaultPollInterval = 100 * time.Millisecond
)

// Option configures a [Task]. Options refuse bad values: [Start] returns an
// error matching [simba.ErrInvalidArgument] instead of correcting them.
type Option func(*options) error

type options struct {
	maxConcurrency int
	commitInterval time.Duration
	window         time.Duration // 0: no Window calls
	callTimeout    time.Duration // 0: none
	pollInterval   time.Duration
	startOffset    int64
	store          CheckpointStore
	wrappers       []Wrapper
	logger         *slog.Logger
}

// defaults returns the options before any Option is applied.
func defaults() options {
	return options{
		maxConcurrency: 1,
		commitInterval: DefaultCommitInterval,
		pollInterval:   DefaultPollInterval,
		store:          RecordStore{},
		logger:         slog.Default(),
	}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: stream: %s", simba.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// WithMaxConcurrency sets how many Process calls of one partition may be in
// flight at once (default 1, Samza's task.max.concurrency). With 1, messages
// are processed in offset order, each call finished before the next begins.
// With n > 1, up to n calls run at once, handed their messages in offset
// order but possibly finishing out of order; never more than n.
func WithMaxConcurrency(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return invalid("max concurrency %d: must be at least 1", n)
		}
		o.maxConcurrency = n
		return nil
	}
}

// WithCommitInterval sets the time between checkpoints of a partition
// (default 5s), counted from the end of the last one. A checkpoint is
// written only when it moved; a final one is written at hand-off. A shorter
// interval means fewer messages processed again after a crash, and more
// writes to the store.
func WithCommitInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalid("commit interval %v: must be positive", d)
		}
		o.commitInterval = d
		return nil
	}
}

// WithWindow makes the loop call Window, on handlers that implement
// [Windower], every d (default: never), counted from the end of the last
// Window call (or the start of the term).
func WithWindow(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalid("window interval %v: must be positive", d)
		}
		o.window = d
		return nil
	}
}

// WithCallTimeout bounds every Process and Window call (default: no bound).
// The call's ctx ends at the timeout; a call still running then (whether it
// returns later or not) fails its partition with an error matching
// [ErrTimeout]: the partition hands off and its next owner retries the
// message, while the node's other partitions go on. The hand-off waits for
// a call past its timeout at most until the term's deadline: a call that
// ignores its ctx is abandoned then and goes on running, its term over,
// until it returns; [Task.Close] waits for it.
func WithCallTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalid("call timeout %v: must be positive", d)
		}
		o.callTimeout = d
		return nil
	}
}

// WithPollInterval sets the wait after a poll that returned no messages
// (default 100ms).
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalid("poll interval %v: must be positive", d)
		}
		o.pollInterval = d
		return nil
	}
}

// WithStartOffset sets where a partition with no checkpoint starts (default
// 0).
func WithStartOffset(offset int64) Option {
	return func(o *options) error {
		if offset < 0 {
			return invalid("start offset %d: must not be negative", offset)
		}
		o.startOffset = offset
		return nil
	}
}

// WithCheckpointStore sets where checkpoints are kept (default
// [RecordStore]{}: the backend's records, written through the term).
func WithCheckpointStore(s CheckpointStore) Option {
	return func(o *options) error {
		if s == nil {
			return invalid("nil checkpoint store")
		}
		o.store = s
		return nil
	}
}

// WithWrappers wraps every handler's Process with ws, the first outermost
// (see [Chain]). It may be given several times; later wrappers go inside
// earlier ones. It refuses a nil wrapper and one that [OnError], [Retry] or
// [Observe] made from bad arguments; to find those it calls every wrapper
// once, on a handler that does nothing (a Wrapper should only build the
// handler it returns).
func WithWrappers(ws ...Wrapper) Option {
	return func(o *options) error {
		for i, w := range ws {
			if w == nil {
				return invalid("wrapper %d is nil", i)
			}
			if err := refusal(w); err != nil {
				return fmt.Errorf("%w (wrapper %d)", err, i)
			}
		}
		o.wrappers = append(o.wrappers, ws...)
		return nil
	}
}

// WithLogger sets the logger (default: [slog.Default] when the stream is
// started; slog.New(slog.DiscardHandler) logs nothing).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return invalid("nil logger")
		}
		o.logger = l
		return nil
	}
}
