package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/jobstest"
	"github.com/simba-go/simba/jobs"
)

// commandConfig has a scheduled and a partitioned command job, and a job
// with a handler.
const commandConfig = `
scheduled:
  - name: backup
    fixedDelay: 1m
    command:
      - pg_dump
      - --file
      - ${BACKUP_DIR:/backups}/db.sql
  - name: report
    fixedDelay: 1m
partitioned:
  - group: export
    partitions: 3
    fixedRate: 1m
    shardingItemParameters: 0=north,1=south
    command: [export.sh, --region]
`

func TestLoadReadsCommands(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		format   jobs.Format
		env      map[string]string
		want     jobs.Config
	}{
		{"block list with a placeholder's default", commandConfig, jobs.YAML, nil, jobs.Config{
			Scheduled: []jobs.ScheduledJob{
				{Name: "backup", FixedDelay: time.Minute, Command: []string{"pg_dump", "--file", "/backups/db.sql"}},
				{Name: "report", FixedDelay: time.Minute},
			},
			Partitioned: []jobs.PartitionedJob{{Group: "export", Partitions: 3, FixedRate: time.Minute,
				Params: map[int]string{0: "north", 1: "south"}, Command: []string{"export.sh", "--region"}}},
		}},
		{"the environment overrides the default", `
scheduled:
  - {name: backup, fixedDelay: 1m, command: [pg_dump, --file, "${BACKUP_DIR:/backups}/db.sql"]}
`, jobs.YAML, map[string]string{"BACKUP_DIR": "/mnt/b"}, jobs.Config{Scheduled: []jobs.ScheduledJob{
			{Name: "backup", FixedDelay: time.Minute, Command: []string{"pg_dump", "--file", "/mnt/b/db.sql"}},
		}}},
		{"relaxed spelling, properties, values kept as written", `
properties: {tool: {path: /usr/bin/tool}}
scheduled:
  - name: tidy
    fixed-rate: 1s
    COMMAND: ["${tool.path}", 0755, true, "", "a b", 1e3]
`, jobs.YAML, nil, jobs.Config{Scheduled: []jobs.ScheduledJob{
			{Name: "tidy", FixedRate: time.Second, Command: []string{"/usr/bin/tool", "0755", "true", "", "a b", "1e3"}},
		}}},
		{"JSON", `{
  "scheduled": [{"name": "backup", "cron": "@daily", "command": ["pg_dump", "--jobs", 4, false]}],
  "partitioned": [{"group": "export", "partitions": 2, "fixedDelay": 1000, "command": ["${EXPORT:export.sh}"]}]
}`, jobs.JSON, nil, jobs.Config{
			Scheduled: []jobs.ScheduledJob{{Name: "backup", Cron: "@daily", Command: []string{"pg_dump", "--jobs", "4", "false"}}},
			Partitioned: []jobs.PartitionedJob{{Group: "export", Partitions: 2, FixedDelay: time.Second,
				Command: []string{"export.sh"}}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := jobs.Load(strings.NewReader(tc.in), tc.format, jobs.WithLookupEnv(jobstest.LookupIn(tc.env)))
			if err != nil {
				t.Fatal(err)
			}
			sameJobs(t, cfg, tc.want)
		})
	}
}

func TestLoadReportsCommandProblems(t *testing.T) {
	const key = "command"
	for _, tc := range []struct {
		name string
		yaml string
		want []problem
	}{
		{"a plain string", `
scheduled:
  - name: backup
    fixedDelay: 1m
    command: pg_dump --file /backups/db.sql
`, []problem{{"line 5", sched, "backup", key, jobs.ErrSyntax,
			`want a list of strings, such as [pg_dump, --file, /backups/db.sql], not the single value "pg_dump --file /backups/db.sql"`}}},
		{"a map", `
partitioned:
  - group: export
    partitions: 2
    fixedDelay: 1m
    command:
      program: export.sh
`, []problem{{"line 6", part, "export", key, jobs.ErrSyntax, "want a list of strings, such as [pg_dump, --file, /backups/db.sql], not a map"}}},
		{"nothing", `
scheduled:
  - name: backup
    fixedDelay: 1m
    command:
`, []problem{{"line 5", sched, "backup", key, jobs.ErrSyntax, "not nothing"}}},
		{"an empty list", `
scheduled:
  - {name: backup, fixedDelay: 1m, command: []}
`, []problem{{"line 3", sched, "backup", key, jobs.ErrInvalidValue, "an empty list; want the program and its arguments"}}},
		{"elements that are not single values", `
scheduled:
  - name: backup
    fixedDelay: 1m
    command:
      - pg_dump
      - {file: x}
      - [a, b]
      -
`, []problem{
			{"line 7", sched, "backup", key, jobs.ErrSyntax, "element 2: want a single value, not a map"},
			{"line 8", sched, "backup", key, jobs.ErrSyntax, "element 3: want a single value, not a list"},
			{"line 9", sched, "backup", key, jobs.ErrSyntax, `element 4 is null; quote it ("null", "~") or write "" for an empty argument`},
		}},
		{"an empty program", `
scheduled:
  - name: backup
    fixedDelay: 1m
    command:
      - ""
      - --file
`, []problem{{"line 6", sched, "backup", key, jobs.ErrInvalidValue, "the program (element 1) is empty"}}},
		{"a blank program from a placeholder", `
scheduled:
  - {name: backup, fixedDelay: 1m, command: ["${PROGRAM: }", x]}
`, []problem{{"line 3", sched, "backup", key, jobs.ErrInvalidValue, "the program (element 1) is blank"}}},
		{"an unresolved placeholder", `
scheduled:
  - name: backup
    fixedDelay: 1m
    command:
      - pg_dump
      - --file
      - ${BACKUP_DIR}/db.sql
`, []problem{{"line 8", sched, "backup", key, jobs.ErrPlaceholder, "command: bad placeholder: element 3: ${BACKUP_DIR} is not set"}}},
		{"a command and a handler", `
scheduled:
  - name: backup
    handler: dump
    fixedDelay: 1m
    command:               # the key's line, not the list's
      - pg_dump
`, []problem{{"line 6", sched, "backup", key, jobs.ErrInvalidValue, `both command and handler ("dump") are set; a job runs a command or a registered handler, not both`}}},
		{"with the other problems, in the order of lines", `
scheduled:
  - {name: a, fixedDelay: 1m, command: x}
  - {name: b, fixedDelay: soon, command: [""]}
partitioned:
  - {group: c, partitions: 0, fixedRate: 1s, command: [[x]]}
`, []problem{
			{"line 3", sched, "a", key, jobs.ErrSyntax, "not the single value"},
			{"line 4", sched, "b", "fixedDelay", jobs.ErrDuration, ""},
			{"line 4", sched, "b", key, jobs.ErrInvalidValue, "is empty"},
			{"line 6", part, "c", key, jobs.ErrSyntax, "element 1: want a single value, not a list"},
			{"line 6", part, "c", "partitions", jobs.ErrInvalidValue, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// With a registry, a refused command is not also a missing handler.
			cfg, err := jobs.Load(strings.NewReader(tc.yaml), jobs.YAML, jobstest.NoEnv, jobs.WithRegistry(jobs.NewRegistry()))
			checkProblems(t, err, tc.want...)
			if !reflect.DeepEqual(cfg, jobs.Config{}) {
				t.Errorf("Load returned a configuration with its error: %+v", cfg)
			}
		})
	}

	// A NUL byte, which JSON can carry and no argument of a process can.
	_, err := jobs.Load(strings.NewReader(`{"scheduled": [
  {"name": "backup", "fixedDelay": "1m",
   "command": ["pg_dump", "a\u0000b"]}]}`), jobs.JSON, jobstest.NoEnv)
	checkProblems(t, err, problem{"line 3", sched, "backup", key, jobs.ErrInvalidValue, "element 2 holds a NUL byte"})
}

func TestValidateCommandJobs(t *testing.T) {
	cmd := []string{"pg_dump", "--file", "/backups/db.sql"}
	cfg := jobs.Config{
		Scheduled: []jobs.ScheduledJob{
			{Name: "backup", FixedDelay: time.Hour, Command: cmd},
			{Name: "report", FixedDelay: time.Hour},
		},
		Partitioned: []jobs.PartitionedJob{{Group: "export", Partitions: 2, FixedRate: time.Minute, Command: []string{"export.sh"}}},
	}
	reg := jobs.NewRegistry()
	reg.Scheduled("report", noop)
	if err := jobs.Validate(reg, cfg); err != nil {
		t.Fatalf("Validate refused command jobs without handlers: %v", err)
	}
	if w := jobs.Warnings(reg, cfg); w != nil {
		t.Errorf("Warnings: %v", w)
	}

	// A handler registered under a command job's name is unused.
	reg.Scheduled("backup", noop)
	reg.Partitioned("export", noopPart)
	if err := jobs.Validate(reg, cfg); err != nil {
		t.Fatal(err)
	}
	checkProblems(t, &jobs.ConfigError{Errs: jobs.Warnings(reg, cfg)},
		problem{"", "handler", "backup", "", jobs.ErrUnusedHandler, `no scheduled job has the name "backup" or names it as its handler (the scheduled job "backup" runs its command instead)`},
		problem{"", "handler", "export", "", jobs.ErrUnusedHandler, `(the partitioned job "export" runs its command instead)`},
	)

	bad := jobs.Config{
		Scheduled: []jobs.ScheduledJob{
			{Name: "a", Handler: "report", FixedDelay: time.Hour, Command: cmd},
			{Name: "b", FixedDelay: time.Hour, Command: []string{" ", "x"}},
			{Name: "c", FixedDelay: time.Hour, Command: []string{"x", "y", "z\x00"}},
			{Name: "d", FixedDelay: time.Hour, Command: []string{}}, // no command: a handler job
		},
		Partitioned: []jobs.PartitionedJob{{Group: "e", Partitions: 1, FixedRate: time.Minute, Command: []string{""}}},
	}
	checkProblems(t, jobs.Validate(reg, bad),
		problem{"", sched, "a", "command", jobs.ErrInvalidValue, `both command and handler ("report") are set`},
		problem{"", sched, "b", "command", jobs.ErrInvalidValue, "the program (element 1) is blank"},
		problem{"", sched, "c", "command", jobs.ErrInvalidValue, "element 3 holds a NUL byte"},
		problem{"", part, "e", "command", jobs.ErrInvalidValue, "the program (element 1) is empty"},
		problem{"", sched, "d", "name", jobs.ErrNoHandler, `no handler registered as "d"`}, // handlers are checked after the rest
	)
}

func TestCommandJobsAndHandlerJobs(t *testing.T) {
	cfg, err := jobs.Load(strings.NewReader("scheduling: {enabled: false}\n"+commandConfig), jobs.YAML, jobstest.NoEnv)
	if err != nil {
		t.Fatal(err)
	}
	commands, handlers := cfg.CommandJobs(), cfg.HandlerJobs()
	sameJobs(t, commands, jobs.Config{Disabled: true, Scheduled: cfg.Scheduled[:1], Partitioned: cfg.Partitioned})
	sameJobs(t, handlers, jobs.Config{Disabled: true, Scheduled: cfg.Scheduled[1:]})

	// The positions of the file follow the jobs: report was on line 10.
	checkProblems(t, jobs.Validate(nil, handlers), problem{"line 10", sched, "report", "name", jobs.ErrNoHandler, ""})
	if err := jobs.Validate(nil, commands); err != nil {
		t.Errorf("Validate of the command jobs: %v", err)
	}
	sameJobs(t, jobs.Config{}.CommandJobs(), jobs.Config{})
	sameJobs(t, jobs.Config{}.HandlerJobs(), jobs.Config{})
}

// commandLog records the calls of a command runner.
type commandLog struct {
	mu   sync.Mutex
	runs []commandCall
}

type commandCall struct {
	lease string
	token uint64
	run   jobs.CommandRun
}

// runner records each call, then changes the command it was given, which
// must not change the next call's.
func (l *commandLog) runner(ctx context.Context, term *simba.Term, r jobs.CommandRun) error {
	l.mu.Lock()
	l.runs = append(l.runs, commandCall{term.Name(), term.Token(), jobs.CommandRun{
		Job: r.Job, Command: slices.Clone(r.Command), Partitioned: r.Partitioned, Partition: r.Partition,
	}})
	l.mu.Unlock()
	r.Command[0] = "changed by the runner"
	return nil
}

func (l *commandLog) calls() []commandCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
}

func TestRunRunsCommandJobsWithTheRunner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client := jobstest.NewClient(t, b, simba.WithTTL(jobstest.TTL))
		cfg, err := jobs.Load(strings.NewReader(commandConfig), jobs.YAML, jobstest.NoEnv)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Scheduled[0].FixedDelay = 100 * time.Millisecond // several runs
		reg := jobs.NewRegistry()
		var mu sync.Mutex
		reports := 0
		reg.Scheduled("report", func(context.Context) { mu.Lock(); reports++; mu.Unlock() })

		var log commandLog
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- jobs.Run(ctx, client, reg, cfg, jobstest.NoEnv, jobs.WithCommandRunner(log.runner)) }()
		time.Sleep(2 * time.Second) // the bubble's clock: 20 runs of backup
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}

		want := map[string]jobs.CommandRun{
			"backup":   {Job: "backup", Command: []string{"pg_dump", "--file", "/backups/db.sql"}},
			"export.0": {Job: "export", Command: []string{"export.sh", "--region"}, Partitioned: true, Partition: jobs.Partition{Index: 0, Param: "north"}},
			"export.1": {Job: "export", Command: []string{"export.sh", "--region"}, Partitioned: true, Partition: jobs.Partition{Index: 1, Param: "south"}},
			"export.2": {Job: "export", Command: []string{"export.sh", "--region"}, Partitioned: true, Partition: jobs.Partition{Index: 2}},
		}
		count := map[string]int{}
		for _, c := range log.calls() {
			count[c.lease]++
			w, ok := want[c.lease]
			if !ok {
				t.Errorf("the runner was called in the term of %s: %+v", c.lease, c.run)
				continue
			}
			if !reflect.DeepEqual(c.run, w) {
				t.Errorf("run in the term of %s (token %d):\n got %+v\nwant %+v", c.lease, c.token, c.run, w)
			}
			if c.token == 0 {
				t.Errorf("run of %s with token 0", c.lease)
			}
		}
		if count["backup"] < 5 {
			t.Errorf("backup ran %d times in 2s at a fixed delay of 100ms, want at least 5 (each run after the first saw the original command only if they all matched above)", count["backup"])
		}
		for _, lease := range []string{"export.0", "export.1", "export.2"} {
			if count[lease] != 1 {
				t.Errorf("%s ran %d times in 2s at a fixed rate of 1m, want once", lease, count[lease])
			}
		}
		mu.Lock()
		if reports == 0 {
			t.Error("the handler job report did not run beside the command jobs")
		}
		mu.Unlock()
		for _, lease := range []string{"backup", "report", "export.0", "export.1", "export.2"} {
			if _, _, held := b.Holder(lease); held {
				t.Errorf("%s still held after Run returned", lease)
			}
		}
	})
}

func TestRunWithoutARunnerRefusesCommandJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client := jobstest.NewClient(t, b)
		cfg, err := jobs.Load(strings.NewReader(commandConfig), jobs.YAML, jobstest.NoEnv)
		if err != nil {
			t.Fatal(err)
		}
		reg := jobs.NewRegistry()
		reg.Scheduled("report", noop)
		const msg = "a job with a command is run by `simba run --jobs FILE`, or by a Go program that gives jobs.Run the option jobs.WithCommandRunner"
		for _, tc := range []struct {
			name string
			env  map[string]string
		}{{"enabled", nil}, {"disabled", map[string]string{jobs.EnabledEnv: "false"}}} {
			// ctx never ends: Run must return by itself.
			err := jobs.Run(context.Background(), client, reg, cfg, jobs.WithLookupEnv(jobstest.LookupIn(tc.env)))
			checkProblems(t, err,
				problem{"line 5", sched, "backup", "command", jobs.ErrNoHandler, msg},
				problem{"line 16", part, "export", "command", jobs.ErrNoHandler, msg},
			)
		}
		if s := b.Stats(); s.Acquire != 0 || s.Join != 0 || len(b.History()) != 0 {
			t.Errorf("a refused configuration took leases or joined groups: %+v, %d grants", s, len(b.History()))
		}
		// The handler jobs alone run.
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- jobs.Run(ctx, client, reg, cfg.HandlerJobs(), jobstest.NoEnv) }()
		time.Sleep(time.Second)
		if _, _, held := b.Holder("report"); !held {
			t.Error("the handler jobs of the configuration did not start")
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run of the handler jobs: %v", err)
		}
		if err := jobs.Run(context.Background(), client, reg, cfg, jobs.WithCommandRunner(nil)); !errors.Is(err, jobs.ErrInvalidValue) {
			t.Errorf("WithCommandRunner(nil): %v, want ErrInvalidValue", err)
		}
	})
}

// The runner's error is a failed run, as a handler's is: the job goes on.
func TestRunCommandRunnerErrorsAreFailedRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		client := jobstest.NewClient(t, b)
		cfg := jobs.Config{Scheduled: []jobs.ScheduledJob{{Name: "backup", FixedDelay: time.Second, Command: []string{"false"}}}}
		var mu sync.Mutex
		var tokens []uint64
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- jobs.Run(ctx, client, nil, cfg, jobstest.NoEnv, jobs.WithCommandRunner(func(ctx context.Context, term *simba.Term, r jobs.CommandRun) error {
				mu.Lock()
				tokens = append(tokens, term.Token())
				mu.Unlock()
				return fmt.Errorf("%s: exit status 1", r.Command[0])
			}))
		}()
		time.Sleep(5500 * time.Millisecond)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(tokens) < 5 {
			t.Errorf("a failing command ran %d times in 5.5s at a fixed delay of 1s, want at least 5: a failed run must not stop the job", len(tokens))
		}
		for _, tok := range tokens {
			if tok != tokens[0] {
				t.Errorf("tokens %v: a failed run must not give the lease up", tokens)
				break
			}
		}
	})
}

// docCommandExample is the configuration of the package documentation's
// Command jobs.
const docCommandExample = `
scheduled:
  - name: nightly-backup
    cron: "0 0 2 * * *"      # 2 a.m. every day
    command:
      - pg_dump
      - --file
      - ${BACKUP_DIR:/backups}/db.sql
partitioned:
  - group: export
    partitions: 4
    fixedRate: 10m
    shardingItemParameters: 0=north,1=south,2=east,3=west
    command: [./export.sh, --verbose]   # once per planned run of each partition held
`

func TestLoadDocCommandExample(t *testing.T) {
	cfg, err := jobs.Load(strings.NewReader(docCommandExample), jobs.YAML, jobstest.NoEnv)
	if err != nil {
		t.Fatal(err)
	}
	sameJobs(t, cfg, jobs.Config{
		Scheduled: []jobs.ScheduledJob{{Name: "nightly-backup", Cron: "0 0 2 * * *",
			Command: []string{"pg_dump", "--file", "/backups/db.sql"}}},
		Partitioned: []jobs.PartitionedJob{{Group: "export", Partitions: 4, FixedRate: 10 * time.Minute,
			Params:  map[int]string{0: "north", 1: "south", 2: "east", 3: "west"},
			Command: []string{"./export.sh", "--verbose"}}},
	})
	if err := jobs.Validate(nil, cfg); err != nil {
		t.Errorf("Validate: %v", err)
	}
}
