package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/simba-go/simba"
)

// Option configures [Load], [LoadFile], [Start] and [Run]; each option says
// which of them it affects. Options refuse bad values: the function given one returns
// an error wrapping [ErrInvalidValue].
type Option func(*options) error

type options struct {
	logger    *slog.Logger
	lookupEnv func(string) (string, bool)
	taskOpts  []simba.TaskOption
	groupOpts []simba.GroupOption
	registry  *Registry     // for Load and LoadFile; nil: no handler checks
	commands  commandRunner // nil: command jobs are refused
	// shutdownTimeout bounds Run's wait for the jobs to stop; 0: no bound.
	shutdownTimeout time.Duration
}

// buildOptions applies opts over the defaults.
func buildOptions(opts []Option) (options, error) {
	o := options{
		logger:    slog.Default(),
		lookupEnv: os.LookupEnv,
	}
	for _, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("%w: nil Option", ErrInvalidValue)
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// WithLogger sets the logger [Start] and [Run] report to: jobs started and
// stopped, scheduling disabled, the [Warnings] (default: [slog.Default]
// when the options are applied; slog.New(slog.DiscardHandler) logs
// nothing). [Load] and [LoadFile] given [WithRegistry] log the warnings to
// it too.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidValue)
		}
		o.logger = l
		return nil
	}
}

// WithLookupEnv sets how environment variables are read (default
// os.LookupEnv): by [Load] and [LoadFile] for placeholders, by [Start] and
// [Run] for [EnabledEnv]. Tests use it to give an environment of their own.
func WithLookupEnv(lookup func(name string) (value string, ok bool)) Option {
	return func(o *options) error {
		if lookup == nil {
			return fmt.Errorf("%w: nil lookup function", ErrInvalidValue)
		}
		o.lookupEnv = lookup
		return nil
	}
}

// WithTaskOptions passes opts to every job [Start] and [Run] start (for
// example [simba.WithExecutor]). By default none are passed.
func WithTaskOptions(opts ...simba.TaskOption) Option {
	return func(o *options) error {
		o.taskOpts = append(o.taskOpts, opts...)
		return nil
	}
}

// WithGroupOptions passes opts to every partitioned job [Start] and [Run]
// start (for example [simba.WithAssignment]; every member of a group must
// use the same). By default none are passed.
func WithGroupOptions(opts ...simba.GroupOption) Option {
	return func(o *options) error {
		o.groupOpts = append(o.groupOpts, opts...)
		return nil
	}
}

// WithRegistry makes [Load] and [LoadFile] check the configuration against
// reg's handlers as well, so that every problem of a file is reported in one
// round: unknown keys, bad values and durations, bad cron expressions, jobs
// whose handler is not registered, and the problems of registration, each
// with its line. The [Warnings] (handlers no job uses) are logged at Warn to
// the logger of [WithLogger], not returned as errors. Start and Run ignore
// this option: they check their own registry.
func WithRegistry(reg *Registry) Option {
	return func(o *options) error {
		if reg == nil {
			return fmt.Errorf("%w: nil registry", ErrInvalidValue)
		}
		o.registry = reg
		return nil
	}
}

// CommandRun is one planned run of a job that has a Command, as the
// function given to [WithCommandRunner] receives it.
type CommandRun struct {
	// Job is the scheduled job's name, or the partitioned job's group.
	Job string
	// Command is the job's command line, placeholders resolved: the program
	// and its arguments. It is a copy of the job's, made for this run.
	Command []string
	// Partitioned reports a partitioned job's run, and Partition is then
	// the partition it runs for.
	Partitioned bool
	Partition   Partition
	// ProgressTimeout is the job's progressTimeout (0: none): the term
	// ends when its run shows no progress for that long. A runner given
	// one calls term.Progress() whenever the command shows signs of life
	// (`simba run --jobs` does on each line of its output).
	ProgressTimeout time.Duration
}

// WithCommandRunner makes [Start] and [Run] run the jobs that have a
// Command: run is called once per planned run, as a registered handler
// would be, with the run's term and the job's command line; it starts the
// command, ends it when ctx ends, and returns its outcome. A scheduled job's
// runs are those of [simba.Election.Schedule], a partitioned job's those of
// [simba.Group.Schedule], one per partition this node holds, with
// CommandRun.Partition set. As for a handler, an error or a panic is logged
// and published as a failed run, and an error wrapping [simba.ErrYield]
// gives the lease up; run should return as soon as ctx ends, and by the
// term's deadline (term.Deadline()) at the latest. Without this option
// Start and Run refuse a configuration with such jobs, before starting
// anything. `simba run --jobs FILE` is such a runner. A later
// WithCommandRunner replaces an earlier one.
func WithCommandRunner(run func(ctx context.Context, term *simba.Term, r CommandRun) error) Option {
	return func(o *options) error {
		if run == nil {
			return fmt.Errorf("%w: nil command runner", ErrInvalidValue)
		}
		o.commands = run
		return nil
	}
}

// WithShutdownTimeout bounds how long [Run] waits, once its ctx has ended,
// for the jobs to stop (default: no bound, as [Jobs.Close]). Past d, Run
// returns an error wrapping [context.DeadlineExceeded] that names the jobs
// still stopping (a handler that ignores the cancellation of its ctx keeps
// its job stopping until it returns), and the stop goes on in the
// background. d must be positive. [Start] ignores this option: bound
// [Jobs.Shutdown] with its ctx.
func WithShutdownTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: shutdown timeout %v: must be positive", ErrInvalidValue, d)
		}
		o.shutdownTimeout = d
		return nil
	}
}
