package jobs_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/internal/jobstest"
	"github.com/simba-go/simba/jobs"
)

// policyExample declares every policy key, in YAML, some in relaxed
// spellings, with a top-level notifier that one job takes, one replaces
// and one turns off.
const policyExample = `
notify:
  webhook:
    url: https://alerts.example.com/simba?key=${ALERT_KEY:k1}
properties:
  token: s3cret
scheduled:
  - name: report
    fixedRate: 10s
    retry: {attempts: 3, backoff: 1s, maxBackoff: 1m, multiplier: 2, jitter: 0.2}
    timeout: 5m
    overlap: buffer-one
    catch-up-window: 1h
    pauseAfterFailures: 5
    progressTimeout: PT10M
  - name: digest
    fixedDelay: 1m
    retry: 2
    overlap: allow
    max_concurrent: 3
    notify:
      webhook:
        url: http://127.0.0.1:9/hook
        timeout: 2s
        attempts: 5
        headers:
          Authorization: Bearer ${token}
          X-Team: ops
  - name: quiet
    cron: "@hourly"
    OVERLAP: cancelRunning
    notify: {}
partitioned:
  - group: billing
    partitions: 2
    fixedRate: 500ms
    retry:
      attempts: 4
    timeout: 30s
    overlap: skip
    pauseAfterFailures: 2
    progressTimeout: 1m
`

// policyExampleConfig is what policyExample declares in an empty
// environment.
func policyExampleConfig() jobs.Config {
	dflt := &jobs.Notify{Webhook: &jobs.Webhook{URL: "https://alerts.example.com/simba?key=k1"}}
	return jobs.Config{
		Notify: dflt,
		Scheduled: []jobs.ScheduledJob{
			{Name: "report", FixedRate: 10 * time.Second,
				Retry:   simba.RetryPolicy{Attempts: 3, Backoff: time.Second, MaxBackoff: time.Minute, Multiplier: 2, Jitter: 0.2},
				Timeout: 5 * time.Minute, Overlap: simba.OverlapBufferOne, CatchUpWindow: time.Hour,
				PauseAfterFailures: 5, ProgressTimeout: 10 * time.Minute},
			{Name: "digest", FixedDelay: time.Minute, Retry: simba.RetryPolicy{Attempts: 2},
				Overlap: simba.OverlapAllow, MaxConcurrent: 3,
				Notify: &jobs.Notify{Webhook: &jobs.Webhook{URL: "http://127.0.0.1:9/hook", Timeout: 2 * time.Second, Attempts: 5,
					Headers: map[string]string{"Authorization": "Bearer s3cret", "X-Team": "ops"}}}},
			{Name: "quiet", Cron: "@hourly", Overlap: simba.OverlapCancelRunning, Notify: &jobs.Notify{}},
		},
		Partitioned: []jobs.PartitionedJob{
			{Group: "billing", Partitions: 2, FixedRate: 500 * time.Millisecond,
				Retry: simba.RetryPolicy{Attempts: 4}, Timeout: 30 * time.Second, Overlap: simba.OverlapSkip,
				PauseAfterFailures: 2, ProgressTimeout: time.Minute},
		},
	}
}

// samePolicies compares two configurations, their notifiers included.
func samePolicies(t *testing.T, got, want jobs.Config) {
	t.Helper()
	sameJobs(t, got, want)
	if !reflect.DeepEqual(got.Notify, want.Notify) {
		t.Errorf("top-level notify %+v, want %+v", got.Notify, want.Notify)
	}
	for i := range min(len(got.Scheduled), len(want.Scheduled)) {
		if g, w := got.Scheduled[i].Notify, want.Scheduled[i].Notify; !reflect.DeepEqual(g, w) {
			t.Errorf("%s: notify %+v, want %+v", want.Scheduled[i].Name, g, w)
		}
	}
}

func TestLoadReadsPolicies(t *testing.T) {
	cfg, err := jobs.Load(strings.NewReader(policyExample), jobs.YAML, jobstest.NoEnv)
	if err != nil {
		t.Fatal(err)
	}
	samePolicies(t, cfg, policyExampleConfig())
	if err := jobs.Validate(policyRegistry(), cfg); err != nil {
		t.Errorf("Validate: %v", err)
	}

	// The same in JSON, numbers as numbers.
	cfg, err = jobs.Load(strings.NewReader(`{
  "notify": {"webhook": {"url": "https://alerts.example.com/simba?key=${ALERT_KEY:k1}"}},
  "properties": {"token": "s3cret"},
  "scheduled": [
    {"name": "report", "fixedRate": "10s", "retry": {"attempts": 3, "backoff": "1s", "maxBackoff": "1m", "multiplier": 2, "jitter": 0.2},
     "timeout": "5m", "overlap": "buffer-one", "catchUpWindow": "1h", "pauseAfterFailures": 5, "progressTimeout": "PT10M"},
    {"name": "digest", "fixedDelay": "1m", "retry": 2, "overlap": "allow", "maxConcurrent": 3,
     "notify": {"webhook": {"url": "http://127.0.0.1:9/hook", "timeout": "2s", "attempts": 5,
       "headers": {"Authorization": "Bearer ${token}", "X-Team": "ops"}}}},
    {"name": "quiet", "cron": "@hourly", "overlap": "CANCEL_RUNNING", "notify": null}
  ],
  "partitioned": [
    {"group": "billing", "partitions": 2, "fixedRate": "500ms", "retry": {"attempts": 4}, "timeout": "30s",
     "overlap": "skip", "pauseAfterFailures": 2, "progressTimeout": "1m"}
  ]
}`), jobs.JSON, jobstest.NoEnv)
	if err != nil {
		t.Fatal(err)
	}
	samePolicies(t, cfg, policyExampleConfig())
}

// policyRegistry has a handler for each job of policyExample.
func policyRegistry() *jobs.Registry {
	reg := jobs.NewRegistry()
	for _, name := range []string{"report", "digest", "quiet"} {
		reg.ScheduledTerm(name, noopTerm)
	}
	reg.Partitioned("billing", noopPart)
	return reg
}

func TestLoadReportsPolicyProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []problem
	}{
		{"bad overlap", `
scheduled:
  - name: a
    fixedDelay: 1s
    overlap: sometimes
`, []problem{{"line 5", sched, "a", "overlap", jobs.ErrInvalidValue, `"sometimes" is not skip, buffer-one, cancel-running or allow`}}},
		{"maxConcurrent without allow", `
scheduled:
  - name: a
    fixedDelay: 1s
    overlap: skip
    maxConcurrent: 3
partitioned:
  - {group: g, partitions: 1, fixedRate: 1s, maxConcurrent: 2}
`, []problem{
			{"line 6", sched, "a", "maxConcurrent", jobs.ErrInvalidValue, "3 runs at once needs overlap: allow, not skip"},
			{"line 8", part, "g", "maxConcurrent", jobs.ErrInvalidValue, "needs overlap: allow, not the default"},
		}},
		{"negative and malformed values", `
scheduled:
  - name: a
    fixedDelay: 1s
    timeout: -1s
    catchUpWindow: soon
    pauseAfterFailures: -2
    progressTimeout: -1m
    maxConcurrent: lots
`, []problem{
			{"line 5", sched, "a", "timeout", jobs.ErrDuration, "must not be negative, got -1s"},
			{"line 6", sched, "a", "catchUpWindow", jobs.ErrDuration, `"soon"`},
			{"line 7", sched, "a", "pauseAfterFailures", jobs.ErrInvalidValue, "must not be negative, got -2"},
			{"line 8", sched, "a", "progressTimeout", jobs.ErrDuration, "must not be negative"},
			{"line 9", sched, "a", "maxConcurrent", jobs.ErrInvalidValue, `"lots" is not a whole number`},
		}},
		{"retry problems", `
scheduled:
  - name: a
    fixedDelay: 1s
    retry:
      attempts: -1
      backoff: -1s
      multiplier: 0.5
      jitter: 2
      tries: 3
  - name: b
    fixedDelay: 1s
    retry: thrice
  - name: c
    fixedDelay: 1s
    retry: -2
  - name: d
    fixedDelay: 1s
    retry: [1, 2]
`, []problem{
			{"line 6", sched, "a", "retry.attempts", jobs.ErrInvalidValue, "must not be negative, got -1"},
			{"line 7", sched, "a", "retry.backoff", jobs.ErrDuration, "must not be negative"},
			{"line 8", sched, "a", "retry.multiplier", jobs.ErrInvalidValue, "must be at least 1, got 0.5"},
			{"line 9", sched, "a", "retry.jitter", jobs.ErrInvalidValue, "must be from 0 to 1, got 2"},
			{"line 10", sched, "a", "retry.tries", jobs.ErrSyntax, "unknown key (known keys: attempts, backoff, maxBackoff, multiplier, jitter)"},
			{"line 13", sched, "b", "retry", jobs.ErrInvalidValue, `"thrice" is neither a whole number of attempts nor a map`},
			{"line 16", sched, "c", "retry.attempts", jobs.ErrInvalidValue, "must not be negative, got -2"},
			{"line 19", sched, "d", "retry", jobs.ErrSyntax, "want a map with the keys attempts"},
		}},
		{"webhook problems", `
notify:
  webhook:
    timeout: -1s
scheduled:
  - name: a
    fixedDelay: 1s
    notify:
      webhook:
        url: ftp://example.com/x
        attempts: -1
        headers:
          Content-Type: text/plain
          "Bad Name": x
          X-Ok: ok
          x-ok: again
  - name: b
    fixedDelay: 1s
    notify:
      webhook: https://example.com
      email: ops@example.com
  - name: c
    fixedDelay: 1s
    notify:
      webhook:
        url: "https://user:pw@example.com:badport/x"
        headers: [a]
`, []problem{
			{"line 3", "", "", "notify.webhook.url", jobs.ErrInvalidValue, "missing; want an http or https URL"},
			{"line 4", "", "", "notify.webhook.timeout", jobs.ErrDuration, "must not be negative"},
			{"line 10", sched, "a", "notify.webhook.url", jobs.ErrInvalidValue, `"ftp://example.com/x" is not an absolute http or https URL`},
			{"line 11", sched, "a", "notify.webhook.attempts", jobs.ErrInvalidValue, "must not be negative, got -1"},
			{"line 13", sched, "a", "notify.webhook.headers", jobs.ErrInvalidValue, `"Content-Type" is set by the notifier`},
			{"line 14", sched, "a", "notify.webhook.headers", jobs.ErrInvalidValue, `"Bad Name" is not an HTTP header name`},
			{"line 16", sched, "a", "notify.webhook.headers", jobs.ErrSyntax, `header "x-ok" given twice, as "X-Ok" (line 15)`},
			{"line 20", sched, "b", "notify.webhook", jobs.ErrSyntax, "want a map with the keys url, timeout, attempts, headers, not a single value"},
			{"line 21", sched, "b", "notify.email", jobs.ErrSyntax, "unknown key (known keys: webhook)"},
			{"line 26", sched, "c", "notify.webhook.url", jobs.ErrInvalidValue, `not a URL: "https://…@example.com:badport/x"`},
			{"line 27", sched, "c", "notify.webhook.headers", jobs.ErrSyntax, "want a map of header names to values"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jobs.Load(strings.NewReader(tc.yaml), jobs.YAML, jobstest.NoEnv)
			checkProblems(t, err, tc.want...)
		})
	}
}

// Validate checks the policies of a Config built in code as Load checks
// those of a file, and CommandJobs keeps the top-level notifier.
func TestValidatePolicies(t *testing.T) {
	reg := policyRegistry()
	bad := jobs.Config{
		Notify: &jobs.Notify{Webhook: &jobs.Webhook{URL: "example.com/hook"}},
		Scheduled: []jobs.ScheduledJob{
			{Name: "report", FixedDelay: time.Second, Overlap: simba.OverlapPolicy(9), Retry: simba.RetryPolicy{MaxBackoff: -time.Second}},
			{Name: "digest", FixedDelay: time.Second, Overlap: simba.OverlapAllow, MaxConcurrent: -1},
		},
		Partitioned: []jobs.PartitionedJob{
			{Group: "billing", Partitions: 1, FixedDelay: time.Second, Timeout: -time.Second,
				Notify: &jobs.Notify{Webhook: &jobs.Webhook{URL: "https://example.com", Headers: map[string]string{"X-A": "a\nb"}}}},
		},
	}
	checkProblems(t, jobs.Validate(reg, bad),
		problem{"", sched, "report", "retry.maxBackoff", jobs.ErrDuration, "must not be negative"},
		problem{"", sched, "report", "overlap", jobs.ErrInvalidValue, "unknown overlap policy 9"},
		problem{"", sched, "digest", "maxConcurrent", jobs.ErrInvalidValue, "must be at least 1, got -1"},
		problem{"", part, "billing", "timeout", jobs.ErrDuration, "must not be negative"},
		problem{"", part, "billing", "notify.webhook.headers", jobs.ErrInvalidValue, `the value of header "X-A" holds a line break`},
		problem{"", "", "", "notify.webhook.url", jobs.ErrInvalidValue, `"example.com/hook" is not an absolute http or https URL`},
	)

	cfg, err := jobs.Load(strings.NewReader(`
notify: {webhook: {url: "https://example.com/${MISSING}"}}
scheduled: [{name: a, fixedDelay: 1s, command: [true]}]
`), jobs.YAML, jobstest.NoEnv)
	checkProblems(t, err, problem{"line 2", "", "", "notify.webhook.url", jobs.ErrPlaceholder, "MISSING"})
	cfg, err = jobs.Load(strings.NewReader(`
notify: {webhook: {url: "https://example.com/"}}
scheduled: [{name: a, fixedDelay: 1s, command: ["true"]}, {name: b, fixedDelay: 1s}]
`), jobs.YAML, jobstest.NoEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.CommandJobs().Notify; got != cfg.Notify {
		t.Errorf("CommandJobs' Notify %+v, want the file's %+v", got, cfg.Notify)
	}
}
