package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/proc"
	"github.com/simba-go/simba/jobs"
)

// Environment variables that simba run gives its children.
const (
	envChildElection     = "SIMBA_ELECTION"        // the lease name: the election, or "{group}.{p}"
	envChildGroup        = "SIMBA_GROUP"           // a partition's group
	envChildPartition    = "SIMBA_PARTITION"       // a partition's number
	envChildParam        = "SIMBA_PARTITION_PARAM" // a partition's sharding-item parameter (--jobs)
	envChildToken        = "SIMBA_TOKEN"           // the term's fencing token
	envChildDeadline     = "SIMBA_DEADLINE"        // the term's guaranteed horizon when the child started
	envChildDeadlineFile = "SIMBA_DEADLINE_FILE"   // a file holding the horizon, rewritten as renewals succeed
	envChildMember       = "SIMBA_MEMBER"          // this member's ID
	envChildSource       = "SIMBA_RUN_SOURCE"      // why the run started: normal, misfire, trigger, fail-over
	envChildAttempt      = "SIMBA_ATTEMPT"         // the run's attempt, 1 and up with retries
	envChildArgPrefix    = "SIMBA_ARG_"            // a trigger's argument KEY is SIMBA_ARG_<KEY>
)

// deadlineLayout is how SIMBA_DEADLINE and its file write the horizon:
// RFC 3339 in UTC, with milliseconds.
const deadlineLayout = "2006-01-02T15:04:05.000Z07:00"

// minKillMargin is the least time before its term's hand-off deadline at
// which a child that outlives its grace period is sent SIGKILL, so that it
// is gone before the lease can pass on; the margin is a quarter of the TTL
// when that is more (killMargin), for a loaded machine's sake.
const minKillMargin = 200 * time.Millisecond

// killMargin is how long before the hand-off deadline a child of a session
// with this TTL is sent SIGKILL.
func killMargin(ttl time.Duration) time.Duration { return max(minKillMargin, ttl/4) }

// deadlineRefresh is how often a child's deadline file is brought up to
// date with its term's horizon.
const deadlineRefresh = 100 * time.Millisecond

// Restart policies of a command run once per term.
const (
	restartNever     = "never"
	restartOnFailure = "on-failure"
	restartAlways    = "always"
)

var runCommand = &command{
	name: "run", args: "-- COMMAND [ARGS]", minArgs: 0, maxArgs: -1, serves: true,
	summary: "run a command as a fenced leader task: on one node at a time, on a schedule or per partition",
	doc: `Runs COMMAND as a child process only while this process holds a term of a
lease, and ends it when the term ends. Start it on several nodes: one child
runs at a time, per election or per partition.

  simba run --election NAME [schedule] -- COMMAND [ARGS]
      while this process holds NAME: once per term, or on the schedule
  simba run --group NAME --partitions N [schedule] -- COMMAND [ARGS]
      one child per partition this member holds
  simba run --jobs FILE
      every job of a jobs file (package jobs' format) that has a command,
      with the run policies the file gives it (retry, timeout, overlap,
      maxConcurrent, catchUpWindow, pauseAfterFailures, progressTimeout,
      notify); SIGHUP reloads the file (see below)

Schedule (as Election.Schedule): --every D (a fixed delay between runs),
--fixed-rate D, or --cron EXPR; with --initial-delay D and --misfire
skip|run-once. Without one, the command runs once per term: when it exits,
the term is kept (no other node runs it) until it ends, unless --restart
on-failure or always gives the lease up after --restart-delay so that the
next term, here or elsewhere, runs it again. --once runs it once, in one
term, and exits with its exit status.

Run policies, as a jobs file's keys (docs/SCHEDULING.md); all but
--progress-timeout need a schedule:
  --retry N              run a failed run up to N times in all, in its
                         term, waiting --retry-backoff D (default 1s,
                         doubling) up to --retry-max-backoff D (default
                         1m) before each retry
  --run-timeout D        end each run after D (SIGTERM to its child, as at
                         the end of a term) and count it failed (--timeout
                         is the backend's)
  --overlap MODE         what a planned start does while a run is going:
                         skip, buffer-one, cancel-running or allow
                         (default: per --misfire); --max-concurrent N runs
                         at once under allow (default 2)
  --catch-up-window D    skip the planned starts missed by more than D
  --pause-after N        disable the job, as simba disable does, after N
                         failed runs in a row, until simba enable
  --progress-timeout D   each line the command writes (standard output or
                         error) is progress: a command silent for longer
                         than D ends its term, and the lease passes on
simba run --jobs takes them from its file, and a failure webhook (notify),
which has no flag.

The child's environment is this one's, plus:
  SIMBA_ELECTION       the lease name (NAME, or GROUP.P for a partition)
  SIMBA_TOKEN          the term's fencing token: pass it with every write
                       to a shared resource, which refuses tokens lower
                       than the highest it has seen
  SIMBA_GROUP, SIMBA_PARTITION   for a partition; SIMBA_PARTITION_PARAM
                       its sharding-item parameter (--jobs)
  SIMBA_DEADLINE       the term's guaranteed horizon at the start, RFC 3339
                       in UTC with milliseconds
  SIMBA_DEADLINE_FILE  a file holding the horizon, rewritten as renewals
                       succeed: do not start a step that would outlive it
  SIMBA_MEMBER         this member's ID (--member)
  SIMBA_RUN_SOURCE     why the run started: normal, misfire (a catch-up
                       run), trigger (simba trigger) or fail-over
  SIMBA_ATTEMPT        the run's attempt: 1, and 2 and up for retries
  SIMBA_ARG_<KEY>      each argument of a trigger (simba trigger NAME
                       --arg KEY=VALUE), KEY upper-cased with every
                       character other than A-Z, 0-9 and _ as _; of keys
                       that give one name (a-b, a.b), the first in byte
                       order wins: use keys of letters, digits and _
(the last three for runs on a schedule, and --jobs).

SIGHUP makes simba run --jobs read FILE again: if it has problems (each
is logged), the jobs keep running as they were; else the jobs the file
removes are stopped and handed off, the ones it changes are restarted,
the ones it adds start, and the ones it leaves alone keep running
untouched. A file left without command jobs is a problem too.

When the term ends (a hand-off, SIGTERM to simba run, a disable, drain or
resign, or the term lost), the child's process group gets SIGTERM at once,
and SIGKILL when --grace ends, or a quarter of the TTL (at least 200ms)
before the term's hand-off deadline if that is sooner: the lease passes on
only once the child is gone, or at that deadline.

` + wrap(proc.Guarantee(), 76) + `

A stopped (SIGSTOP) or frozen simba run cannot signal its child: the child
keeps running, and once the TTL has passed another node's child runs with
a higher token. Only fencing protects the resource then: a late write of
the old child carries the old token, which the resource refuses.

The child's standard output and error are passed through (--prefix-output
prefixes each line with the lease and token). Each run, with its exit
status, is recorded in the run history (simba history NAME). On SIGINT or
SIGTERM simba run ends its children, hands its leases off and exits 0, with
--once too; otherwise --once exits with the command's status (128+N for
signal N).

Bad input (no command, a command that cannot be executed, conflicting
flags, a bad cron expression) is exit status 2, before any lease is taken.`,
	setup: func(fs *flag.FlagSet) action {
		var o runFlags
		o.register(fs)
		return func(ctx context.Context, inv *invocation, args []string) error {
			o.argv = args
			return runRun(ctx, inv, o)
		}
	},
}

// runFlags are the flags of simba run.
type runFlags struct {
	election, group string
	partitions      int
	jobsFile        string
	every, rate     time.Duration
	cron            string
	initial         time.Duration
	misfire         string
	once            bool
	restart         string
	restartDelay    time.Duration
	grace, ttl      time.Duration
	member          string
	prefixOutput    bool
	pol             runPolicies // --retry, --overlap, --progress-timeout, …
	argv            []string
}

// register registers the flags of simba run on fs.
func (o *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.election, "election", "", "run while holding the election `NAME`")
	fs.StringVar(&o.group, "group", "", "run per partition of the group `NAME`")
	fs.IntVar(&o.partitions, "partitions", 0, "the group's number of partitions, the same on every member")
	fs.StringVar(&o.jobsFile, "jobs", "", "run the command jobs of this jobs `file` (YAML or JSON)")
	durationVar(fs, &o.every, "every", 0, "run on a fixed delay: this `duration` from the end of one run to the start of the next")
	durationVar(fs, &o.rate, "fixed-rate", 0, "run at a fixed rate: one planned start every `duration`")
	fs.StringVar(&o.cron, "cron", "", "run at the times of a cron `expression` (five fields, or six with seconds first; quote it)")
	durationVar(fs, &o.initial, "initial-delay", 0, "wait this `duration` after winning a term before the first run")
	fs.StringVar(&o.misfire, "misfire", "", "what to do with planned starts missed by an overrun or a fail-over: `skip` (default) or run-once")
	fs.BoolVar(&o.once, "once", false, "run the command once, in one term, and exit with its status")
	fs.StringVar(&o.restart, "restart", restartNever, "without a schedule, when the command exits before its term ends: `never` (keep the term), on-failure or always (give the lease up, so that the next term runs it again)")
	durationVar(fs, &o.restartDelay, "restart-delay", time.Second, "with --restart, wait this `duration` before giving the lease up")
	durationVar(fs, &o.grace, "grace", 10*time.Second, "at the end of a term, give the command this `duration` after SIGTERM before SIGKILL (never past the term's deadline)")
	durationVar(fs, &o.ttl, "ttl", simba.DefaultTTL, "the session TTL: a crashed node's terms pass on about this `duration` after its last renewal")
	fs.StringVar(&o.member, "member", "", "this member's `ID` (default HOSTNAME-PID)")
	fs.BoolVar(&o.prefixOutput, "prefix-output", false, "prefix each line of the command's output with its lease and token")
	o.pol.register(fs)
}

// check refuses bad input before anything connects. It returns the
// schedule, if one was given.
func (o *runFlags) check(explicit func(string) bool) (*simba.Schedule, error) {
	if err := o.checkMode(explicit); err != nil {
		return nil, err
	}
	if o.jobsFile != "" {
		return nil, o.checkJobs(explicit)
	}
	if len(o.argv) == 0 {
		return nil, badRunf("no command: give it after --, as in simba run --election NAME -- COMMAND [ARGS]")
	}
	if err := proc.Check(o.argv); err != nil {
		return nil, badRunf("%v", err)
	}
	timing, err := o.checkTiming(explicit)
	if err == nil {
		err = o.pol.check(explicit)
	}
	if err != nil || timing == "" {
		return nil, err
	}
	return o.schedule(explicit)
}

// checkMode checks the flags of every mode: one of --election, --group
// and --jobs, the names, the numbers and the durations.
func (o *runFlags) checkMode(explicit func(string) bool) error {
	modes := 0
	for _, m := range []string{o.election, o.group, o.jobsFile} {
		if m != "" {
			modes++
		}
	}
	for _, r := range []struct {
		bad bool
		msg string
	}{
		{modes == 0, "give --election NAME, --group NAME --partitions N, or --jobs FILE"},
		{modes > 1, "--election, --group and --jobs exclude each other: give one"},
		{o.group != "" && o.partitions <= 0, "--group needs --partitions N (a positive number, the same on every member)"},
		{o.group == "" && explicit("partitions"), "--partitions applies to --group only"},
		{o.partitions > simba.MaxPartitions, fmt.Sprintf("--partitions must be at most %d, got %d", simba.MaxPartitions, o.partitions)},
		{o.member != "" && len(o.member) > backend.MaxNameLen, fmt.Sprintf("--member must be at most %d bytes, got %d", backend.MaxNameLen, len(o.member))},
		{o.grace <= 0, fmt.Sprintf("--grace must be positive, got %v", o.grace)},
		{o.ttl < simba.MinTTL, fmt.Sprintf("--ttl must be at least %v, got %v", simba.MinTTL, o.ttl)},
		{o.restartDelay < 0, fmt.Sprintf("--restart-delay must not be negative, got %v", o.restartDelay)},
	} {
		if r.bad {
			return badRunf("%s", r.msg)
		}
	}
	for _, name := range []string{o.election, o.group} {
		if name == "" {
			continue
		}
		if err := backend.CheckName(name); err != nil {
			return badRunf("%s", message(err.Error()))
		}
	}
	if o.group != "" {
		if err := backend.CheckName(partitionLease(o.group, o.partitions-1)); err != nil {
			return badRunf("--group %s: %s", o.group, message(err.Error()))
		}
	}
	return nil
}

// checkJobs checks the flags of --jobs: no timing, no run policies, no
// command.
func (o *runFlags) checkJobs(explicit func(string) bool) error {
	for _, f := range []string{"every", "fixed-rate", "cron", "initial-delay", "misfire", "once", "restart", "restart-delay"} {
		if explicit(f) {
			return badRunf("--%s does not apply to --jobs: the file gives each job its timing", f)
		}
	}
	for _, f := range append(slices.Clone(schedulePolicyFlags), progressFlag) {
		if explicit(f) {
			return badRunf("--%s does not apply to --jobs: the file gives each job its run policies", f)
		}
	}
	if len(o.argv) > 0 {
		return badRunf("--jobs takes no command: the file gives each job its command (got %s)", strings.Join(o.argv, " "))
	}
	return nil
}

// checkTiming checks the flags that say when a command runs: at most one
// schedule, returned as its flag ("--every", "--fixed-rate", "--cron", or
// "" for none), or else --once or --restart.
func (o *runFlags) checkTiming(explicit func(string) bool) (string, error) {
	var timings []string
	for _, f := range []string{"every", "fixed-rate", "cron"} {
		if explicit(f) {
			timings = append(timings, "--"+f)
		}
	}
	if len(timings) > 1 {
		return "", badRunf("%s exclude each other: give one schedule", strings.Join(timings, " and "))
	}
	timing := ""
	if len(timings) == 1 {
		timing = timings[0]
	}
	if timing == "" {
		for _, f := range append([]string{"initial-delay", "misfire"}, schedulePolicyFlags...) {
			if explicit(f) {
				return "", badRunf("--%s applies to a schedule (--every, --fixed-rate or --cron) only", f)
			}
		}
	}
	switch o.restart {
	case restartNever, restartOnFailure, restartAlways:
	default:
		return "", badRunf("--restart %s: use never, on-failure or always", o.restart)
	}
	for _, r := range []struct {
		bad bool
		msg string
	}{
		{o.once && timing != "", "--once and " + timing + " exclude each other: --once runs the command one time"},
		{o.once && o.group != "", "--once applies to --election only: a group runs one command per partition"},
		{o.once && explicit("restart"), "--once and --restart exclude each other"},
		{timing != "" && explicit("restart"), "--restart applies without a schedule only: " + timing + " runs the command again by itself"},
		{explicit("restart-delay") && o.restart == restartNever, "--restart-delay applies to --restart on-failure or always only"},
	} {
		if r.bad {
			return "", badRunf("%s", r.msg)
		}
	}
	return timing, nil
}

// schedule returns the schedule of the flags, with one given.
func (o *runFlags) schedule(explicit func(string) bool) (*simba.Schedule, error) {
	var s simba.Schedule
	switch {
	case explicit("every"):
		s = simba.FixedDelay(o.every)
	case explicit("fixed-rate"):
		s = simba.FixedRate(o.rate)
	default:
		s = simba.Cron(o.cron)
	}
	if explicit("initial-delay") {
		s = s.WithInitialDelay(o.initial)
	}
	switch o.misfire {
	case "", "skip":
	case "run-once":
		s = s.WithMisfire(simba.MisfireRunOnce)
	default:
		return nil, badRunf("--misfire %s: use skip or run-once", o.misfire)
	}
	if err := s.Err(); err != nil {
		return nil, badRunf("%s", message(err.Error()))
	}
	s, err := o.pol.apply(s, explicit)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// badRun is bad input to simba run: one line, exit status 2, before
// anything connects.
type badRun struct{ msg string }

func (e *badRun) Error() string   { return e.msg }
func (e *badRun) exitStatus() int { return exitUsage }

func badRunf(format string, args ...any) error {
	return &badRun{msg: "run: " + fmt.Sprintf(format, args...)}
}

// wrap breaks s into lines of at most width columns, at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(s) {
		switch {
		case i == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// childExit is the exit status of simba run --once: the command's.
type childExit struct {
	code int
	what string
}

func (e *childExit) Error() string   { return e.what }
func (e *childExit) exitStatus() int { return e.code }

func runRun(ctx context.Context, inv *invocation, o runFlags) error {
	sched, err := o.check(func(name string) bool { return inv.explicit[name] })
	if err != nil {
		return err
	}
	var cfg jobs.Config
	if o.jobsFile != "" {
		if cfg, err = loadCommandJobs(inv, o.jobsFile); err != nil {
			return err
		}
	}
	if o.member == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "simba-run"
		}
		o.member = host + "-" + strconv.Itoa(os.Getpid())
	}
	t, err := inv.g.target(inv.explicit)
	if err != nil {
		return err
	}
	inv.t = t
	pctx, cancel := context.WithTimeout(ctx, inv.g.timeout)
	err = inv.probeServers(pctx, t)
	cancel()
	if err != nil {
		return err
	}
	// The client's, the jobs' and the backend's warnings and errors, as
	// lines of simba run's own (logging.go).
	out := &lineSink{}
	logger := slog.New(newLogHandler(func(line string) { out.line(inv.stderr, line) }, "simba run", slog.LevelWarn))
	t.log = logger
	b, err := inv.open(t)
	if err != nil {
		return usagef(nil, "%s: %v", t, err)
	}
	inv.b = b // closed by the invocation, after the client
	r := &runner{inv: inv, o: o, out: out}
	rctx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	opts := []simba.Option{simba.WithTTL(o.ttl), simba.WithMemberID(o.member), simba.WithLogger(logger)}
	if o.once {
		// Once the run is recorded in the history, simba run ends: the
		// event comes after the record.
		opts = append(opts, simba.WithEventHandler(func(e simba.Event) {
			if wc, ok := e.(simba.WorkCompleted); ok && wc.Election == o.election && r.onceOver() {
				cancelRun()
			}
		}))
	}
	client, err := simba.New(b, opts...)
	if err != nil {
		return usagef(nil, "run: %v", err)
	}
	defer r.cleanup()
	rctx2, cancel2 := context.WithTimeout(rctx, inv.g.timeout)
	err = client.Ready(rctx2)
	cancel2()
	if err != nil {
		client.Close()
		if ctx.Err() != nil {
			return nil
		}
		return inv.backendErr(ctx, "opening a session", err)
	}
	r.say("session open on %s as member %s", t, o.member)

	if o.jobsFile != "" {
		err = r.runJobs(rctx, client, cfg, logger)
		client.Close()
		return err
	}
	var task interface {
		Stop()
		Done() <-chan struct{}
	}
	topts := o.pol.taskOptions()
	switch {
	case o.group != "" && sched != nil:
		task, err = client.Group(o.group, o.partitions).Schedule(*sched, func(ctx context.Context, term *simba.Term, p int) error {
			return recorded(r.runChild(ctx, term, o.argv, p, ""))
		}, topts...)
	case o.group != "":
		task, err = client.Group(o.group, o.partitions).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
			return r.perTerm(ctx, term, p)
		}, topts...)
	case sched != nil:
		task, err = client.Election(o.election).Schedule(*sched, func(ctx context.Context, term *simba.Term) error {
			return recorded(r.runChild(ctx, term, o.argv, -1, ""))
		}, topts...)
	default:
		task, err = client.Election(o.election).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			return r.perTerm(ctx, term, -1)
		}, topts...)
	}
	if err != nil {
		client.Close()
		return usagef(nil, "run: %s", message(err.Error()))
	}
	select {
	case <-rctx.Done():
	case <-task.Done():
	}
	task.Stop()
	<-task.Done()
	client.Close()
	if o.once && ctx.Err() == nil {
		return r.onceResult()
	}
	return nil
}

// loadCommandJobs reads a jobs file and keeps its command jobs, naming
// the others, which Go code runs.
func loadCommandJobs(inv *invocation, path string) (jobs.Config, error) {
	cfg, err := jobs.LoadFile(path)
	if err != nil {
		return cfg, badRunf("%s", message(err.Error()))
	}
	cmds := cfg.CommandJobs()
	var skipped []string
	others := cfg.HandlerJobs()
	for _, j := range others.Scheduled {
		skipped = append(skipped, j.Name)
	}
	for _, j := range others.Partitioned {
		skipped = append(skipped, j.Group)
	}
	if len(cmds.Scheduled)+len(cmds.Partitioned) == 0 {
		return cmds, badRunf("%s has no job with a command: (its jobs' handlers are Go code)", path)
	}
	if len(skipped) > 0 {
		fmt.Fprintf(inv.stderr, "simba run: not running %s of %s: their handlers are Go code, not commands\n", strings.Join(skipped, ", "), path)
	}
	for _, j := range cmds.Scheduled {
		if err := proc.Check(j.Command); err != nil {
			return cmds, badRunf("%s: job %s: %v", path, j.Name, err)
		}
	}
	for _, j := range cmds.Partitioned {
		if err := proc.Check(j.Command); err != nil {
			return cmds, badRunf("%s: job %s: %v", path, j.Group, err)
		}
	}
	return cmds, nil
}

// runJobs runs the command jobs of cfg until ctx ends, and reloads the
// jobs file on SIGHUP.
func (r *runner) runJobs(ctx context.Context, client *simba.Client, cfg jobs.Config, logger *slog.Logger) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	j, err := jobs.Start(client, nil, cfg, jobs.WithLogger(logger), jobs.WithCommandRunner(r.runJob))
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return j.Close()
		case <-j.Done():
			return fmt.Errorf("run: the jobs ended without being stopped: %w", simba.ErrClosed)
		case <-hup:
			cfg = r.reload(j, cfg)
		}
	}
}

// reload reads the jobs file again and updates the jobs to it; it returns
// the configuration running afterwards. On a problem it logs every one
// and changes nothing.
func (r *runner) reload(j *jobs.Jobs, old jobs.Config) jobs.Config {
	path := r.o.jobsFile
	cfg, err := loadCommandJobs(r.inv, path)
	if err == nil {
		err = jobs.Validate(nil, cfg)
	}
	if err != nil {
		r.say("SIGHUP: %s has problems; the jobs keep running as they were:", path)
		for _, line := range strings.Split(message(err.Error()), "\n") {
			r.say("  %s", strings.TrimSpace(line))
		}
		return old
	}
	c := summarize(old, cfg)
	if err := j.Update(cfg); err != nil {
		r.say("SIGHUP: updating the jobs to %s: %s", path, message(err.Error()))
		return cfg // what did start runs; the next reload retries the rest
	}
	r.say("SIGHUP: reloaded %s: %s", path, c)
	return cfg
}

// jobChanges names the jobs a reload adds, changes and removes.
type jobChanges struct {
	added, changed, removed []string
	unchanged               int
}

func (c jobChanges) String() string {
	list := func(names []string) string {
		if len(names) == 0 {
			return "none"
		}
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("added %s; changed %s; removed %s; %d unchanged", list(c.added), list(c.changed), list(c.removed), c.unchanged)
}

// summarize compares the jobs of two configurations by kind and name, as
// Jobs.Update does: a job changes when its definition, or the notifier in
// force for it, does.
func summarize(old, cfg jobs.Config) jobChanges {
	defs := func(c jobs.Config) (keys []string, names, byKey map[string]any) {
		byKey, names = map[string]any{}, map[string]any{}
		for _, j := range c.Scheduled {
			if j.Notify == nil {
				j.Notify = c.Notify
			}
			k := "s/" + j.Name
			keys, byKey[k], names[k] = append(keys, k), j, j.Name
		}
		for _, j := range c.Partitioned {
			if j.Notify == nil {
				j.Notify = c.Notify
			}
			k := "p/" + j.Group
			keys, byKey[k], names[k] = append(keys, k), j, j.Group
		}
		if c.Disabled {
			byKey = map[string]any{}
		}
		return keys, names, byKey
	}
	oldKeys, oldNames, before := defs(old)
	newKeys, newNames, after := defs(cfg)
	var c jobChanges
	for _, k := range newKeys {
		def, ok := after[k]
		if !ok {
			continue
		}
		switch prev, had := before[k]; {
		case !had:
			c.added = append(c.added, newNames[k].(string))
		case !reflect.DeepEqual(prev, def):
			c.changed = append(c.changed, newNames[k].(string))
		default:
			c.unchanged++
		}
	}
	for _, k := range oldKeys {
		if _, still := after[k]; !still {
			if _, was := before[k]; was {
				c.removed = append(c.removed, oldNames[k].(string))
			}
		}
	}
	return c
}

// runner runs the children of one simba run.
type runner struct {
	inv *invocation
	o   runFlags
	out *lineSink

	mu       sync.Mutex
	dir      string // the deadline files' directory, made on first use
	onceErr  error  // --once: the outcome of its run
	onceDone bool   // --once: the run is over
}

// say prints one line of simba run's own to stderr.
func (r *runner) say(format string, args ...any) {
	r.out.line(r.inv.stderr, "simba run: "+fmt.Sprintf(format, args...))
}

// perTerm is the task of a command run once per term, without a schedule.
func (r *runner) perTerm(ctx context.Context, term *simba.Term, p int) error {
	if r.o.once && r.onceOver() {
		return nil // a later term of a --once whose run is over
	}
	err := r.runChild(ctx, term, r.o.argv, p, "")
	if ctx.Err() != nil {
		return recorded(err) // the term ended first: the next one runs it again
	}
	if r.o.once {
		r.mu.Lock()
		r.onceErr, r.onceDone = err, true
		r.mu.Unlock()
		return recorded(err) // recorded, then WorkCompleted ends simba run
	}
	restart := r.o.restart == restartAlways || r.o.restart == restartOnFailure && err != nil
	if !restart {
		r.say("%s: holding the term of token %d until it ends; the command runs again in the next term (--restart on-failure or always gives the lease up at once)", term.Name(), term.Token())
		return recorded(err)
	}
	t := time.NewTimer(r.o.restartDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return recorded(err)
	}
	r.say("%s: giving the lease up (--restart %s), so that the next term runs the command again", term.Name(), r.o.restart)
	return &yieldError{err: err}
}

// yieldError gives the lease up after a run, with its outcome: a failure
// is still recorded as one.
type yieldError struct{ err error }

func (e *yieldError) Error() string {
	if e.err == nil {
		return "command exited; giving the lease up"
	}
	return e.err.Error() + "; giving the lease up"
}
func (e *yieldError) Unwrap() []error { return []error{simba.ErrYield, e.err} }
func (e *yieldError) Failed() bool    { return e.err != nil }

// onceOver reports whether the run of --once is over.
func (r *runner) onceOver() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.onceDone
}

// onceResult is simba run --once's outcome: the command's exit status.
func (r *runner) onceResult() error {
	r.mu.Lock()
	err, done := r.onceErr, r.onceDone
	r.mu.Unlock()
	if !done {
		return nil
	}
	var ee *proc.ExitError
	if errors.As(err, &ee) {
		code := ee.Code
		if ee.Signal != 0 {
			code = 128 + int(ee.Signal)
		}
		return &childExit{code: code, what: fmt.Sprintf("the command ended: %s", ee.Exit)}
	}
	if err != nil {
		return failf("run: %v", err)
	}
	return nil
}

// runJob runs one planned run of a command job of --jobs.
func (r *runner) runJob(ctx context.Context, term *simba.Term, j jobs.CommandRun) error {
	p, param := -1, ""
	if j.Partitioned {
		p, param = j.Partition.Index, j.Partition.Param
	}
	return recorded(r.runChildProgress(ctx, term, j.Command, p, param, j.ProgressTimeout > 0))
}

// runChild runs argv as a child for one run of term, and ends it when ctx
// ends: SIGTERM at once, SIGKILL when the grace period ends or just before
// the term's hand-off deadline, whichever is sooner. It returns the child's
// outcome: nil for exit status 0, else a *proc.ExitError or the error that
// kept it from starting. With --progress-timeout, each line of the child's
// output is progress.
func (r *runner) runChild(ctx context.Context, term *simba.Term, argv []string, p int, param string) error {
	return r.runChildProgress(ctx, term, argv, p, param, r.o.pol.progress > 0)
}

// runChildProgress is runChild; given progress, each line of the child's
// output reports progress to the term's watchdog (term.Progress).
func (r *runner) runChildProgress(ctx context.Context, term *simba.Term, argv []string, p int, param string, progress bool) error {
	deadline := term.Deadline()
	file, err := r.deadlineFile(term, deadline)
	if err != nil {
		return err
	}
	defer os.Remove(file)
	env := append(os.Environ(),
		envChildElection+"="+term.Name(),
		envChildToken+"="+strconv.FormatUint(term.Token(), 10),
		envChildDeadline+"="+deadline.UTC().Format(deadlineLayout),
		envChildDeadlineFile+"="+file,
		envChildMember+"="+r.o.member,
	)
	if p >= 0 {
		group := r.o.group
		if group == "" { // --jobs: the lease is "{group}.{p}"
			group = term.Name()[:max(strings.LastIndexByte(term.Name(), '.'), 0)]
		}
		env = append(env, envChildGroup+"="+group, envChildPartition+"="+strconv.Itoa(p))
		if param != "" {
			env = append(env, envChildParam+"="+param)
		}
	}
	ri, ok := simba.RunInfoFrom(ctx)
	riEnv, dropped := runInfoEnv(ri, ok)
	env = append(env, riEnv...)
	for _, k := range dropped {
		r.say("%s: token %d: the trigger argument %q is not given to the child: its value holds a NUL byte, which no environment variable can", term.Name(), term.Token(), k)
	}
	spec := proc.Spec{Argv: argv, Env: env, Stdout: r.out.shared(r.inv.stdout), Stderr: r.out.shared(r.inv.stderr)}
	var flush func()
	if r.o.prefixOutput {
		label := fmt.Sprintf("[%s token %d] ", term.Name(), term.Token())
		stdout, stderr := r.out.prefixed(r.inv.stdout, label), r.out.prefixed(r.inv.stderr, label)
		spec.Stdout, spec.Stderr = stdout, stderr
		flush = func() { stdout.Flush(); stderr.Flush() }
	}
	if progress {
		spec.Stdout = &progressWriter{w: spec.Stdout, progress: term.Progress}
		spec.Stderr = &progressWriter{w: spec.Stderr, progress: term.Progress}
	}
	child, err := proc.Start(spec)
	if err != nil {
		r.say("%s: token %d: %v", term.Name(), term.Token(), err)
		return err
	}
	r.say("%s: token %d: started %s (pid %d, process group %d)", term.Name(), term.Token(), argv[0], child.CommandPid(), child.Pid())
	stopRefresh := make(chan struct{})
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		r.refreshDeadline(term, file, deadline, stopRefresh)
	}()
	var exit proc.Exit
	select {
	case <-child.Done():
		exit = child.Exit()
	case <-ctx.Done():
		killAt := time.Now().Add(r.o.grace)
		if hd := term.HandOffDeadline().Add(-killMargin(r.o.ttl)); hd.Before(killAt) {
			killAt = hd
		}
		r.say("%s: token %d: %s: SIGTERM to %s (pid %d), SIGKILL in %v unless it has exited", term.Name(), term.Token(), runEnded(ctx), argv[0], child.CommandPid(), max(time.Until(killAt), 0).Round(time.Millisecond))
		exit = child.Stop(killAt)
	}
	close(stopRefresh)
	<-refreshed
	if flush != nil {
		flush()
	}
	r.say("%s: token %d: %s (pid %d) ended: %s", term.Name(), term.Token(), argv[0], child.CommandPid(), exit)
	return exit.Err()
}

// runEnded says why the ctx of a run ended: its timeout, the next
// planned start (overlap cancel-running), or its term.
func runEnded(ctx context.Context) string {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, simba.ErrRunTimeout):
		return "the run timed out"
	case errors.Is(cause, simba.ErrOverlapCancelled):
		return "the next planned start cancelled the run"
	}
	return "the term ended"
}

// runInfoEnv returns the child variables of a run's RunInfo (none
// without one): SIMBA_RUN_SOURCE, SIMBA_ATTEMPT, and SIMBA_ARG_<KEY> per
// trigger argument, in the order of the keys. Of keys that give one name,
// the first in byte order is kept; an empty key, and a value holding a
// NUL byte (which no variable can), are left out, the latter returned in
// dropped.
func runInfoEnv(ri simba.RunInfo, ok bool) (env, dropped []string) {
	if !ok {
		return nil, nil
	}
	env = []string{envChildSource + "=" + string(ri.Source), envChildAttempt + "=" + strconv.Itoa(ri.Attempt)}
	seen := map[string]bool{}
	for _, k := range slices.Sorted(maps.Keys(ri.Args)) {
		v := ri.Args[k]
		name := argEnvName(k)
		switch {
		case k == "" || seen[name]:
			continue
		case strings.IndexByte(v, 0) >= 0:
			dropped = append(dropped, k)
			continue
		}
		seen[name] = true
		env = append(env, name+"="+v)
	}
	return env, dropped
}

// argEnvName is the variable of a trigger argument's key: SIMBA_ARG_ and
// the key upper-cased, every character other than A-Z, 0-9 and _ as _
// ("dry-run" is SIMBA_ARG_DRY_RUN).
func argEnvName(key string) string {
	var b strings.Builder
	b.WriteString(envChildArgPrefix)
	for _, c := range strings.ToUpper(key) {
		if c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// recorded is what a run that ran a command returns to the library: its
// outcome, with exit status 0 as a commandExit, so that the history
// records it (a nil return records no exit status).
func recorded(err error) error {
	if err == nil {
		return commandExit(0)
	}
	return err
}

// commandExit is a command's exit status as an error. Its method ExitCode
// is what the library records in the run history, and a code of 0 makes
// the run a success (see "Exit codes" in package simba's doc).
type commandExit int

func (e commandExit) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// ExitCode returns the exit status.
func (e commandExit) ExitCode() int { return int(e) }

// deadlineFile creates the file of a child's SIMBA_DEADLINE_FILE.
func (r *runner) deadlineFile(term *simba.Term, deadline time.Time) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dir == "" {
		dir, err := os.MkdirTemp("", "simba-run-")
		if err != nil {
			return "", fmt.Errorf("a directory for the deadline files: %w", err)
		}
		r.dir = dir
	}
	f, err := os.CreateTemp(r.dir, fmt.Sprintf("deadline-%s-%d-*", term.Name(), term.Token()))
	if err != nil {
		return "", fmt.Errorf("a deadline file: %w", err)
	}
	_, err = f.WriteString(deadline.UTC().Format(deadlineLayout) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("a deadline file: %w", err)
	}
	return f.Name(), nil
}

// refreshDeadline rewrites file with term's horizon as it moves, until
// stop is closed. A file is replaced whole (written beside it, then
// renamed), so that a reader never sees half of one.
func (r *runner) refreshDeadline(term *simba.Term, file string, written time.Time, stop <-chan struct{}) {
	tick := time.NewTicker(deadlineRefresh)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		d := term.Deadline()
		if d.Equal(written) {
			continue
		}
		tmp := file + ".new"
		if err := os.WriteFile(tmp, []byte(d.UTC().Format(deadlineLayout)+"\n"), 0o644); err != nil {
			r.say("%s: token %d: the deadline file: %v", term.Name(), term.Token(), err)
			continue
		}
		if err := os.Rename(tmp, file); err != nil {
			os.Remove(tmp)
			r.say("%s: token %d: the deadline file: %v", term.Name(), term.Token(), err)
			continue
		}
		written = d
	}
}

// cleanup removes the deadline files' directory.
func (r *runner) cleanup() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}
