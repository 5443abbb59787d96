package jobs_test

import (
	"bytes"
	"cmp"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/jobstest"
	"github.com/simba-go/simba/jobs"
)

// FuzzDuration: any string is parsed or refused with ErrDuration, never a
// panic; what time.ParseDuration accepts is read the same (within the
// nanosecond its floating-point fraction may lose); a parsed duration's
// String form reads back as itself; so does any duration's.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{
		"1m30s", "1.5h", "300ms", "10s", "500ms", "1d", "2h", "5000", "0", "-1", "+2m",
		"PT1M", "PT0.5S", "P1D", "P1DT2H", "p1dt2h3m4,5s", "PT-1H", "-PT1H", "P", "PT",
		"1µs", "1μs", ".5s", "1.s", "2562047h47m16.854775807s", "-2562047h47m16.854775808s",
		"106751d23h47m16.854775807s", "1e3s", "1x", "", "P1Y", "PT0.1234567891S",
	} {
		f.Add(s, int64(0))
	}
	f.Add("", int64(-1<<63))
	f.Add("", int64(1<<63-1))
	f.Add("", int64(90061001001001))
	f.Fuzz(func(t *testing.T, s string, n int64) {
		got, err := jobs.ParseDuration(s)
		if err != nil {
			if !errors.Is(err, jobs.ErrDuration) {
				t.Fatalf("ParseDuration(%q): %v does not match ErrDuration", s, err)
			}
		} else if back, err := jobs.ParseDuration(got.String()); err != nil || back != got {
			t.Fatalf("ParseDuration(%q) = %v, whose String reads back as %v, %v", s, got, back, err)
		}
		if want, werr := time.ParseDuration(s); werr == nil {
			if err != nil {
				t.Fatalf("ParseDuration(%q): %v; time.ParseDuration reads %v", s, err, want)
			}
			if diff := got - want; diff < -1 || diff > 1 {
				t.Fatalf("ParseDuration(%q) = %v; time.ParseDuration reads %v", s, got, want)
			}
		}
		d := time.Duration(n)
		if back, err := jobs.ParseDuration(d.String()); err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %v, %v; want %v", d.String(), back, err, d)
		}
	})
}

// fuzzVars are the variables of FuzzPlaceholders: some refer to others,
// some to themselves.
var fuzzVars = map[string]string{
	"a":     "alpha",
	"b":     "${a}-beta",
	"c":     "${missing:${b}}",
	"loop":  "${loop2}",
	"loop2": "x${loop}",
	"empty": "",
	"db.eu": "pg",
	"r":     "eu",
	"brace": "{}",
	"dbl":   "${b}${b}${c}${c}",
	"dbl2":  "${dbl}${dbl}${dbl}${dbl}",
}

// FuzzPlaceholders: any string is expanded or refused with ErrPlaceholder,
// never a panic; a string without "${" is left as it is; without
// backslashes, a successful expansion leaves no placeholder behind; the
// result does not depend on the call.
func FuzzPlaceholders(f *testing.F) {
	for _, s := range []string{
		"", "plain", "${a}", "${b}", "${c}", "${loop}", "${missing}", "${missing:dflt}", "${missing:}",
		"${db.${r}}", "${a:${b:${c}}}", `\${a}`, "${", "}", "${}", "${:x}", "${a", "${a:{x}}", "$${a}}",
		"${dbl2}", "x${empty}y", "${brace}", "${${a}}", "${${empty}:z}",
	} {
		f.Add(s)
	}
	lookup := jobstest.LookupIn(fuzzVars)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := jobs.Expand(s, lookup)
		if err != nil {
			if !errors.Is(err, jobs.ErrPlaceholder) {
				t.Fatalf("Expand(%q): %v does not match ErrPlaceholder", s, err)
			}
			return
		}
		if !strings.Contains(s, "${") && got != s {
			t.Fatalf("Expand(%q) = %q, want it unchanged", s, got)
		}
		if !strings.Contains(s, `\`) && strings.Contains(got, "${") {
			t.Fatalf("Expand(%q) = %q still holds a placeholder", s, got)
		}
		if again, err := jobs.Expand(s, lookup); err != nil || again != got {
			t.Fatalf("Expand(%q) = %q, then %q, %v", s, got, again, err)
		}
	})
}

// FuzzConfig: any input, YAML or JSON, is loaded or refused with a
// *ConfigError of *FieldErrors that each match a sentinel, never a panic;
// a loaded configuration passes Validate with a handler for each job that
// has no command; a loaded command has a program and no handler beside it,
// and Config.CommandJobs and Config.HandlerJobs split the jobs in two.
func FuzzConfig(f *testing.F) {
	for _, s := range []string{jobstest.Config, docExample, "", "scheduled: [", "jobs: 1", "scheduling: {enabled: no}",
		`{"scheduled": [{"name": "a", "fixedRate": "PT1S"}], "partitioned": [{"group": "g", "partitions": 2, "fixedDelay": 1}]}`,
		"a: &x [*x]", "scheduled:\n  - &j {name: a, fixedDelay: 1s}\n  - {<<: *j, name: b}\n",
		"partitioned: [{group: g, partitions: 3, fixedRate: 1s, shardingItemParameters: {0: x, 2: y}}]",
		"scheduled: [{name: a, cron: \"CRON_TZ=Asia/Shanghai */5 * * * * *\", misfire: run-once, initial-delay: 1s}]",
		"scheduled: [{name: a, fixed-delay: 1s, fixedDelay: 2s, misfire: true}]",
		"scheduled: [{name: a, cron: \"61 * * * *\"}, {name: b, cron: \"@every 1s\", FIXED_RATE: 1s}]",
		`{"partitioned": [{"group": "g", "partitions": 2, "fixed_rate": "1s", "sharding-item-parameters": "0=a", "misfire": "skip"}]}`,
		commandConfig, policyExample,
		"scheduled: [{name: a, fixedDelay: 1s, retry: 3, overlap: allow, maxConcurrent: 2, timeout: 1m, catch-up-window: 1h, pause_after_failures: 2, progressTimeout: 5s}]",
		"scheduled: [{name: a, fixedDelay: 1s, retry: {attempts: -1, backoff: x, multiplier: NaN, jitter: 1e9}, overlap: later, maxConcurrent: 2}]",
		"notify: {webhook: {url: \"https://h/${X:y}\", headers: {A: b, a: c, \"B C\": d}}}\nscheduled: [{name: a, fixedRate: 1s, notify: {}}, {name: b, fixedRate: 1s, notify: {webhook: x}}]",
		`{"notify": {"webhook": {"url": "http://[::1", "timeout": "-1s", "attempts": "x"}}, "partitioned": [{"group": "g", "partitions": 1, "fixedDelay": "1s", "retry": [1], "notify": null}]}`,
		"scheduled: [{name: a, fixedDelay: 1s, command: [pg_dump, --file, \"${BACKUP_DIR:/backups}/db.sql\"]}]",
		"scheduled:\n  - name: a\n    fixedDelay: 1s\n    command:\n      - sh\n      - -c\n      - echo ${b}\n",
		"scheduled: [{name: a, fixedDelay: 1s, command: pg_dump}, {name: b, fixedDelay: 1s, command: []}]",
		"scheduled: [{name: a, fixedDelay: 1s, command: [\"\", x]}, {name: b, fixedRate: 1s, COMMAND: [x, {k: v}, [y], ~]}]",
		"scheduled: [{name: a, handler: h, cron: \"@hourly\", command: [x]}, {name: b, fixedDelay: 1s, command: {a: b}}]",
		"partitioned: [{group: g, partitions: 2, fixedDelay: 1s, command: [\"${loop}\", \"${missing: }\"]}]",
		"partitioned: [{group: g, partitions: 2, fixedDelay: 1s, command: [\"${missing: }\", \"${a}\"]}]",
		`{"scheduled": [{"name": "a", "fixedDelay": 1, "command": ["x", 1, true, null, "a\u0000b"]}], "partitioned": [{"group": "g", "partitions": 1, "fixedDelay": 1, "command": "x y"}]}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	sentinels := []error{jobs.ErrSyntax, jobs.ErrPlaceholder, jobs.ErrDuration, jobs.ErrTiming, jobs.ErrInvalidValue, jobs.ErrDuplicateName}
	f.Fuzz(func(t *testing.T, data []byte, isJSON bool) {
		format := jobs.YAML
		if isJSON {
			format = jobs.JSON
		}
		cfg, err := jobs.Load(bytes.NewReader(data), format, jobs.WithLookupEnv(jobstest.LookupIn(fuzzVars)))
		if err != nil {
			var ce *jobs.ConfigError
			if !errors.As(err, &ce) || len(ce.Errs) == 0 {
				t.Fatalf("Load: %v is not a *ConfigError", err)
			}
			for _, e := range ce.Errs {
				var fe *jobs.FieldError
				if !errors.As(e, &fe) {
					t.Fatalf("Load: problem %v is not a *FieldError", e)
				}
				matched := false
				for _, s := range sentinels {
					matched = matched || errors.Is(fe, s)
				}
				if !matched {
					t.Fatalf("Load: problem %v matches no sentinel", fe)
				}
			}
			return
		}
		checkCommand := func(name, handler string, cmd []string) {
			if cmd != nil && (len(cmd) == 0 || strings.TrimSpace(cmd[0]) == "" || handler != "") {
				t.Fatalf("Load: job %q has handler %q and command %q", name, handler, cmd)
			}
		}
		reg := jobs.NewRegistry()
		seen := map[string]bool{}
		for _, j := range cfg.Scheduled {
			checkCommand(j.Name, j.Handler, j.Command)
			if h := cmp.Or(j.Handler, j.Name); !seen[h] && j.Command == nil {
				seen[h] = true
				reg.Scheduled(h, noop)
			}
		}
		for _, j := range cfg.Partitioned {
			checkCommand(j.Group, j.Handler, j.Command)
			if h := cmp.Or(j.Handler, j.Group); !seen[h] && j.Command == nil {
				seen[h] = true
				reg.Partitioned(h, noopPart)
			}
		}
		c, h := cfg.CommandJobs(), cfg.HandlerJobs()
		if len(c.Scheduled)+len(h.Scheduled) != len(cfg.Scheduled) || len(c.Partitioned)+len(h.Partitioned) != len(cfg.Partitioned) {
			t.Fatalf("CommandJobs %+v and HandlerJobs %+v do not split %+v", c, h, cfg)
		}
		if err := jobs.Validate(reg, cfg); err != nil {
			var ce *jobs.ConfigError
			errors.As(err, &ce)
			for _, e := range ce.Errs {
				if !errors.Is(e, jobs.ErrNoHandler) { // one handler name used by both kinds of job
					t.Fatalf("Validate of a loaded configuration: %v", e)
				}
			}
		}
	})
}
