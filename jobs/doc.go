// Package jobs declares an application's leader jobs by name and runs them
// on a [simba.Client]: scheduled jobs, each run on a schedule by the one
// node that leads its election, and partitioned jobs, whose partitions are
// spread over the live nodes and each run on a schedule by its holder.
// Handlers are registered in code, with their shapes checked by the
// compiler; when and where they run is declared in code ([Config]) or in a
// YAML or JSON file ([LoadFile]).
//
//	reg := jobs.NewRegistry()
//	reg.ScheduledTerm("report", func(ctx context.Context, term *simba.Term) error {
//		return reports.Generate(ctx, term.Token())
//	})
//	reg.PartitionedWithParam("billing", func(ctx context.Context, term *simba.Term, p jobs.Partition) error {
//		return billing.Run(ctx, p.Index, p.Param, term.Token())
//	})
//
//	cfg, err := jobs.LoadFile("jobs.yaml")
//	if err != nil {
//		return err // every problem of the file, with its line
//	}
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	err = jobs.Run(ctx, client, reg, cfg) // until SIGINT or SIGTERM
//	client.Close()                         // after the jobs handed off
//
// # Handlers
//
// A scheduled job runs a handler registered with [Registry.Scheduled]
// (func(ctx), for work that needs no term) or [Registry.ScheduledTerm]
// (func(ctx, *simba.Term) error). A partitioned job runs one registered with
// [Registry.Partitioned] (func(ctx, *simba.Term, partition int) error) or,
// to receive the partition's sharding-item parameter too,
// [Registry.PartitionedWithParam] (func(ctx, *simba.Term, jobs.Partition)
// error). A job runs the handler with its own name unless it names another
// with the handler key, so one handler may serve several jobs.
//
// Handlers run as the functions of [simba.Election.Schedule] and
// [simba.Group.Schedule] do: once per planned run, while this node holds the
// term, with ctx cancelled when the term ends. Pass term.Token() with every
// write to a shared resource. A job may run a command line instead of a
// handler: see Command jobs below.
//
// # Configuration files
//
// A file is one map with five keys, all optional:
//
//	scheduling:
//	  enabled: true            # false: no job starts (default true)
//	properties:                # values for ${...} placeholders
//	  app:
//	    region: eu
//	    report-every: 1m
//	notify:                    # the notifier of every job without its own
//	  webhook:
//	    url: ${ALERT_URL}
//	scheduled:                 # jobs run by one node at a time
//	  - name: report           # election (lease) name, unique; also the handler's
//	    fixedDelay: ${app.report-every}
//	    initialDelay: 10s      # default 0s
//	  - name: report-${app.region}-audit
//	    handler: report        # another job with the same handler
//	    fixedRate: PT30S
//	  - name: nightly
//	    cron: "CRON_TZ=Asia/Shanghai 0 0 2 * * *"  # seconds first, a time zone
//	    misfire: run-once      # default skip
//	partitioned:               # jobs split into partitions over the nodes
//	  - group: billing         # group name, unique; partition p is lease "billing.p"
//	    partitions: ${BILLING_PARTITIONS:4}
//	    fixedRate: 500ms
//	    shardingItemParameters: 0=Beijing,1=Shanghai,2=Guangzhou,3=Shenzhen
//	  - group: invoices
//	    partitions: 2
//	    fixedDelay: 5000       # milliseconds
//	    shardingItemParameters: {0: north, 1: south}
//
// A scheduled job has name, an optional handler, exactly one of fixedDelay,
// fixedRate (positive durations) and cron, an optional initialDelay (default 0s,
// not negative) and an optional misfire policy. cron takes what [simba.Cron]
// takes: five fields, or six with leading seconds ("0 */5 * * * *"),
// descriptors such as "@hourly", and a time zone prefix
// ("CRON_TZ=Asia/Shanghai 0 0 2 * * *"); quote it in YAML. misfire is skip
// (the default: starts missed by an overrun or across fail-over are skipped)
// or run-once (one catch-up run; see [simba.MisfireRunOnce]); ElasticJob's
// misfire: true and false mean run-once and skip. A partitioned job has group, an optional handler, partitions
// (from 1 to [simba.MaxPartitions]), the same timing keys, applied per partition, and optional
// shardingItemParameters: ElasticJob's "0=Beijing,1=Shanghai" string (see
// [ParseShardingItemParameters]) or a map from partition numbers to labels.
// Either kind of job may have a command instead of a handler (see Command
// jobs). The same file in JSON has the same keys. Keys are read as Spring Boot's
// relaxed binding reads them: fixedDelay, fixed-delay, fixed_delay and
// FIXED_DELAY are one key (errors name it in camel case). One key given in
// two spellings in one map is an error naming both; an unknown key is an
// error.
//
// # Run policies
//
// Either kind of job may say what happens to each of its runs (for a
// partitioned job, each partition's): the keys of [ScheduledJob] and
// [PartitionedJob] that stand for the options of [simba.Schedule] and
// [simba.TaskOption]s, all optional:
//
//	scheduled:
//	  - name: report
//	    fixedRate: 10m
//	    retry:                   # or retry: 3, the attempts alone
//	      attempts: 3            # runs per planned start, the first included
//	      backoff: 1s            # before the first retry (default 1s)
//	      maxBackoff: 1m         # the cap (default 1m, or backoff if longer)
//	      multiplier: 2          # growth of the wait (default 2)
//	      jitter: 0.2            # random fraction of each wait, 0 to 1
//	    timeout: 5m              # each run's ctx ends after it
//	    overlap: buffer-one      # skip, buffer-one, cancel-running or allow
//	    maxConcurrent: 3         # runs at once, with overlap: allow only
//	    catchUpWindow: 1h        # missed starts older than this are skipped
//	    pauseAfterFailures: 5    # disable the job after 5 failed runs in a row
//	    progressTimeout: 10m     # give the term up after 10m without progress
//	    notify:                  # this job's notifier; notify: {} for none
//	      webhook:
//	        url: https://alerts.example.com/simba
//	        timeout: 5s          # per attempt (default 5s)
//	        attempts: 3          # (default 3)
//	        headers:
//	          Authorization: Bearer ${ALERT_TOKEN}
//
// retry is [simba.Schedule.WithRetry] (see [simba.RetryPolicy]: retries
// stay within the term); timeout [simba.Schedule.WithTimeout]; overlap
// [simba.Schedule.WithOverlap] (its spellings are relaxed like keys:
// cancel-running, cancelRunning, CANCEL_RUNNING; without it the misfire
// policy decides: see [simba.OverlapPolicy]); maxConcurrent
// [simba.Schedule.WithMaxConcurrent], an error without overlap: allow;
// catchUpWindow [simba.Schedule.WithCatchUpWindow]; pauseAfterFailures
// [simba.Schedule.WithPauseAfter] (`simba enable` resumes the job);
// progressTimeout the task option [simba.WithProgressWatchdog]: a handler
// reports progress with term.Progress(), and a command job's every line of
// output counts as progress. Zero values are the defaults. Durations take
// the syntaxes below, counts whole numbers; a negative value is an error.
//
// notify, in a job or at the top level (for every job without a notify of
// its own), names a webhook told of every failed run: see Failure
// notifications. A notify in code is [Notify], the Config's default is
// Config.Notify.
//
// Scheduled jobs and partitioned jobs share one space of names, as their
// leases do: no two jobs may have one name, and a scheduled job must not be
// named like a partition "{group}.{p}" of a partitioned job. Names follow
// the lease-name rules of package simba.
//
// # Command jobs
//
// A job may run a command line instead of a registered handler: the key
// command, a list of strings (block or flow style), the program and its
// arguments. Each element is expanded for placeholders, as every value is;
// the command is not split at spaces and no shell reads it (write
// [sh, -c, "..."] for one).
//
//	scheduled:
//	  - name: nightly-backup
//	    cron: "0 0 2 * * *"      # 2 a.m. every day
//	    command:
//	      - pg_dump
//	      - --file
//	      - ${BACKUP_DIR:/backups}/db.sql
//	partitioned:
//	  - group: export
//	    partitions: 4
//	    fixedRate: 10m
//	    shardingItemParameters: 0=north,1=south,2=east,3=west
//	    command: [./export.sh, --verbose]   # once per planned run of each partition held
//
// In code it is ScheduledJob.Command and PartitionedJob.Command. A command
// job needs no handler; command and handler together are an error, and so
// are a value that is not a list (a plain string included), an empty list,
// an element that is not a single value, and an empty program. A handler
// registered under a command job's name is unused ([Warnings]).
//
// `simba run --jobs FILE` runs the command jobs of a file: in each planned
// run, while this node holds the term, it starts the command as a child
// process, and ends it when the term ends. The child finds its term in its
// environment: SIMBA_ELECTION, SIMBA_TOKEN, SIMBA_GROUP and SIMBA_PARTITION
// (for partitioned jobs, with SIMBA_PARTITION_PARAM when the partition has
// a sharding-item parameter), SIMBA_DEADLINE, SIMBA_DEADLINE_FILE and
// SIMBA_MEMBER; `simba help run` says what each holds and how the child is
// signalled. Runs on a schedule also get SIMBA_RUN_SOURCE (normal,
// misfire, trigger or fail-over) and SIMBA_ATTEMPT (1, and more for a
// retry), and a triggered run its arguments (simba trigger NAME --arg
// KEY=VALUE) as SIMBA_ARG_<KEY>, KEY upper-cased with every character
// other than A-Z, 0-9 and _ as _ (when two keys give one name, the first in
// byte order wins). simba run reads the file again on SIGHUP: it logs the
// problems of a bad file and keeps its jobs as they were, or else updates
// them as [Jobs.Update] does. [Config.CommandJobs] and [Config.HandlerJobs]
// split one file in two, the jobs simba run can run and those it leaves to
// a Go program.
//
// A Go program that gives a configuration with command jobs to [Start] or
// [Run] has it refused before anything starts, with an error per command
// job (wrapping [ErrNoHandler]), unless it gives [WithCommandRunner]: the
// function that runs a command, called once per planned run, as a handler
// would be, with the term and a [CommandRun]. Run cfg.HandlerJobs() to run
// only the jobs with handlers.
//
// # Placeholders
//
// Every value (not keys) may hold ${NAME} and ${NAME:default} placeholders,
// expanded as [Expand] says: nested, with defaults, cycles reported. A NAME
// is looked up in this order:
//
//  1. the environment variable NAME, as written;
//  2. the environment variable of NAME's relaxed form, in upper case with
//     "." and "-" as "_" (app.report-every: APP_REPORT_EVERY), as Spring
//     Boot binds environment variables;
//  3. the key NAME of the properties map, addressed with dots through nested
//     maps (app.region above) and [i] for list items (hosts[0]).
//
// So the environment overrides the file. Values found are expanded in turn, so
// properties may refer to each other and to the environment. A name found
// nowhere, with no default, is an error that names it. Placeholders are
// resolved once, by [Load] and [LoadFile]: a [Config] holds plain values.
//
// In YAML, quote a value that holds a placeholder inside a flow collection
// ({...} or [...]), whose braces YAML would read as its own:
// {name: report, fixedDelay: "${DELAY:1m}"}. Block style needs no quotes.
//
// # Durations
//
// fixedDelay, fixedRate, initialDelay, timeout, catchUpWindow,
// progressTimeout, retry's backoff and maxBackoff and a webhook's timeout
// (in any relaxed spelling) take the syntaxes of
// [ParseDuration]: Go's ("1m30s"), Spring Boot's ("10s", "500ms", "1d"),
// a plain integer in milliseconds ("5000"), and ISO-8601 ("PT1M", "PT0.5S",
// "P1DT2H").
//
// # Errors
//
// [Load], [LoadFile], [Validate], [Start] and [Run] report every problem of
// a configuration at once, before anything starts, as a [*ConfigError]: one
// [*FieldError] per problem, naming the position, the job, the key, and
// wrapping a sentinel error ([ErrDuplicateName], [ErrTiming], [ErrDuration],
// [ErrPlaceholder], [ErrNoHandler], …) for errors.Is. Given [WithRegistry],
// [Load] and [LoadFile] check the handlers too, so that one round shows the
// problems of the file and of its handlers together:
//
//	simba/jobs: 2 problems in the job configuration:
//		jobs.yaml:9: scheduled job "report": fixedDelay/fixedRate/cron: exactly one of fixedDelay, fixedRate and cron must be set: both are set (fixedDelay 1m0s, fixedRate 30s)
//		jobs.yaml:14: partitioned job "billing": group: no such handler: no handler registered as "billing"
//
// A registered handler that no job uses is not a problem but a warning
// ([Warnings]): [Start] logs it at Warn and starts. It is usually a job
// left out of the configuration, or a misspelt name.
//
// # Lifecycle
//
// [Start] checks everything, starts the jobs and returns a [*Jobs], which
// follows the lifecycle of [simba.Client]: Stop begins stopping every job
// and returns at once (a handler stops the jobs with it), Done is closed
// once every job has stopped (its runs returned, its leases released),
// Shutdown waits for that within a ctx, and Close without bound. [Run] is
// Start, then Shutdown once its ctx ends, by default without bound
// ([WithShutdownTimeout] sets one).
//
// Stop the jobs before closing the client: jobs first, then the session.
// The jobs' leases are then released one by one as their runs return, and
// another node takes every job over at once; a client closed first ends its
// session, and the other nodes wait for the session's TTL.
//
// # Failure notifications
//
// A job with a webhook (its own notify, or the top level's) posts a JSON
// body ([FailureNotice]) to its URL once per failed run, from the node that
// ran it, with Content-Type application/json and the headers given:
//
//	{
//	  "job": "billing",             // the job's name, or its group
//	  "lease": "billing.1",         // the term's lease
//	  "group": "billing",           // partitioned jobs only
//	  "partition": 1,               // partitioned jobs only
//	  "token": 7,                   // the term's fencing token
//	  "member": "node-a",           // who ran it
//	  "source": "trigger",          // normal, misfire, trigger or fail-over
//	  "args": {"region": "eu"},     // a trigger's arguments, if any
//	  "attempts": 3,                // attempts made (see retry)
//	  "start": "2026-12-06T10:00:00.0000005Z",
//	  "duration": "1.5s",           // from the first attempt's start to the last's end
//	  "durationMs": 1500,
//	  "error": "boom",              // the last attempt's error
//	  "failures": 2                 // failed runs in a row, this one included
//	}
//
// An answer other than 2xx, a failed request and one that outlasts the
// webhook's timeout are failed attempts, retried after a jittered backoff
// (from 1s, doubling, at most 30s) up to its attempts; a notification
// that still fails is logged at Warn with the job and the last error. A
// notification never holds the job up: at most 4 per job are in flight,
// and a failed run past them is logged and not notified. [Jobs.Shutdown]
// waits for the notifications in flight, each at most to the end of its
// attempt under way, and retries no more. The URL shown in logs has no
// user information and no query. See [Webhook].
//
// # Jobs at run time
//
// [Jobs.Update] makes the running jobs those of a new Config: it checks it
// whole first (a bad one changes nothing), stops and hands off the jobs it
// removes, restarts those it changes, starts those it adds, and leaves the
// others running in their terms, untouched. `simba run --jobs FILE` calls
// it when SIGHUP tells it to read its file again.
//
// # Turning jobs off
//
// One switch disables every job: scheduling.enabled: false in the file
// (Config.Disabled in code), or the environment variable
// SIMBA_SCHEDULING_ENABLED ([EnabledEnv]). The environment wins when it is
// set, in either direction, so that one deployment can turn the jobs off (or
// on) without editing the file. A disabled Start logs that it starts
// nothing (Run then returns when its ctx ends). The configuration is still
// checked.
package jobs
