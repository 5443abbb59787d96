package jobs_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/internal/jobstest"
	"github.com/simba-go/simba/jobs"
)

// fieldErrors returns the problems of a *ConfigError.
func fieldErrors(t *testing.T, err error) []*jobs.FieldError {
	t.Helper()
	var ce *jobs.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *ConfigError", err)
	}
	var out []*jobs.FieldError
	for _, e := range ce.Errs {
		var fe *jobs.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("problem %v is not a *FieldError", e)
		}
		out = append(out, fe)
	}
	return out
}

// problem is what a test expects of one FieldError.
type problem struct {
	pos, kind, name, key string
	is                   error
	msg                  string // a part of the message
}

func (p problem) matches(fe *jobs.FieldError) bool {
	return fe.Pos == p.pos && fe.Kind == p.kind && fe.Name == p.name && fe.Key == p.key &&
		errors.Is(fe, p.is) && strings.Contains(fe.Error(), p.msg)
}

// checkProblems checks that err reports exactly the problems want, in order.
func checkProblems(t *testing.T, err error, want ...problem) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %d problems", len(want))
	}
	got := fieldErrors(t, err)
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			t.Errorf("missing problem %+v", want[i])
		case i >= len(want):
			t.Errorf("unexpected problem: %v", got[i])
		case !want[i].matches(got[i]):
			t.Errorf("problem %d: got %v (%+v)\nwant %+v", i, got[i], *got[i], want[i])
		}
	}
	if !strings.HasPrefix(err.Error(), "simba/jobs: ") {
		t.Errorf("error %q lacks the package prefix", err)
	}
}

const (
	sched = "scheduled job"
	part  = "partitioned job"
)

func TestLoadReportsEveryConfigError(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []problem
	}{
		{"duplicate scheduled names", `
scheduled:
  - name: report
    fixedDelay: 1m
  - name: report
    fixedRate: 1m
`, []problem{{"line 5", sched, "report", "name", jobs.ErrDuplicateName, `"report" is also the name of scheduled job #1, line 3`}}},
		{"a group named like a scheduled job", `
scheduled:
  - {name: billing, fixedDelay: 1m}
partitioned:
  - {group: billing, partitions: 2, fixedDelay: 1m}
`, []problem{{"line 5", part, "billing", "group", jobs.ErrDuplicateName, "also the name of scheduled job #1"}}},
		{"a scheduled job named like a partition", `
scheduled:
  - {name: billing.1, fixedDelay: 1m}
  - {name: billing.2, fixedDelay: 1m}
  - {name: billing.01, fixedDelay: 1m}
partitioned:
  - {group: billing, partitions: 2, fixedDelay: 1m}
`, []problem{{"line 3", sched, "billing.1", "name", jobs.ErrDuplicateName, `"billing.1" is the lease of partition 1 of partitioned job "billing"`}}},
		{"duplicate groups", `
partitioned:
  - {group: billing, partitions: 2, fixedDelay: 1m}
  - {group: billing, partitions: 3, fixedDelay: 1m}
`, []problem{{"line 4", part, "billing", "group", jobs.ErrDuplicateName, "partitioned job #1"}}},
		{"duplicate names made by placeholders", `
properties: {a: x}
scheduled:
  - {name: "${a}", fixedDelay: 1m}
  - {name: x, fixedDelay: 1m}
`, []problem{{"line 5", sched, "x", "name", jobs.ErrDuplicateName, ""}}},
		{"both fixedDelay and fixedRate", `
scheduled:
  - name: report
    fixedDelay: 1m
    fixedRate: 30s
`, []problem{{"line 3", sched, "report", "fixedDelay/fixedRate/cron", jobs.ErrTiming, "both are set (fixedDelay 1m0s, fixedRate 30s)"}}},
		{"neither fixedDelay nor fixedRate", `
partitioned:
  - group: billing
    partitions: 4
    initialDelay: 1s
`, []problem{{"line 3", part, "billing", "fixedDelay/fixedRate/cron", jobs.ErrTiming, "neither fixedDelay, fixedRate nor cron is set"}}},
		{"unresolved placeholder", `
scheduled:
  - name: report
    fixedDelay: ${REPORT_DELAY}
`, []problem{{"line 4", sched, "report", "fixedDelay", jobs.ErrPlaceholder, "${REPORT_DELAY} is not set"}}},
		{"unresolved placeholder in a name", `
scheduled:
  - name: report-${region}
    fixedDelay: 1m
`, []problem{{"line 3", sched, "#1", "name", jobs.ErrPlaceholder, "${region} is not set"}}},
		{"placeholder cycle", `
properties:
  a: ${b}
  b: ${a}
scheduled:
  - {name: report, fixedDelay: "${a}"}
`, []problem{{"line 6", sched, "report", "fixedDelay", jobs.ErrPlaceholder, "a -> b -> a"}}},
		{"bad duration", `
scheduled:
  - {name: report, fixedDelay: 1x}
`, []problem{{"line 3", sched, "report", "fixedDelay", jobs.ErrDuration, `unknown unit "x"`}}},
		{"bad ISO duration", `
scheduled:
  - {name: report, fixedRate: P1M}
`, []problem{{"line 3", sched, "report", "fixedRate", jobs.ErrDuration, "no fixed length"}}},
		{"empty duration", `
scheduled:
  - {name: report, fixedRate: ""}
`, []problem{{"line 3", sched, "report", "fixedRate", jobs.ErrDuration, "empty"}}},
		{"zero fixedDelay", `
scheduled:
  - {name: report, fixedDelay: 0s}
`, []problem{{"line 3", sched, "report", "fixedDelay", jobs.ErrDuration, `must be positive, got "0s"`}}},
		{"negative fixedRate", `
scheduled:
  - {name: report, fixedRate: -PT1S}
`, []problem{{"line 3", sched, "report", "fixedRate", jobs.ErrDuration, "must be positive, got -1s"}}},
		{"negative initialDelay", `
scheduled:
  - {name: report, fixedRate: 1s, initialDelay: -5ms}
`, []problem{{"line 3", sched, "report", "initialDelay", jobs.ErrDuration, "must not be negative, got -5ms"}}},
		{"zero partitions", `
partitioned:
  - {group: billing, partitions: 0, fixedDelay: 1m}
`, []problem{{"line 3", part, "billing", "partitions", jobs.ErrInvalidValue, "must be positive, got 0"}}},
		{"negative partitions", `
partitioned:
  - {group: billing, partitions: -3, fixedDelay: 1m}
`, []problem{{"line 3", part, "billing", "partitions", jobs.ErrInvalidValue, "must be positive, got -3"}}},
		{"missing partitions", `
partitioned:
  - {group: billing, fixedDelay: 1m}
`, []problem{{"line 3", part, "billing", "partitions", jobs.ErrInvalidValue, "missing"}}},
		{"partitions not a number", `
partitioned:
  - {group: billing, partitions: four, fixedDelay: 1m}
`, []problem{{"line 3", part, "billing", "partitions", jobs.ErrInvalidValue, `"four" is not a whole number`}}},
		{"sharding-item parameter out of range", `
partitioned:
  - {group: billing, partitions: 2, fixedDelay: 1m, shardingItemParameters: "0=a,2=c"}
`, []problem{{"line 3", part, "billing", "shardingItemParameters", jobs.ErrInvalidValue, "partition 2 out of range [0, 2)"}}},
		{"malformed sharding-item parameters", `
partitioned:
  - {group: billing, partitions: 2, fixedDelay: 1m, shardingItemParameters: "0=a,1"}
`, []problem{{"line 3", part, "billing", "shardingItemParameters", jobs.ErrInvalidValue, `"1" is not partition=label`}}},
		{"sharding-item parameter map with a bad key", `
partitioned:
  - group: billing
    partitions: 2
    fixedDelay: 1m
    shardingItemParameters:
      0: a
      one: b
`, []problem{{"line 8", part, "billing", "shardingItemParameters", jobs.ErrInvalidValue, `"one" is not a partition number`}}},
		{"unknown key", `
scheduled:
  - name: report
    fixed-delai: 1m
`, []problem{
			{"line 3", sched, "report", "fixedDelay/fixedRate/cron", jobs.ErrTiming, "neither"},
			{"line 4", sched, "report", "fixed-delai", jobs.ErrSyntax, "unknown key (known keys: name, handler, fixedDelay"},
		}},
		{"unknown top-level key", `
jobs: []
`, []problem{{"line 2", "", "", "jobs", jobs.ErrSyntax, "known keys: scheduling, properties, scheduled, partitioned"}}},
		{"a map where a list is expected", `
scheduled:
  report: {fixedDelay: 1m}
`, []problem{{"line 3", "", "", "scheduled", jobs.ErrSyntax, "want a list of jobs, not a map"}}},
		{"a list where a value is expected", `
scheduled:
  - {name: [a, b], fixedDelay: 1m}
`, []problem{{"line 3", sched, "#1", "name", jobs.ErrSyntax, "want a single value, not a list"}}},
		{"bad switch", `
scheduling:
  enabled: maybe
`, []problem{{"line 3", "", "", "scheduling.enabled", jobs.ErrInvalidValue, `"maybe" is not true or false`}}},
		{"bad name", `
scheduled:
  - {name: "daily report", fixedDelay: 1m}
  - {name: -x, fixedDelay: 1m}
`, []problem{
			{"line 3", sched, "daily report", "name", jobs.ErrInvalidValue, `character ' ' at byte 5`},
			{"line 4", sched, "-x", "name", jobs.ErrInvalidValue, `character '-' at byte 0`},
		}},
		{"group too long for its partitions", "partitioned:\n  - {group: " + strings.Repeat("g", 127) + ", partitions: 10, fixedDelay: 1m}\n",
			[]problem{{"line 2", part, strings.Repeat("g", 127), "group", jobs.ErrInvalidValue, "longer than 128"}}},
		{"missing name", `
scheduled:
  - fixedDelay: 1m
`, []problem{{"line 3", sched, "#1", "name", jobs.ErrInvalidValue, "missing"}}},
		{"YAML syntax", "scheduled: [\n", []problem{{"", "", "", "", jobs.ErrSyntax, "yaml:"}}},
		{"repeated key", `
scheduled:
  - name: a
    fixedDelay: 1m
    fixedDelay: 2m
`, []problem{{"", "", "", "", jobs.ErrSyntax, `line 5: key "fixedDelay" repeated (first on line 4)`}}},
		{"everything at once, in the order of lines", `
scheduling: {enabled: sometimes}
scheduled:
  - {name: a, fixedDelay: 1m, fixedRate: 1m}
  - {name: a, fixedDelay: soon}
partitioned:
  - {group: b, partitions: 0, fixedRate: "${RATE}"}
`, []problem{
			{"line 2", "", "", "scheduling.enabled", jobs.ErrInvalidValue, ""},
			{"line 4", sched, "a", "fixedDelay/fixedRate/cron", jobs.ErrTiming, "both"},
			{"line 5", sched, "a", "fixedDelay", jobs.ErrDuration, ""},
			{"line 5", sched, "a", "name", jobs.ErrDuplicateName, ""},
			{"line 7", part, "b", "fixedRate", jobs.ErrPlaceholder, ""},
			{"line 7", part, "b", "partitions", jobs.ErrInvalidValue, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := jobs.Load(strings.NewReader(tc.yaml), jobs.YAML, jobstest.NoEnv)
			checkProblems(t, err, tc.want...)
			if !reflect.DeepEqual(cfg, jobs.Config{}) {
				t.Errorf("Load returned a configuration with its error: %+v", cfg)
			}
		})
	}
}

func TestLoadJSONReportsLines(t *testing.T) {
	_, err := jobs.Load(strings.NewReader(`{
  "scheduled": [
    {"name": "report", "fixedDelay": "1m"},
    {"name": "report",
     "fixedRate": "nope"}
  ]
}`), jobs.JSON, jobstest.NoEnv)
	checkProblems(t, err,
		problem{"line 4", sched, "report", "name", jobs.ErrDuplicateName, "scheduled job #1, line 3"},
		problem{"line 5", sched, "report", "fixedRate", jobs.ErrDuration, `"nope"`},
	)
	for _, bad := range []string{`{"scheduled": [}`, `{"a": 1, "a": 2}`, `{} {}`, `[1`, `{"scheduled": 5}`} {
		if _, err := jobs.Load(strings.NewReader(bad), jobs.JSON, jobstest.NoEnv); !errors.Is(err, jobs.ErrSyntax) {
			t.Errorf("Load(%s): %v, want ErrSyntax", bad, err)
		}
	}
}

// docExample is the configuration in the package documentation.
const docExample = `
scheduling:
  enabled: true            # false: no job starts (default true)
properties:                # values for ${...} placeholders
  app:
    region: eu
    report-every: 1m
scheduled:                 # @SimbaScheduled
  - name: report           # election (lease) name, unique; also the handler's
    fixedDelay: ${app.report-every}
    initialDelay: 10s      # default 0s
  - name: report-${app.region}-audit
    handler: report        # another job with the same handler
    fixedRate: PT30S
partitioned:               # @SimbaPartitioned
  - group: billing         # group name, unique; partition p is lease "billing.p"
    partitions: ${BILLING_PARTITIONS:4}
    fixedRate: 500ms
    shardingItemParameters: 0=Beijing,1=Shanghai,2=Guangzhou,3=Shenzhen
  - group: invoices
    partitions: 2
    fixedDelay: 5000       # milliseconds
    shardingItemParameters: {0: north, 1: south}
`

// docExampleConfig is what docExample declares in an empty environment.
func docExampleConfig() jobs.Config {
	return jobs.Config{
		Scheduled: []jobs.ScheduledJob{
			{Name: "report", FixedDelay: time.Minute, InitialDelay: 10 * time.Second},
			{Name: "report-eu-audit", Handler: "report", FixedRate: 30 * time.Second},
		},
		Partitioned: []jobs.PartitionedJob{
			{Group: "billing", Partitions: 4, FixedRate: 500 * time.Millisecond,
				Params: map[int]string{0: "Beijing", 1: "Shanghai", 2: "Guangzhou", 3: "Shenzhen"}},
			{Group: "invoices", Partitions: 2, FixedDelay: 5 * time.Second,
				Params: map[int]string{0: "north", 1: "south"}},
		},
	}
}

// sameJobs compares the jobs and the switch of two configurations.
func sameJobs(t *testing.T, got, want jobs.Config) {
	t.Helper()
	if got.Disabled != want.Disabled || !reflect.DeepEqual(got.Scheduled, want.Scheduled) || !reflect.DeepEqual(got.Partitioned, want.Partitioned) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestLoadDocExample(t *testing.T) {
	cfg, err := jobs.Load(strings.NewReader(docExample), jobs.YAML, jobstest.NoEnv)
	if err != nil {
		t.Fatal(err)
	}
	sameJobs(t, cfg, docExampleConfig())

	// The environment overrides the properties, by exact and relaxed name.
	env := map[string]string{"BILLING_PARTITIONS": "8", "APP_REPORT_EVERY": "PT2M", "app.region": "us"}
	cfg, err = jobs.Load(strings.NewReader(docExample), jobs.YAML, jobs.WithLookupEnv(jobstest.LookupIn(env)))
	if err != nil {
		t.Fatal(err)
	}
	want := docExampleConfig()
	want.Scheduled[0].FixedDelay = 2 * time.Minute
	want.Scheduled[1].Name = "report-us-audit"
	want.Partitioned[0].Partitions = 8
	sameJobs(t, cfg, want)
}

func TestLoadJSONMatchesYAML(t *testing.T) {
	cfg, err := jobs.Load(strings.NewReader(`{
  "scheduling": {"enabled": true},
  "properties": {"app": {"region": "eu", "report-every": "1m"}},
  "scheduled": [
    {"name": "report", "fixedDelay": "${app.report-every}", "initialDelay": "10s"},
    {"name": "report-${app.region}-audit", "handler": "report", "fixedRate": "PT30S"}
  ],
  "partitioned": [
    {"group": "billing", "partitions": "${BILLING_PARTITIONS:4}", "fixedRate": "500ms",
     "shardingItemParameters": "0=Beijing,1=Shanghai,2=Guangzhou,3=Shenzhen"},
    {"group": "invoices", "partitions": 2, "fixedDelay": 5000,
     "shardingItemParameters": {"0": "north", "1": "south"}}
  ]
}`), jobs.JSON, jobstest.NoEnv)
	if err != nil {
		t.Fatal(err)
	}
	sameJobs(t, cfg, docExampleConfig())
}

func TestLoadSwitchAndShapes(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		want       jobs.Config
	}{
		{"empty", "", nil, jobs.Config{}},
		{"comments only", "# nothing yet\n", nil, jobs.Config{}},
		{"disabled", "scheduling: {enabled: false}", nil, jobs.Config{Disabled: true}},
		{"disabled by a placeholder", "scheduling: {enabled: '${JOBS_ON:true}'}", map[string]string{"JOBS_ON": "0"}, jobs.Config{Disabled: true}},
		{"null lists", "scheduled:\npartitioned:\nscheduling:\nproperties:\n", nil, jobs.Config{}},
		{"anchors and merge keys", `
scheduled:
  - &base {name: a, fixedRate: 1m, initialDelay: 5s}
  - <<: *base
    name: b
    initialDelay: ${slow}
properties: {slow: 1h}
`, nil, jobs.Config{Scheduled: []jobs.ScheduledJob{
			{Name: "a", FixedRate: time.Minute, InitialDelay: 5 * time.Second},
			{Name: "b", FixedRate: time.Minute, InitialDelay: time.Hour},
		}}},
		{"list properties", `
properties: {regions: [north, south]}
scheduled: [{name: "r-${regions[1]}", fixedDelay: 1}]
`, nil, jobs.Config{Scheduled: []jobs.ScheduledJob{{Name: "r-south", FixedDelay: time.Millisecond}}}},
		{"flat dotted properties", `
properties: {app.region: west}
scheduled: [{name: "r-${app.region}", fixedDelay: 1s}]
`, nil, jobs.Config{Scheduled: []jobs.ScheduledJob{{Name: "r-west", FixedDelay: time.Second}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := jobs.Load(strings.NewReader(tc.yaml), jobs.YAML, jobs.WithLookupEnv(jobstest.LookupIn(tc.env)))
			if err != nil {
				t.Fatal(err)
			}
			sameJobs(t, cfg, tc.want)
		})
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	yml := write("jobs.yml", "scheduled:\n  - {name: a, fixedDelay: 1m}\n  - {name: a, fixedDelay: 1m}\n")
	_, err := jobs.LoadFile(yml, jobstest.NoEnv)
	checkProblems(t, err, problem{yml + ":3", sched, "a", "name", jobs.ErrDuplicateName, "scheduled job #1, " + yml + ":2"})

	js := write("jobs.JSON", `{"scheduled": [{"name": "a", "fixedDelay": "1m"}]}`)
	cfg, err := jobs.LoadFile(js, jobstest.NoEnv)
	if err != nil || len(cfg.Scheduled) != 1 {
		t.Errorf("LoadFile(%s) = %+v, %v", js, cfg, err)
	}
	if _, err := jobs.LoadFile(write("jobs.toml", ""), jobstest.NoEnv); !errors.Is(err, jobs.ErrSyntax) {
		t.Errorf("LoadFile(.toml): %v, want ErrSyntax", err)
	}
	if _, err := jobs.LoadFile(filepath.Join(dir, "missing.yaml"), jobstest.NoEnv); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadFile(missing): %v, want os.ErrNotExist", err)
	}
}

func TestParseShardingItemParameters(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[int]string
	}{
		{"", map[int]string{}},
		{"0=Beijing,1=Shanghai", map[int]string{0: "Beijing", 1: "Shanghai"}},
		{" 0 = Beijing , 2=Guangzhou, ", map[int]string{0: "Beijing", 2: "Guangzhou"}},
		{"1=a=b", map[int]string{1: "a=b"}},
		{"3=", map[int]string{3: ""}},
	} {
		got, err := jobs.ParseShardingItemParameters(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseShardingItemParameters(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"Beijing", "x=Beijing", "-1=a", "0=a,0=b", "=a"} {
		if _, err := jobs.ParseShardingItemParameters(in); !errors.Is(err, jobs.ErrInvalidValue) {
			t.Errorf("ParseShardingItemParameters(%q): %v, want ErrInvalidValue", in, err)
		}
	}
}

func TestLoadReadsCronMisfireAndRelaxedNames(t *testing.T) {
	cfg, err := jobs.Load(strings.NewReader(`
scheduled:
  - name: report
    cron: "CRON_TZ=Asia/Shanghai 0 */5 * * * *"
    misfire: run-once
    initial-delay: 2s
  - name: audit
    fixed-delay: 1m
    misfire: true          # ElasticJob's form
  - name: tidy
    fixed_rate: 30s
    misfire: skip
partitioned:
  - group: billing
    partitions: 2
    fixedRate: 1s
    sharding-item-parameters: 0=Beijing,1=Shanghai
    misfire: RUN_ONCE
`), jobs.YAML, jobstest.NoEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := []jobs.ScheduledJob{
		{Name: "report", Cron: "CRON_TZ=Asia/Shanghai 0 */5 * * * *", Misfire: simba.MisfireRunOnce, InitialDelay: 2 * time.Second},
		{Name: "audit", FixedDelay: time.Minute, Misfire: simba.MisfireRunOnce},
		{Name: "tidy", FixedRate: 30 * time.Second},
	}
	if !reflect.DeepEqual(cfg.Scheduled, want) {
		t.Errorf("scheduled:\n%+v\nwant\n%+v", cfg.Scheduled, want)
	}
	p := cfg.Partitioned[0]
	if p.FixedRate != time.Second || p.Misfire != simba.MisfireRunOnce || p.Params[1] != "Shanghai" {
		t.Errorf("partitioned: %+v", p)
	}
}

func TestLoadReportsCronMisfireAndSpellingProblems(t *testing.T) {
	_, err := jobs.Load(strings.NewReader(`
scheduled:
  - name: a
    cron: "61 * * * *"
  - name: b
    cron: "@hourly"
    fixedRate: 1m
  - name: c
    fixedDelay: 1m
    fixed-delay: 2m
  - name: d
    fixedDelay: 1m
    misfire: sometimes
  - name: e
    cron: "0 0 30 2 *"
`), jobs.YAML, jobstest.NoEnv)
	checkProblems(t, err,
		problem{"line 4", sched, "a", "cron", jobs.ErrInvalidValue, `cron expression "61 * * * *"`},
		problem{"line 5", sched, "b", "fixedDelay/fixedRate/cron", jobs.ErrTiming, `both are set (fixedRate 1m0s, cron "@hourly")`},
		problem{"line 10", sched, "c", "fixedDelay", jobs.ErrSyntax, "given twice, as fixedDelay (line 9) and as fixed-delay (line 10)"},
		problem{"line 13", sched, "d", "misfire", jobs.ErrInvalidValue, `"sometimes" is not skip or run-once`},
		problem{"line 15", sched, "e", "cron", jobs.ErrInvalidValue, "never fires"},
	)
	if !errors.Is(err, simba.ErrInvalidSchedule) {
		t.Errorf("a bad cron expression does not match simba.ErrInvalidSchedule: %v", err)
	}
}

func TestLoadFileWithRegistryReportsEverythingInOneRound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(path, []byte(`scheduled:
  - name: report
    cron: "not a cron"
  - name: audit
    handler: audti
    fixedDelay: soon
    colour: blue
`), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := jobs.NewRegistry()
	reg.Scheduled("report", noop)
	reg.Scheduled("audit", noop)
	_, err := jobs.LoadFile(path, jobstest.NoEnv, jobs.WithRegistry(reg))
	checkProblems(t, err,
		problem{path + ":3", sched, "report", "cron", jobs.ErrInvalidValue, `"not a cron"`},
		problem{path + ":5", sched, "audit", "handler", jobs.ErrNoHandler, `no handler registered as "audti"`},
		problem{path + ":6", sched, "audit", "fixedDelay", jobs.ErrDuration, ""},
		problem{path + ":7", sched, "audit", "colour", jobs.ErrSyntax, "unknown key"},
	)

	// An unused handler is logged, not refused.
	if err := os.WriteFile(path, []byte("scheduled:\n  - name: report\n    fixedDelay: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var log logBuffer
	if _, err := jobs.LoadFile(path, jobstest.NoEnv, jobs.WithRegistry(reg), jobs.WithLogger(log.logger())); err != nil {
		t.Fatalf("LoadFile refused an unused handler: %v", err)
	}
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), `handler \"audit\": handler not used`) {
		t.Errorf("the unused handler is not logged at Warn:\n%s", log.String())
	}
	if _, err := jobs.LoadFile(path, jobs.WithRegistry(nil)); !errors.Is(err, jobs.ErrInvalidValue) {
		t.Errorf("WithRegistry(nil): %v, want ErrInvalidValue", err)
	}
}
