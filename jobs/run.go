package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/simba-go/simba"
)

// Start starts the jobs of cfg with the handlers of reg on client, and
// returns at once, with the handle that stops them:
//
//  1. It checks cfg and reg with [Validate] and returns every problem, before
//     anything starts; it logs each of the [Warnings] at Warn. Without
//     [WithCommandRunner], a job with a Command is a problem too (wrapping
//     [ErrNoHandler]): nothing would run it.
//  2. If scheduling is disabled ([EnabledEnv] when set, else
//     Config.Disabled), it logs so and starts nothing; the handle it returns
//     stops at once when stopped.
//  3. It starts every job: each scheduled job as an election on its
//     schedule, each partitioned job as a partition group; a job with a
//     Command calls the function of [WithCommandRunner] where a handler
//     would run. The jobs contend for their leases in the background, as
//     every task of the client does: no job runs before the client's session
//     is ready. If one fails to start (for example with
//     [simba.ErrAlreadyStarted], because the election was started on the
//     client by other code), Start stops those already started, waits until
//     they have stopped, and returns the error.
//
// Stop the jobs with the handle (see [Jobs]) before closing the client:
// jobs first, then the session, so that another node takes every job over
// at once instead of after a TTL. [Run] does all of it for as long as a ctx
// lasts. A nil reg is an empty [Registry].
func Start(client *simba.Client, reg *Registry, cfg Config, opts ...Option) (*Jobs, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidValue)
	}
	if reg == nil {
		reg = new(Registry)
	}
	hs := reg.snapshot()
	if err := validate(hs, cfg, o.commands != nil); err != nil {
		return nil, err
	}
	log := o.logger
	for _, w := range warnings(hs, cfg) {
		log.Warn("job configuration", "warning", w.Error())
	}
	enabled, by, err := schedulingEnabled(cfg, o.lookupEnv)
	if err != nil {
		return nil, err
	}
	j := &Jobs{log: log, stopping: make(chan struct{}), done: make(chan struct{})}
	if !enabled {
		log.Info("scheduling disabled; no job started", "by", by)
	} else {
		j.jobs, err = j.start(client, hs, cfg, o)
		if err != nil {
			j.stopAll()
			log.Error("a job failed to start; the others were stopped", "err", err)
			return nil, err
		}
		log.Info("jobs started", "scheduled", len(cfg.Scheduled), "partitioned", len(cfg.Partitioned))
	}
	go j.own()
	return j, nil
}

// Run runs the jobs of cfg with the handlers of reg on client for as long
// as ctx lasts: it calls [Start], waits until ctx ends, then stops the jobs
// and waits until they have stopped, as [Jobs.Shutdown] does, before it
// returns nil. The caller closes the client after Run returns: jobs first,
// then the session.
//
// Run returns the errors of Start at once. When scheduling is disabled, it
// starts nothing and returns nil when ctx ends. If the client is closed
// while the jobs run, their tasks end with it; Run then stops the others and
// returns an error wrapping [simba.ErrClosed].
//
// Once ctx has ended, Run waits for the jobs without bound by default: a
// handler that ignores the cancellation of its ctx keeps Run waiting until
// it returns. [WithShutdownTimeout] bounds that wait; past it, Run returns
// the error of Jobs.Shutdown, which wraps [context.DeadlineExceeded] and
// names the jobs still stopping, while the stop goes on in the background.
// For any other bound, call Start and [Jobs.Shutdown].
func Run(ctx context.Context, client *simba.Client, reg *Registry, cfg Config, opts ...Option) error {
	o, err := buildOptions(opts)
	if err != nil {
		return err
	}
	j, err := Start(client, reg, cfg, opts...)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-j.done:
	}
	sctx := context.Background()
	if o.shutdownTimeout > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(sctx, o.shutdownTimeout)
		defer cancel()
	}
	if err := j.Shutdown(sctx); err != nil {
		return err
	}
	if j.ended != "" {
		return fmt.Errorf("%s%s ended without being stopped: %w", prefix, j.ended, simba.ErrClosed)
	}
	return nil
}

// Jobs is the handle of the jobs [Start] started. It follows the lifecycle
// of [simba.Client]: [Jobs.Stop] begins stopping every job and returns at
// once, from a handler too; [Jobs.Done] is closed once every job has
// stopped; [Jobs.Shutdown] waits for it within a ctx, and [Jobs.Close]
// without bound (never from a handler of the jobs). A job has stopped when
// its runs have returned and its leases are released: its election or group
// may then be started again on the client.
//
// A Jobs is safe for concurrent use by multiple goroutines.
type Jobs struct {
	log  *slog.Logger
	jobs []started

	stopOnce sync.Once
	stopping chan struct{} // closed by Stop
	done     chan struct{} // closed when every job has stopped
	ended    string        // the job whose task ended by itself, if any; set before done is closed
}

// jobsKey is the key of the [Jobs] in the ctx of its handlers' runs, which
// lets Shutdown tell them from the rest.
type jobsKey struct{}

// started is one job started by Start.
type started struct {
	label   string        // "scheduled job \"report\""
	stop    func()        // the task's Stop
	task    task          // the task
	stopped chan struct{} // closed once the task has stopped
}

// task is what LeaderTask and GroupTask have in common, besides Stop.
type task interface {
	Done() <-chan struct{}
	Shutdown(ctx context.Context) error
}

// Stop begins stopping every job and returns at once: each job's term ends,
// its runs' ctx is cancelled, and its leases are released once its runs
// have returned. [Jobs.Done] tells when all of it is over. Stop is
// idempotent and safe to call from anywhere, from a handler of the jobs
// too: it is how a handler stops them.
func (j *Jobs) Stop() {
	j.stopOnce.Do(func() { close(j.stopping) })
}

// Done is closed once every job has stopped (every run returned, every
// lease released) and every goroutine of the handle has ended: at the
// moment [Jobs.Shutdown] returns nil. The jobs also stop by themselves when
// the client closes, which ends their tasks.
func (j *Jobs) Done() <-chan struct{} { return j.done }

// Shutdown stops the jobs like [Jobs.Stop] and waits for [Jobs.Done], at
// most until ctx ends, as the lifecycle of [simba.Client] says. It returns
// nil once every job has stopped. If ctx ends first, it returns an error
// that wraps ctx.Err() and names the jobs still stopping; the stop goes on
// in the background, and no lease is released before its runs have
// returned or its term's deadline has passed.
//
// Given the ctx of a run of the jobs' handlers (or of the command runner),
// or a ctx derived from it, Shutdown cannot wait for the run that called
// it: it begins the stop, as Stop does, and returns an error at once
// instead of waiting. Call Stop there.
//
// Shutdown is safe to call several times and concurrently with Stop and
// Close. Shut the jobs down before closing their client.
func (j *Jobs) Shutdown(ctx context.Context) error {
	j.Stop()
	if own, _ := ctx.Value(jobsKey{}).(*Jobs); own == j {
		return fmt.Errorf("%sshutdown called with the ctx of a run of the jobs' own handlers: it cannot wait for itself, so it only began the stop (a handler stops the jobs with Stop)", prefix)
	}
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-j.done: // done wins over an ended ctx
		return nil
	default:
	}
	var pending []string
	for _, s := range j.jobs {
		select {
		case <-s.stopped:
		default:
			pending = append(pending, s.label)
		}
	}
	what := "the stop under way"
	switch len(pending) {
	case 0:
	case 1:
		what = pending[0] + " still stopping"
	default:
		what = fmt.Sprintf("%d jobs still stopping (%s)", len(pending), strings.Join(pending, ", "))
	}
	return fmt.Errorf("%sshutdown stopped waiting with %s; the stop goes on in the background: %w", prefix, what, ctx.Err())
}

// Close is Shutdown(context.Background()): it stops the jobs and waits
// until every one has stopped, without bound. It must not be called from a
// handler of the jobs: it would wait for the very run that called it,
// forever, as [net/http.Server.Shutdown] called from an HTTP handler does.
// Call [Jobs.Stop] there.
func (j *Jobs) Close() error {
	return j.Shutdown(context.Background())
}

// own stops the jobs when Stop is called or a job's task ends by itself
// (only the closing of the client does that), and closes done once every
// job has stopped.
func (j *Jobs) own() {
	j.ended = j.waitEnd()
	if j.ended != "" {
		j.log.Warn("a job ended without being stopped: stopping the others", "job", j.ended)
	}
	j.stopAll()
	if len(j.jobs) > 0 {
		j.log.Info("jobs stopped; every hand-off complete")
	}
	close(j.done)
}

// schedulingEnabled applies the switch: the environment wins over cfg.
func schedulingEnabled(cfg Config, lookup func(string) (string, bool)) (enabled bool, by string, err error) {
	if v, ok := lookup(EnabledEnv); ok {
		b, perr := strconv.ParseBool(v)
		if perr != nil {
			return false, "", &ConfigError{Errs: []error{&FieldError{Key: EnabledEnv, Err: fmt.Errorf("%w: environment value %s is not true or false", ErrInvalidValue, quote(v))}}}
		}
		return b, "environment " + EnabledEnv + "=" + v, nil
	}
	return !cfg.Disabled, "configuration scheduling.enabled=" + strconv.FormatBool(!cfg.Disabled), nil
}

// start starts every job of cfg, in order, their runs' ctx carrying j; on
// error it returns the jobs started so far with it.
func (j *Jobs) start(client *simba.Client, hs handlers, cfg Config, o options) ([]started, error) {
	var out []started
	for _, job := range cfg.Scheduled {
		h, _ := handlerName(job.Name, job.Handler)
		s := job.timing().schedule()
		label := kindScheduled + " " + quote(job.Name)
		fn, runs := hs.byName[h].scheduled, slog.String("handler", h)
		if len(job.Command) > 0 {
			fn, runs = scheduledCommand(o.commands, job.Name, job.Command), slog.Any("command", job.Command)
		}
		t, err := client.Election(job.Name).Schedule(s, func(ctx context.Context, term *simba.Term) error {
			return fn(context.WithValue(ctx, jobsKey{}, j), term)
		}, o.taskOpts...)
		if err != nil {
			return out, fmt.Errorf("%sstart %s: %w", prefix, label, err)
		}
		o.logger.Info("job started", "job", job.Name, runs, "schedule", s.String())
		out = append(out, started{label: label, stop: func() { t.Stop() }, task: t, stopped: make(chan struct{})})
	}
	for _, job := range cfg.Partitioned {
		h, _ := handlerName(job.Group, job.Handler)
		s := job.timing().schedule()
		label := kindPartitioned + " " + quote(job.Group)
		fn, runs := hs.byName[h].partitioned, slog.String("handler", h)
		if len(job.Command) > 0 {
			fn, runs = partitionedCommand(o.commands, job.Group, job.Command), slog.Any("command", job.Command)
		}
		params := job.Params
		t, err := client.Group(job.Group, job.Partitions, o.groupOpts...).Schedule(s,
			func(ctx context.Context, term *simba.Term, p int) error {
				return fn(context.WithValue(ctx, jobsKey{}, j), term, Partition{Index: p, Param: params[p]})
			}, o.taskOpts...)
		if err != nil {
			return out, fmt.Errorf("%sstart %s: %w", prefix, label, err)
		}
		o.logger.Info("job started", "group", job.Group, "partitions", job.Partitions, runs, "schedule", s.String())
		out = append(out, started{label: label, stop: func() { t.Stop() }, task: t, stopped: make(chan struct{})})
	}
	return out, nil
}

// commandRunner is the function of WithCommandRunner.
type commandRunner = func(ctx context.Context, term *simba.Term, r CommandRun) error

// scheduledCommand is the run of a scheduled job with a command: the
// runner, called with a copy of the command line, so that neither what a
// call does to it nor what the caller of Run does to the Config changes the
// next call's.
func scheduledCommand(run commandRunner, job string, cmd []string) func(context.Context, *simba.Term) error {
	cmd = slices.Clone(cmd)
	return func(ctx context.Context, term *simba.Term) error {
		return run(ctx, term, CommandRun{Job: job, Command: slices.Clone(cmd)})
	}
}

// partitionedCommand is scheduledCommand for a partitioned job.
func partitionedCommand(run commandRunner, group string, cmd []string) func(context.Context, *simba.Term, Partition) error {
	cmd = slices.Clone(cmd)
	return func(ctx context.Context, term *simba.Term, p Partition) error {
		return run(ctx, term, CommandRun{Job: group, Command: slices.Clone(cmd), Partitioned: true, Partition: p})
	}
}

// schedule is the simba.Schedule of a checked timing.
func (t timing) schedule() simba.Schedule {
	var s simba.Schedule
	switch {
	case t.delay != 0:
		s = simba.FixedDelay(t.delay)
	case t.rate != 0:
		s = simba.FixedRate(t.rate)
	default:
		s = simba.Cron(t.cron)
	}
	return s.WithInitialDelay(t.initial).WithMisfire(t.misfire)
}

// waitEnd waits until Stop is called, or until a job's task ends by itself,
// which only the closing of the client does; it returns that job's label,
// or "" after Stop.
func (j *Jobs) waitEnd() string {
	if len(j.jobs) == 0 {
		<-j.stopping
		return ""
	}
	ended := make(chan string, len(j.jobs))
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range j.jobs {
		wg.Go(func() {
			select {
			case <-s.task.Done():
				ended <- s.label
			case <-quit:
			}
		})
	}
	defer wg.Wait()
	defer close(quit)
	select {
	case <-j.stopping:
		return ""
	case label := <-ended:
		return label
	}
}

// stopAll stops every job at once and waits until each has stopped: its
// runs returned and its leases released.
func (j *Jobs) stopAll() {
	for _, s := range j.jobs {
		s.stop()
	}
	var wg sync.WaitGroup
	for _, s := range j.jobs {
		wg.Go(func() {
			s.task.Shutdown(context.Background())
			close(s.stopped)
		})
	}
	wg.Wait()
}
