package jobs

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
)

// The policies of a loaded file reach the simba options they stand for:
// each job's Schedule is the one the same calls of package simba build,
// and its watchdog and notifier (its own, the default, or none) are the
// task options it adds. What the options then do is package simba's.
func TestPlansOfLoadedPolicies(t *testing.T) {
	cfg, err := Load(strings.NewReader(`
notify: {webhook: {url: "https://alerts.example.com/all"}}
scheduled:
  - name: report
    fixedRate: 10s
    misfire: run-once
    retry: {attempts: 3, backoff: 2s, maxBackoff: 1m, multiplier: 1.5, jitter: 0.1}
    timeout: 5m
    overlap: buffer-one
    catchUpWindow: 1h
    pauseAfterFailures: 5
    progressTimeout: 10m
  - {name: digest, fixedDelay: 1m, retry: 2, overlap: allow, maxConcurrent: 3,
     notify: {webhook: {url: "http://127.0.0.1:9/hook", attempts: 5}}}
  - {name: quiet, cron: "@hourly", notify: {}}
partitioned:
  - {group: billing, partitions: 2, fixedRate: 500ms, timeout: 30s, overlap: cancel-running, progressTimeout: 1m}
`), YAML, WithLookupEnv(func(string) (string, bool) { return "", false }))
	if err != nil {
		t.Fatal(err)
	}
	dflt := &Webhook{URL: "https://alerts.example.com/all"}
	for _, tc := range []struct {
		got      plan
		schedule simba.Schedule
		str      string
		watchdog time.Duration
		webhook  *Webhook
	}{
		{planScheduled(withNotify(cfg.Scheduled[0], cfg)),
			simba.FixedRate(10 * time.Second).WithMisfire(simba.MisfireRunOnce).
				WithRetry(simba.RetryPolicy{Attempts: 3, Backoff: 2 * time.Second, MaxBackoff: time.Minute, Multiplier: 1.5, Jitter: 0.1}).
				WithTimeout(5 * time.Minute).WithOverlap(simba.OverlapBufferOne).WithCatchUpWindow(time.Hour).WithPauseAfter(5),
			"fixed rate 10s, misfire run-once, overlap buffer-one, timeout 5m0s, 3 attempts, catch-up window 1h0m0s, pause after 5 failures",
			10 * time.Minute, dflt},
		{planScheduled(withNotify(cfg.Scheduled[1], cfg)),
			simba.FixedDelay(time.Minute).WithRetry(simba.RetryPolicy{Attempts: 2}).WithOverlap(simba.OverlapAllow).WithMaxConcurrent(3),
			"fixed delay 1m0s, overlap allow, at most 3 at once, 2 attempts",
			0, &Webhook{URL: "http://127.0.0.1:9/hook", Attempts: 5}},
		{planScheduled(withNotify(cfg.Scheduled[2], cfg)), simba.Cron("@hourly"), `cron "@hourly"`, 0, nil},
		{planPartitioned(withNotifyP(cfg.Partitioned[0], cfg)),
			simba.FixedRate(500 * time.Millisecond).WithTimeout(30 * time.Second).WithOverlap(simba.OverlapCancelRunning),
			"fixed rate 500ms, overlap cancel-running, timeout 30s", time.Minute, dflt},
	} {
		if err := tc.got.schedule.Err(); err != nil {
			t.Errorf("%s: %v", tc.str, err)
		}
		if !reflect.DeepEqual(tc.got.schedule, tc.schedule) {
			t.Errorf("schedule %s, want %s (%#v)", tc.got.schedule, tc.str, tc.got.schedule)
		}
		if s := tc.got.schedule.String(); s != tc.str {
			t.Errorf("schedule %q, want %q", s, tc.str)
		}
		if tc.got.watchdog != tc.watchdog {
			t.Errorf("%s: watchdog %v, want %v", tc.str, tc.got.watchdog, tc.watchdog)
		}
		if !reflect.DeepEqual(tc.got.webhook, tc.webhook) {
			t.Errorf("%s: webhook %+v, want %+v", tc.str, tc.got.webhook, tc.webhook)
		}
	}
}

// withNotify is job with the notifier in force, as Start gives it.
func withNotify(job ScheduledJob, cfg Config) ScheduledJob {
	job.Notify = effectiveNotify(job.Notify, cfg.Notify)
	return job
}

func withNotifyP(job PartitionedJob, cfg Config) PartitionedJob {
	job.Notify = effectiveNotify(job.Notify, cfg.Notify)
	return job
}
