package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"github.com/simba-go/simba"
)

// Run runs the jobs of cfg with the handlers of reg on client, for as long
// as ctx lasts, in the seed's order:
//
//  1. It checks cfg and reg with [Validate] and returns every problem, before
//     anything starts; it logs each of the [Warnings] at Warn. Without
//     [WithCommandRunner], a job with a Command is a problem too (wrapping
//     [ErrNoHandler]): nothing would run it.
//  2. If scheduling is disabled ([EnabledEnv] when set, else
//     Config.Disabled), it logs so, starts nothing and returns nil when ctx
//     ends.
//  3. It waits until the client's session is ready ([simba.Client.Ready]).
//     If ctx ends first, it returns nil, having started nothing.
//  4. It starts every job: each scheduled job as an election on its
//     schedule, each partitioned job as a partition group; a job with a
//     Command calls the function of [WithCommandRunner] where a handler
//     would run. If one fails to start (for example with
//     [simba.ErrAlreadyStarted], because the election was started on the
//     client by other code), it stops those already started, waits for
//     their hand-offs and returns the error.
//  5. When ctx ends it stops every job and waits until each has handed off
//     (its runs exited, its leases released), then returns nil. The caller
//     closes the client after Run returns: jobs first, then the session.
//
// If the client is closed while the jobs run, their tasks end with it; Run
// then stops the others and returns an error wrapping [simba.ErrClosed].
// A handler that ignores the cancellation of its ctx delays Run's return by at
// most its term's remaining time. A nil reg is an empty [Registry].
func Run(ctx context.Context, client *simba.Client, reg *Registry, cfg Config, opts ...Option) error {
	o, err := buildOptions(opts)
	if err != nil {
		return err
	}
	if client == nil {
		return fmt.Errorf("%w: nil client", ErrInvalidValue)
	}
	if reg == nil {
		reg = new(Registry)
	}
	hs := reg.snapshot()
	if err := validate(hs, cfg, o.commands != nil); err != nil {
		return err
	}
	log := o.logger
	for _, w := range warnings(hs, cfg) {
		log.Warn("job configuration", "warning", w.Error())
	}
	enabled, by, err := schedulingEnabled(cfg, o.lookupEnv)
	if err != nil {
		return err
	}
	if !enabled {
		log.Info("scheduling disabled; no job started", "by", by)
		<-ctx.Done()
		return nil
	}
	log.Debug("waiting for the client's session", "jobs", len(cfg.Scheduled)+len(cfg.Partitioned))
	if err := client.Ready(ctx); err != nil {
		if ctx.Err() != nil {
			log.Info("stopped before the session was ready; no job started")
			return nil
		}
		return fmt.Errorf("%swait for the client's session: %w", prefix, err)
	}
	started, err := start(client, hs, cfg, o)
	if err != nil {
		stopAll(started)
		log.Error("a job failed to start; the others were stopped", "err", err)
		return err
	}
	log.Info("jobs started", "scheduled", len(cfg.Scheduled), "partitioned", len(cfg.Partitioned))

	err = waitEnd(ctx, started)
	stopAll(started)
	log.Info("jobs stopped; every hand-off complete")
	return err
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

// task is what LeaderTask and GroupTask have in common.
type task interface {
	Stop() <-chan struct{}
	Done() <-chan struct{}
}

// started is one job started by Run.
type started struct {
	label string // "scheduled job \"report\""
	task  task
}

// start starts every job of cfg, in order; on error it returns the jobs
// started so far with it.
func start(client *simba.Client, hs handlers, cfg Config, o options) ([]started, error) {
	var out []started
	for _, j := range cfg.Scheduled {
		h, _ := handlerName(j.Name, j.Handler)
		s := j.timing().schedule()
		label := kindScheduled + " " + quote(j.Name)
		fn, runs := hs.byName[h].scheduled, slog.String("handler", h)
		if len(j.Command) > 0 {
			fn, runs = scheduledCommand(o.commands, j.Name, j.Command), slog.Any("command", j.Command)
		}
		t, err := client.Election(j.Name).Schedule(s, fn, o.taskOpts...)
		if err != nil {
			return out, fmt.Errorf("%sstart %s: %w", prefix, label, err)
		}
		o.logger.Info("job started", "job", j.Name, runs, "schedule", s.String())
		out = append(out, started{label, t})
	}
	for _, j := range cfg.Partitioned {
		h, _ := handlerName(j.Group, j.Handler)
		s := j.timing().schedule()
		label := kindPartitioned + " " + quote(j.Group)
		fn, runs := hs.byName[h].partitioned, slog.String("handler", h)
		if len(j.Command) > 0 {
			fn, runs = partitionedCommand(o.commands, j.Group, j.Command), slog.Any("command", j.Command)
		}
		params := j.Params
		t, err := client.Group(j.Group, j.Partitions, o.groupOpts...).Schedule(s,
			func(ctx context.Context, term *simba.Term, p int) error {
				return fn(ctx, term, Partition{Index: p, Param: params[p]})
			}, o.taskOpts...)
		if err != nil {
			return out, fmt.Errorf("%sstart %s: %w", prefix, label, err)
		}
		o.logger.Info("job started", "group", j.Group, "partitions", j.Partitions, runs, "schedule", s.String())
		out = append(out, started{label, t})
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

// waitEnd waits until ctx ends, or until a job's task ends by itself, which
// only the closing of the client does.
func waitEnd(ctx context.Context, jobs []started) error {
	if len(jobs) == 0 {
		<-ctx.Done()
		return nil
	}
	ended := make(chan string, len(jobs))
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			select {
			case <-j.task.Done():
				ended <- j.label
			case <-quit:
			}
		})
	}
	defer wg.Wait()
	defer close(quit)
	select {
	case <-ctx.Done():
		return nil
	case label := <-ended:
		return fmt.Errorf("%s%s ended without being stopped: %w", prefix, label, simba.ErrClosed)
	}
}

// stopAll stops every job at once and waits until each has handed off.
func stopAll(jobs []started) {
	for _, j := range jobs {
		j.task.Stop()
	}
	for _, j := range jobs {
		<-j.task.Done()
	}
}
