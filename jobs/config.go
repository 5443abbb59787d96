package jobs

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/simba-go/simba"

	"github.com/simba-go/simba/backend"
)

// Config declares the jobs of an application: when each runs and with which
// handler. Build one in code, or read one from a file with [Load] or
// [LoadFile]; check it against a [Registry] with [Validate], run it with
// [Run]. The zero Config has no job and is enabled.
type Config struct {
	// Disabled turns every job off (scheduling.enabled: false in files).
	// The environment variable SIMBA_SCHEDULING_ENABLED, when set, overrides
	// it: see [EnabledEnv].
	Disabled bool
	// Scheduled are the scheduled jobs (scheduled in files).
	Scheduled []ScheduledJob
	// Partitioned are the partitioned jobs (partitioned in files).
	Partitioned []PartitionedJob
	// Notify is the notifier of every job whose own Notify is nil (notify
	// in files, at the top level); nil: none. See [Notify].
	Notify *Notify

	// origin remembers where a loaded configuration's values were read.
	origin *origin
}

// ScheduledJob is a job run by the leader of the election called Name, on
// a fixed delay, a fixed rate or a cron expression, within each term (see
// [simba.Election.Schedule]): one node at a time runs it.
//
// Exactly one of FixedDelay, FixedRate and Cron must be set (a zero value
// is unset); a duration must be positive.
type ScheduledJob struct {
	// Name is the election's (and the lease's) name, unique among the jobs
	// of the application (key name).
	Name string
	// Handler is the name of the registered handler to run (key handler,
	// default Name).
	Handler string
	// FixedDelay is the delay from the end of one run to the start of the
	// next (key fixedDelay).
	FixedDelay time.Duration
	// FixedRate is the period between planned starts; an overrunning run
	// skips the starts it missed (key fixedRate).
	FixedRate time.Duration
	// Cron is a cron expression, as [simba.Cron] accepts: five fields, or
	// six with leading seconds ("0 */5 * * * *"), descriptors such as
	// "@hourly", and a time zone prefix "CRON_TZ=Asia/Shanghai " (key cron).
	Cron string
	// InitialDelay is the delay before the first run of every term (key
	// initialDelay, default 0). It must not be negative.
	InitialDelay time.Duration
	// Misfire says what the schedule does with planned starts missed by an
	// overrun or across fail-over (key misfire: skip, the default, or
	// run-once; see [simba.Schedule.WithMisfire]).
	Misfire simba.MisfirePolicy
	// Command, when set, is the job's handler as a command line: the
	// program and its arguments, run as a child process in each planned
	// run by `simba run --jobs FILE`, or by the function given to [Run]
	// with [WithCommandRunner] (key command, a list of strings). A job has
	// a Command or a registered handler, not both.
	Command []string

	// Retry retries a failed run within its term (key retry: a map with
	// the keys attempts, backoff, maxBackoff, multiplier and jitter, or a
	// whole number, the attempts alone); see [simba.RetryPolicy] for what
	// each means and its defaults. The zero value retries nothing.
	Retry simba.RetryPolicy
	// Timeout ends each run's ctx after it (key timeout, default 0: none);
	// see [simba.Schedule.WithTimeout]. It must not be negative.
	Timeout time.Duration
	// Overlap says what a planned start does while a run is still going
	// (key overlap: skip, buffer-one, cancel-running or allow; default:
	// per the misfire policy); see [simba.OverlapPolicy].
	Overlap simba.OverlapPolicy
	// MaxConcurrent is the most runs at once under Overlap allow (key
	// maxConcurrent, default 2), and is an error with any other overlap
	// policy; see [simba.Schedule.WithMaxConcurrent].
	MaxConcurrent int
	// CatchUpWindow skips the planned starts missed by more than it (key
	// catchUpWindow, default 0: no limit); see
	// [simba.Schedule.WithCatchUpWindow]. It must not be negative.
	CatchUpWindow time.Duration
	// PauseAfterFailures pauses the job (disables it, as `simba disable`
	// does) after that many failed runs in a row (key pauseAfterFailures,
	// default 0: never); see [simba.Schedule.WithPauseAfter].
	PauseAfterFailures int
	// ProgressTimeout gives the term up when a run shows no progress for
	// that long (key progressTimeout, default 0: no watchdog); see
	// [simba.WithProgressWatchdog]. A handler reports progress with
	// term.Progress(); a command job's every line of output counts as
	// progress. It must not be negative.
	ProgressTimeout time.Duration
	// Notify says whom the job tells of its failed runs (key notify); nil
	// takes the Config's Notify, and a Notify without a Webhook turns that
	// default off for this job. See [Notify].
	Notify *Notify
}

// PartitionedJob is a job split into Partitions partitions: a partition
// group called Group whose partitions are spread over the live members,
// each run on its timing by the leader of the election "{Group}.{p}" (see
// [simba.Group.Schedule]).
//
// Exactly one of FixedDelay, FixedRate and Cron must be set, as for
// [ScheduledJob]; they apply per partition.
type PartitionedJob struct {
	// Group is the group's name, unique among the jobs of the application
	// (key group).
	Group string
	// Handler is the name of the registered handler to run (key handler,
	// default Group).
	Handler string
	// Partitions is the number of partitions, the same on every member (key
	// partitions). It must be positive and at most [simba.MaxPartitions].
	Partitions int
	// FixedDelay, FixedRate, Cron, InitialDelay and Misfire are as in
	// [ScheduledJob], per partition (keys fixedDelay, fixedRate, cron,
	// initialDelay, misfire).
	FixedDelay, FixedRate, InitialDelay time.Duration
	Cron                                string
	Misfire                             simba.MisfirePolicy
	// Params are the sharding-item parameters: a label per partition,
	// handed to handlers registered with [Registry.PartitionedWithParam]
	// (key shardingItemParameters). Partitions without one get "". Every key
	// must be a partition number.
	Params map[int]string
	// Command is as in [ScheduledJob]: the job's handler as a command
	// line, run once per planned run of every partition this node holds
	// (key command).
	Command []string
	// Retry, Timeout, Overlap, MaxConcurrent, CatchUpWindow,
	// PauseAfterFailures, ProgressTimeout and Notify are as in
	// [ScheduledJob], per partition (keys retry, timeout, overlap,
	// maxConcurrent, catchUpWindow, pauseAfterFailures, progressTimeout,
	// notify): each partition's schedule retries, times out, pauses and
	// notifies on its own.
	Retry                  simba.RetryPolicy
	Timeout, CatchUpWindow time.Duration
	Overlap                simba.OverlapPolicy
	MaxConcurrent          int
	PauseAfterFailures     int
	ProgressTimeout        time.Duration
	Notify                 *Notify
}

func (j ScheduledJob) timing() timing {
	return timing{j.FixedDelay, j.FixedRate, j.InitialDelay, j.Cron, j.Misfire}
}

func (j PartitionedJob) timing() timing {
	return timing{j.FixedDelay, j.FixedRate, j.InitialDelay, j.Cron, j.Misfire}
}

func (j ScheduledJob) policies() policies {
	return policies{j.Retry, j.Timeout, j.Overlap, j.MaxConcurrent, j.CatchUpWindow, j.PauseAfterFailures, j.ProgressTimeout}
}

func (j PartitionedJob) policies() policies {
	return policies{j.Retry, j.Timeout, j.Overlap, j.MaxConcurrent, j.CatchUpWindow, j.PauseAfterFailures, j.ProgressTimeout}
}

// Names of the kinds of job in errors.
const (
	kindScheduled   = "scheduled job"
	kindPartitioned = "partitioned job"
)

// handlerName returns the handler a job runs and the key that named it.
func handlerName(name, handler string) (string, string) {
	if handler != "" {
		return handler, "handler"
	}
	return name, ""
}

// origin records where the values of a loaded configuration were read, and
// which of its keys the loader has already reported.
type origin struct {
	lines    map[fieldRef]position // position of a key ("" key: the job)
	reported map[fieldRef]bool
	names    map[fieldRef]string // the job's name at load time, key ""
}

type fieldRef struct {
	kind string
	i    int
	key  string
}

// pos returns where the key of job i was read, if the job is still the one
// loaded there.
func (o *origin) pos(kind string, i int, name, key string) position {
	if o == nil || o.names[fieldRef{kind, i, ""}] != name {
		return position{}
	}
	if p, ok := o.lines[fieldRef{kind, i, key}]; ok {
		return p
	}
	return o.lines[fieldRef{kind, i, ""}]
}

func (o *origin) wasReported(kind string, i int, key string) bool {
	return o != nil && o.reported[fieldRef{kind, i, key}]
}

// jobChecker adds the problems of one job.
type jobChecker struct {
	p    *problems
	o    *origin
	kind string
	i    int
	name string // the job's name, or "" when it has none
}

func (c jobChecker) label() string {
	if c.kind == "" { // a setting outside any job
		return ""
	}
	if c.name == "" {
		return "#" + strconv.Itoa(c.i+1)
	}
	return c.name
}

func (c jobChecker) add(key string, err error) {
	if c.o.wasReported(c.kind, c.i, key) {
		return
	}
	c.p.add(c.o.pos(c.kind, c.i, c.name, key), c.kind, c.label(), key, err)
}

// timingKey is the key named by problems with the choice of timing.
const timingKey = "fixedDelay/fixedRate/cron"

// timing is what decides when a job runs.
type timing struct {
	delay, rate, initial time.Duration
	cron                 string
	misfire              simba.MisfirePolicy
}

func (c jobChecker) timing(t timing) {
	delay, rate, initial := t.delay, t.rate, t.initial
	var set []string
	if delay != 0 {
		set = append(set, fmt.Sprintf("fixedDelay %v", delay))
	}
	if rate != 0 {
		set = append(set, fmt.Sprintf("fixedRate %v", rate))
	}
	if t.cron != "" {
		set = append(set, "cron "+quote(t.cron))
	}
	switch len(set) {
	case 0:
		c.add(timingKey, fmt.Errorf("%w: neither fixedDelay, fixedRate nor cron is set", ErrTiming))
	case 1:
	case 2:
		c.add(timingKey, fmt.Errorf("%w: both are set (%s)", ErrTiming, strings.Join(set, ", ")))
	default:
		c.add(timingKey, fmt.Errorf("%w: all three are set (%s)", ErrTiming, strings.Join(set, ", ")))
	}
	if t.cron != "" {
		if err := simba.Cron(t.cron).Err(); err != nil {
			c.add("cron", fmt.Errorf("%w: %w", ErrInvalidValue, cronError(t.cron, err)))
		}
	}
	if t.misfire != simba.MisfireSkip && t.misfire != simba.MisfireRunOnce {
		c.add("misfire", fmt.Errorf("%w: unknown misfire policy %d", ErrInvalidValue, int(t.misfire)))
	}
	if delay < 0 {
		c.add("fixedDelay", fmt.Errorf("%w: must be positive, got %v", ErrDuration, delay))
	}
	if rate < 0 {
		c.add("fixedRate", fmt.Errorf("%w: must be positive, got %v", ErrDuration, rate))
	}
	if initial < 0 {
		c.add("initialDelay", fmt.Errorf("%w: must not be negative, got %v", ErrDuration, initial))
	}
}

// cronError is simba's error for a bad cron expression, shown with the
// expression and the parser's reason cut as every message of the package
// cuts the values of the input (see [FieldError.Error]).
func cronError(expr string, err error) error {
	msg := strings.TrimPrefix(err.Error(), simba.ErrInvalidSchedule.Error()+": ")
	msg = strings.TrimPrefix(msg, "cron expression "+strconv.Quote(expr))
	msg = strings.TrimPrefix(msg, ": ")
	return &shownError{msg: "cron expression " + quote(expr) + ": " + clip(msg), err: err}
}

// shownError is err with a message of its own.
type shownError struct {
	msg string
	err error
}

func (e *shownError) Error() string { return e.msg }
func (e *shownError) Unwrap() error { return e.err }

// checkConfig adds the problems of cfg on its own, without handlers.
func checkConfig(p *problems, cfg Config) {
	ns := nameSpace{names: map[string]nameOwner{}, groups: map[string]int{}}
	for _, j := range cfg.Partitioned {
		if _, seen := ns.groups[j.Group]; !seen && j.Group != "" {
			ns.groups[j.Group] = j.Partitions
		}
	}
	for i, j := range cfg.Scheduled {
		c := jobChecker{p: p, o: cfg.origin, kind: kindScheduled, i: i, name: j.Name}
		if j.Name == "" {
			c.add("name", fmt.Errorf("%w: missing", ErrInvalidValue))
		} else if err := checkLeaseName(j.Name); err != nil {
			c.add("name", err)
		} else {
			ns.claim(c, "name")
			if g, part, ok := partitionLease(j.Name, ns.groups); ok {
				c.add("name", fmt.Errorf("%w: %s is the lease of partition %d of partitioned job %s", ErrDuplicateName, quote(j.Name), part, quote(g)))
			}
		}
		c.timing(j.timing())
		c.command(j.Command, j.Handler)
		c.policies(j.policies())
		c.notify(j.Notify)
	}
	for i, j := range cfg.Partitioned {
		c := jobChecker{p: p, o: cfg.origin, kind: kindPartitioned, i: i, name: j.Group}
		if j.Group == "" {
			c.add("group", fmt.Errorf("%w: missing", ErrInvalidValue))
		} else if err := checkLeaseName(j.Group); err != nil {
			c.add("group", err)
		} else if last := fmt.Sprintf("%s.%d", j.Group, j.Partitions-1); j.Partitions > 0 && len(last) > backend.MaxNameLen {
			c.add("group", fmt.Errorf("%w: the lease of the last partition, %s, is longer than %d characters", ErrInvalidValue, quote(last), backend.MaxNameLen))
		} else {
			ns.claim(c, "group")
		}
		switch {
		case j.Partitions <= 0:
			c.add("partitions", fmt.Errorf("%w: must be positive, got %d", ErrInvalidValue, j.Partitions))
		case j.Partitions > simba.MaxPartitions:
			c.add("partitions", fmt.Errorf("%w: must be at most %d, got %d", ErrInvalidValue, simba.MaxPartitions, j.Partitions))
		}
		c.timing(j.timing())
		for _, k := range sortedKeys(j.Params) {
			if j.Partitions > 0 && (k < 0 || k >= j.Partitions) {
				c.add("shardingItemParameters", fmt.Errorf("%w: partition %d out of range [0, %d)", ErrInvalidValue, k, j.Partitions))
			}
		}
		c.command(j.Command, j.Handler)
		c.policies(j.policies())
		c.notify(j.Notify)
	}
	jobChecker{p: p, o: cfg.origin}.notify(cfg.Notify)
}

// commandKey is the key of a job's command line.
const commandKey = "command"

// commandExample is the command line the errors about one show.
const commandExample = "[pg_dump, --file, /backups/db.sql]"

// command adds the problems of a job's command line, if it has one: a
// handler named too, a blank program, a NUL byte (which no argument of a
// process can hold).
func (c jobChecker) command(cmd []string, handler string) {
	if len(cmd) == 0 {
		return
	}
	if handler != "" {
		c.add(commandKey, fmt.Errorf("%w: both command and handler (%s) are set; a job runs a command or a registered handler, not both", ErrInvalidValue, quote(handler)))
	}
	if strings.TrimSpace(cmd[0]) == "" {
		c.add(commandKey, fmt.Errorf("%w: the program (element 1) is %s; want the program and its arguments, such as %s", ErrInvalidValue, blankOrEmpty(cmd[0]), commandExample))
	}
	for n, arg := range cmd {
		if strings.IndexByte(arg, 0) >= 0 {
			c.add(commandKey, fmt.Errorf("%w: element %d holds a NUL byte, which no argument of a process can hold", ErrInvalidValue, n+1))
			break
		}
	}
}

// blankOrEmpty says whether s, which holds nothing but white space, is
// empty or blank.
func blankOrEmpty(s string) string {
	if s == "" {
		return "empty"
	}
	return "blank"
}

// isCommandJob reports whether job i of kind, with command cmd, runs a
// command: it has one, or it had one in its file that the loader refused.
func isCommandJob(o *origin, kind string, i int, cmd []string) bool {
	return len(cmd) > 0 || o.wasReported(kind, i, commandKey)
}

// CommandJobs returns the configuration with only the jobs of c that have a
// Command, in their order, and c's switch (Disabled): what `simba run --jobs
// FILE` runs. The positions of a loaded configuration are kept, so that
// [Validate] and [Run] still name the lines of the file. The jobs are
// copies, but their Command slices, Params maps and Notify values are c's;
// so is the Notify default.
func (c Config) CommandJobs() Config { return c.only(true) }

// HandlerJobs returns the configuration with only the jobs of c that have
// no Command, those that run a registered handler, as [Config.CommandJobs]
// does for the others. A caller that runs the command jobs of a file names
// the jobs it leaves to Go code from the result's Scheduled[i].Name and
// Partitioned[i].Group.
func (c Config) HandlerJobs() Config { return c.only(false) }

// only returns c with only its command jobs, or only the others.
func (c Config) only(commands bool) Config {
	out := Config{Disabled: c.Disabled, Notify: c.Notify}
	if c.origin != nil {
		out.origin = &origin{lines: map[fieldRef]position{}, reported: map[fieldRef]bool{}, names: map[fieldRef]string{}}
		c.origin.copyJob(out.origin, "", 0, 0) // the top level's notify
	}
	for i, j := range c.Scheduled {
		if (len(j.Command) > 0) == commands {
			c.origin.copyJob(out.origin, kindScheduled, i, len(out.Scheduled))
			out.Scheduled = append(out.Scheduled, j)
		}
	}
	for i, j := range c.Partitioned {
		if (len(j.Command) > 0) == commands {
			c.origin.copyJob(out.origin, kindPartitioned, i, len(out.Partitioned))
			out.Partitioned = append(out.Partitioned, j)
		}
	}
	return out
}

// copyJob copies what o knows of job i of kind into to, as job n.
func (o *origin) copyJob(to *origin, kind string, i, n int) {
	if o == nil {
		return
	}
	for ref, p := range o.lines {
		if ref.kind == kind && ref.i == i {
			to.lines[fieldRef{kind, n, ref.key}] = p
		}
	}
	for ref, r := range o.reported {
		if ref.kind == kind && ref.i == i {
			to.reported[fieldRef{kind, n, ref.key}] = r
		}
	}
	for ref, name := range o.names {
		if ref.kind == kind && ref.i == i {
			to.names[fieldRef{kind, n, ref.key}] = name
		}
	}
}

// nameSpace is the one space of names of scheduled and partitioned jobs.
type nameSpace struct {
	names  map[string]nameOwner
	groups map[string]int // group name → partitions, of the first job of each
}

type nameOwner struct {
	kind string
	i    int
	pos  position
}

// claim takes the job's name, or reports it taken by an earlier job.
func (ns nameSpace) claim(c jobChecker, key string) {
	if prev, ok := ns.names[c.name]; ok {
		where := ""
		if prev.pos.text != "" {
			where = ", " + prev.pos.text
		}
		c.add(key, fmt.Errorf("%w: %s is also the name of %s #%d%s", ErrDuplicateName, quote(c.name), prev.kind, prev.i+1, where))
		return
	}
	ns.names[c.name] = nameOwner{c.kind, c.i, c.o.pos(c.kind, c.i, c.name, key)}
}

// partitionLease reports whether name is the lease "{g}.{p}" of a partition p
// of one of the groups.
func partitionLease(name string, groups map[string]int) (group string, partition int, ok bool) {
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 {
		return "", 0, false
	}
	g, num := name[:dot], name[dot+1:]
	n, err := strconv.Atoi(num)
	if err != nil || strconv.Itoa(n) != num {
		return "", 0, false
	}
	if parts, ok := groups[g]; ok && n < parts {
		return g, n, true
	}
	return "", 0, false
}

// checkLeaseName checks a job or group name with simba's own rules.
func checkLeaseName(s string) error {
	if err := backend.CheckName(s); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	return nil
}

func sortedKeys(m map[int]string) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}

// Validate checks cfg and reg together, and returns every problem found as
// a [*ConfigError], or nil. It reports, naming the job and the key:
// duplicate names; not exactly one of FixedDelay, FixedRate and Cron; bad
// durations, cron expressions, misfire policies and partition counts; run
// policies out of range or that cannot go together (maxConcurrent without
// overlap allow); webhooks without an http or https URL or with bad
// headers; names
// that break the lease-name rules; sharding-item parameters of partitions
// that do not exist; a job whose handler is not registered (or is
// registered for the other kind of job); a job with both a Command and a
// Handler, or whose Command has a blank program or a NUL byte (each
// wrapping [ErrInvalidValue]); and the problems of registration (see
// [Registry]). A job with a Command needs no handler. A registered handler
// that no job uses is not a problem: [Warnings] reports it. [Run] calls
// Validate before starting anything, and without [WithCommandRunner]
// refuses the jobs with a Command too. A nil reg is an empty Registry.
func Validate(reg *Registry, cfg Config) error {
	if reg == nil {
		reg = new(Registry)
	}
	return validate(reg.snapshot(), cfg, true)
}

// Warnings returns what is suspicious in cfg and reg together but does not
// stop them from running, each a [*FieldError]: today, every registered
// handler that no job uses (wrapping [ErrUnusedHandler]), in the order of
// registration (a job with a Command uses none, not even the handler
// registered with its name); usually a job left out of the configuration, or a misspelt
// name. It returns nil when there is nothing to say. [Run] logs each at
// Warn, and so do [Load] and [LoadFile] given [WithRegistry]. A nil reg is
// an empty Registry.
func Warnings(reg *Registry, cfg Config) []error {
	if reg == nil {
		reg = new(Registry)
	}
	return warnings(reg.snapshot(), cfg)
}

// validate is Validate on a snapshot of a registry.
// Given runsCommands false, it refuses command jobs too, as [Run] does
// without [WithCommandRunner].
func validate(hs handlers, cfg Config, runsCommands bool) error {
	var p problems
	checkConfig(&p, cfg)
	checkHandlers(&p, hs, cfg)
	if !runsCommands {
		refuseCommands(&p, cfg)
	}
	return p.err()
}

// refuseCommands adds a problem for every command job: nothing runs them.
func refuseCommands(p *problems, cfg Config) {
	refuse := func(c jobChecker) {
		c.add(commandKey, fmt.Errorf("%w: a job with a command is run by `simba run --jobs FILE`, or by a Go program that gives jobs.Run the option jobs.WithCommandRunner; this one gives none", ErrNoHandler))
	}
	for i, j := range cfg.Scheduled {
		if len(j.Command) > 0 {
			refuse(jobChecker{p: p, o: cfg.origin, kind: kindScheduled, i: i, name: j.Name})
		}
	}
	for i, j := range cfg.Partitioned {
		if len(j.Command) > 0 {
			refuse(jobChecker{p: p, o: cfg.origin, kind: kindPartitioned, i: i, name: j.Group})
		}
	}
}

// checkHandlers adds the problems of registration and those of the jobs'
// handlers. A command job needs no handler.
func checkHandlers(p *problems, hs handlers, cfg Config) {
	p.errs = append(p.errs, hs.errs...)
	for i, j := range cfg.Scheduled {
		c := jobChecker{p: p, o: cfg.origin, kind: kindScheduled, i: i, name: j.Name}
		if isCommandJob(cfg.origin, kindScheduled, i, j.Command) {
			continue
		}
		if h, key := handlerName(j.Name, j.Handler); h != "" {
			c.matchHandler(hs, h, key, "scheduled")
		}
	}
	for i, j := range cfg.Partitioned {
		c := jobChecker{p: p, o: cfg.origin, kind: kindPartitioned, i: i, name: j.Group}
		if isCommandJob(cfg.origin, kindPartitioned, i, j.Command) {
			continue
		}
		if h, key := handlerName(j.Group, j.Handler); h != "" {
			c.matchHandler(hs, h, key, "partitioned")
		}
	}
}

// matchHandler reports a job's handler h that is missing or of the other
// kind. key is the key that named it, "" for the job's name.
func (c jobChecker) matchHandler(hs handlers, h, key, wantKind string) {
	if key == "" {
		key = "name"
		if c.kind == kindPartitioned {
			key = "group"
		}
	}
	got, ok := hs.byName[h]
	switch {
	case !ok:
		c.add(key, fmt.Errorf("%w: no handler registered as %s", ErrNoHandler, quote(h)))
	case got.kind() != wantKind:
		c.add(key, fmt.Errorf("%w: handler %s is registered for %s jobs", ErrNoHandler, quote(h), got.kind()))
	}
}

// warnings is Warnings on a snapshot of a registry. A command job uses no
// handler, not even the one registered with its name.
func warnings(hs handlers, cfg Config) []error {
	used := map[string]bool{}
	commandJob := map[string]string{} // a command job's name → its kind
	for _, j := range cfg.Scheduled {
		if len(j.Command) > 0 {
			commandJob[j.Name] = kindScheduled
			continue
		}
		h, _ := handlerName(j.Name, j.Handler)
		used[h] = true
	}
	for _, j := range cfg.Partitioned {
		if len(j.Command) > 0 {
			commandJob[j.Group] = kindPartitioned
			continue
		}
		h, _ := handlerName(j.Group, j.Handler)
		used[h] = true
	}
	var p problems
	for _, name := range hs.order {
		if used[name] {
			continue
		}
		msg := fmt.Sprintf("no %s job has the name %s or names it as its handler", hs.byName[name].kind(), quote(name))
		if kind, ok := commandJob[name]; ok {
			msg += fmt.Sprintf(" (the %s %s runs its command instead)", kind, quote(name))
		}
		p.add(position{}, "handler", name, "", fmt.Errorf("%w: %s", ErrUnusedHandler, msg))
	}
	return p.errs
}
