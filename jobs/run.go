package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
	stopping := make(chan struct{})
	j := &Jobs{
		log: log, client: client, reg: reg, o: o, ns: newNotifications(stopping),
		stopping: stopping, ended: make(chan string, 1), done: make(chan struct{}),
	}
	if !enabled {
		log.Info("scheduling disabled; no job started", "by", by)
	} else {
		for _, w := range j.wanted(hs, cfg) {
			s, err := j.startJob(w)
			if err != nil {
				j.stopJobs(j.jobs)
				j.watchers.Wait()
				j.ns.close()
				log.Error("a job failed to start; the others were stopped", "err", err)
				return nil, err
			}
			j.jobs = append(j.jobs, s)
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
	if j.endedBy != "" {
		return fmt.Errorf("%s%s ended without being stopped: %w", prefix, j.endedBy, simba.ErrClosed)
	}
	return nil
}

// Jobs is the handle of the jobs [Start] started. It follows the lifecycle
// of [simba.Client]: [Jobs.Stop] begins stopping every job and returns at
// once, from a handler too; [Jobs.Done] is closed once every job has
// stopped; [Jobs.Shutdown] waits for it within a ctx, and [Jobs.Close]
// without bound (never from a handler of the jobs). A job has stopped when
// its runs have returned and its leases are released: its election or group
// may then be started again on the client. [Jobs.Update] adds, changes and
// removes jobs while they run.
//
// A Jobs is safe for concurrent use by multiple goroutines.
type Jobs struct {
	log    *slog.Logger
	client *simba.Client
	reg    *Registry
	o      options
	ns     *notifications // the failure notifications in flight

	// changing serialises Update and the final stop: whoever holds it
	// starts and stops jobs.
	changing sync.Mutex
	mu       sync.Mutex
	jobs     []*started // the jobs running, under mu

	stopOnce sync.Once
	stopping chan struct{}  // closed by Stop
	ended    chan string    // the first job whose task ended by itself
	watchers sync.WaitGroup // one per job started: see watch
	done     chan struct{}  // closed when every job has stopped
	endedBy  string         // the job whose task ended by itself, if any; set before done is closed
}

// jobsKey is the key of the [Jobs] in the ctx of its handlers' runs, which
// lets Shutdown tell them from the rest.
type jobsKey struct{}

// started is one job started by Start or Update.
type started struct {
	wanted                // what was started
	task    task          // the task
	quit    chan struct{} // closed when the job is stopped on purpose
	stopped chan struct{} // closed once the task has stopped
}

// task is what LeaderTask and GroupTask have in common.
type task interface {
	Stop()
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
// lease released), its failure notifications have ended, and every
// goroutine of the handle has ended: at the
// moment [Jobs.Shutdown] returns nil. The jobs also stop by themselves when
// the client closes, which ends their tasks.
func (j *Jobs) Done() <-chan struct{} { return j.done }

// Shutdown stops the jobs like [Jobs.Stop] and waits for [Jobs.Done], at
// most until ctx ends, as the lifecycle of [simba.Client] says. It returns
// nil once every job has stopped and the failure notifications in flight
// (see [Webhook]) have ended: each ends with its attempt under way, at
// most its timeout, and retries no more once the jobs stop. If ctx ends first, it returns an error
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
	j.mu.Lock()
	for _, s := range j.jobs {
		select {
		case <-s.stopped:
		default:
			pending = append(pending, s.label)
		}
	}
	j.mu.Unlock()
	what := "the stop under way"
	switch len(pending) {
	case 0:
		if n := j.ns.inFlight(); n > 0 {
			what = fmt.Sprintf("%d failure notifications in flight", n)
		}
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
// (only the closing of the client does that), waits for the failure
// notifications in flight, and closes done once every job has stopped.
func (j *Jobs) own() {
	select {
	case <-j.stopping:
	case label := <-j.ended:
		j.endedBy = label
		j.log.Warn("a job ended without being stopped: stopping the others", "job", label)
		j.Stop()
	}
	j.changing.Lock() // an Update under way ends first
	j.mu.Lock()
	all := j.jobs
	j.mu.Unlock()
	j.stopJobs(all)
	j.changing.Unlock()
	j.watchers.Wait()
	if len(all) > 0 {
		j.log.Info("jobs stopped; every hand-off complete")
	}
	j.ns.close()
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

// wanted is a job as the configuration wants it run: what tells it from
// another, and how to start it.
type wanted struct {
	key   string // its kind and name: what Update matches jobs by
	label string // "scheduled job \"report\""
	name  string // its name or group
	// def is its whole definition, its notifier the one in force: a job
	// whose def changed is restarted by Update.
	def   any
	start func() (task, error)
}

// wanted returns the jobs of cfg, in order, with the handlers of hs.
func (j *Jobs) wanted(hs handlers, cfg Config) []wanted {
	var out []wanted
	for _, job := range cfg.Scheduled {
		job.Notify = effectiveNotify(job.Notify, cfg.Notify)
		out = append(out, wanted{
			key: kindScheduled + "/" + job.Name, label: kindScheduled + " " + quote(job.Name), name: job.Name,
			def: job, start: func() (task, error) { return j.startScheduled(hs, job) },
		})
	}
	for _, job := range cfg.Partitioned {
		job.Notify = effectiveNotify(job.Notify, cfg.Notify)
		out = append(out, wanted{
			key: kindPartitioned + "/" + job.Group, label: kindPartitioned + " " + quote(job.Group), name: job.Group,
			def: job, start: func() (task, error) { return j.startPartitioned(hs, job) },
		})
	}
	return out
}

// startJob starts w and watches its task.
func (j *Jobs) startJob(w wanted) (*started, error) {
	t, err := w.start()
	if err != nil {
		return nil, fmt.Errorf("%sstart %s: %w", prefix, w.label, err)
	}
	s := &started{wanted: w, task: t, quit: make(chan struct{}), stopped: make(chan struct{})}
	j.watchers.Go(func() { j.watch(s) })
	return s, nil
}

// watch reports s's task if it ends without being stopped on purpose:
// only the closing of the client does that.
func (j *Jobs) watch(s *started) {
	select {
	case <-s.task.Done():
		select {
		case <-s.quit:
		case j.ended <- s.label:
		default: // another job's end was reported already
		}
	case <-s.quit:
	}
}

// stopJobs stops every job of list at once and waits until each has
// stopped: its runs returned and its leases released.
func (j *Jobs) stopJobs(list []*started) {
	for _, s := range list {
		close(s.quit)
		s.task.Stop()
	}
	var wg sync.WaitGroup
	for _, s := range list {
		wg.Go(func() {
			s.task.Shutdown(context.Background())
			close(s.stopped)
		})
	}
	wg.Wait()
}

// startScheduled starts a scheduled job, its runs' ctx carrying j.
func (j *Jobs) startScheduled(hs handlers, job ScheduledJob) (task, error) {
	pl := planScheduled(job)
	h, _ := handlerName(job.Name, job.Handler)
	fn, runs := hs.byName[h].scheduled, slog.String("handler", h)
	if len(job.Command) > 0 {
		fn, runs = scheduledCommand(j.o.commands, job), slog.Any("command", job.Command)
	}
	t, err := j.client.Election(job.Name).Schedule(pl.schedule, func(ctx context.Context, term *simba.Term) error {
		return fn(context.WithValue(ctx, jobsKey{}, j), term)
	}, j.taskOptions(job.Name, pl)...)
	if err != nil {
		return nil, err
	}
	j.log.Info("job started", "job", job.Name, runs, "schedule", pl.schedule.String())
	return t, nil
}

// startPartitioned starts a partitioned job, its runs' ctx carrying j.
func (j *Jobs) startPartitioned(hs handlers, job PartitionedJob) (task, error) {
	pl := planPartitioned(job)
	h, _ := handlerName(job.Group, job.Handler)
	fn, runs := hs.byName[h].partitioned, slog.String("handler", h)
	if len(job.Command) > 0 {
		fn, runs = partitionedCommand(j.o.commands, job), slog.Any("command", job.Command)
	}
	params := job.Params
	t, err := j.client.Group(job.Group, job.Partitions, j.o.groupOpts...).Schedule(pl.schedule,
		func(ctx context.Context, term *simba.Term, p int) error {
			return fn(context.WithValue(ctx, jobsKey{}, j), term, Partition{Index: p, Param: params[p]})
		}, j.taskOptions(job.Group, pl)...)
	if err != nil {
		return nil, err
	}
	j.log.Info("job started", "group", job.Group, "partitions", job.Partitions, runs, "schedule", pl.schedule.String())
	return t, nil
}

// plan is what a checked job turns into: its schedule, with its
// policies, and the task options it adds to those of [WithTaskOptions].
type plan struct {
	schedule simba.Schedule
	watchdog time.Duration // simba.WithProgressWatchdog, 0: none
	webhook  *Webhook      // the failure notifier, nil: none
}

func planScheduled(job ScheduledJob) plan {
	return newPlan(job.timing(), job.policies(), job.Notify)
}

func planPartitioned(job PartitionedJob) plan {
	return newPlan(job.timing(), job.policies(), job.Notify)
}

// newPlan is the plan of a job; n is its notifier in force.
func newPlan(t timing, p policies, n *Notify) plan {
	pl := plan{schedule: p.apply(t.schedule()), watchdog: p.progress}
	if n != nil && n.Webhook != nil {
		w := *n.Webhook
		pl.webhook = &w
	}
	return pl
}

// taskOptions are the task options of a job: those of [WithTaskOptions],
// then its watchdog and its notifier, which replaces a failure handler
// given there.
func (j *Jobs) taskOptions(name string, pl plan) []simba.TaskOption {
	opts := slices.Clone(j.o.taskOpts)
	if pl.watchdog > 0 {
		opts = append(opts, simba.WithProgressWatchdog(pl.watchdog))
	}
	if pl.webhook != nil {
		opts = append(opts, simba.WithFailureHandler(newNotifier(name, *pl.webhook, j.log, j.ns).handle))
	}
	return opts
}

// commandRunner is the function of WithCommandRunner.
type commandRunner = func(ctx context.Context, term *simba.Term, r CommandRun) error

// scheduledCommand is the run of a scheduled job with a command: the
// runner, called with a copy of the command line, so that neither what a
// call does to it nor what the caller of Run does to the Config changes the
// next call's.
func scheduledCommand(run commandRunner, job ScheduledJob) func(context.Context, *simba.Term) error {
	cmd, name, progress := slices.Clone(job.Command), job.Name, job.ProgressTimeout
	return func(ctx context.Context, term *simba.Term) error {
		return run(ctx, term, CommandRun{Job: name, Command: slices.Clone(cmd), ProgressTimeout: progress})
	}
}

// partitionedCommand is scheduledCommand for a partitioned job.
func partitionedCommand(run commandRunner, job PartitionedJob) func(context.Context, *simba.Term, Partition) error {
	cmd, group, progress := slices.Clone(job.Command), job.Group, job.ProgressTimeout
	return func(ctx context.Context, term *simba.Term, p Partition) error {
		return run(ctx, term, CommandRun{Job: group, Command: slices.Clone(cmd), Partitioned: true, Partition: p, ProgressTimeout: progress})
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
