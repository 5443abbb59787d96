package console

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/internal/records"
)

// What the run policies leave in the records (issue 42), as the pages
// show it: a retry's attempt, a triggered run's arguments, entries of
// skipped starts, and jobs that paused themselves.

func TestHistoryShowsAttemptsArgsAndSkippedStarts(t *testing.T) {
	sc := newScene(t)
	at := func(s int) time.Time { return drawnAt.Add(time.Duration(s-60) * time.Second) }
	runs := []records.Run{
		{Seq: 1, Token: 7, Member: "a", Start: at(0), End: at(1), Result: "failed", Error: "boom", Source: "normal", Attempt: 1},
		{Seq: 2, Token: 7, Member: "a", Start: at(2), End: at(3), Result: "succeeded", Source: "normal", Attempt: 2},
		{Seq: 3, Token: 7, Member: "a", Start: at(4), End: at(5), Result: "succeeded", Source: "trigger", Attempt: 1, Args: map[string]string{"day": "2025-03-04", "note": `<b>two</b> words`}},
		{Seq: 4, Token: 7, Member: "a", Start: at(6), End: at(8), Result: records.Skipped, Error: "overlap", Source: "normal", Skipped: 3},
	}
	for _, r := range runs {
		sc.put(records.HistoryKey("report", r.Seq), r)
	}
	sc.status(records.Status{Lease: "report", Schedule: "fixed rate 1s", HistorySeq: 4, Succeeded: 2, Failed: 1, SkippedRuns: 3, LastRun: &runs[3]})

	p, html := sc.draw("/jobs/report", drawnAt)
	require.NotNil(t, p.Job)
	retry := rowOf(html, `<tr data-seq="2" data-source="normal" data-result="succeeded" data-attempt="2">`)
	assert.Contains(t, retry, `<span class="attempt">attempt 2</span>`)
	first := rowOf(html, `<tr data-seq="1" data-source="normal" data-result="failed" data-attempt="1">`)
	assert.NotContains(t, first, `class="attempt"`, "a first attempt is not called one")
	assert.Contains(t, first, `<span class="run-error">boom</span>`)
	triggered := rowOf(html, `<tr data-seq="3" data-source="trigger" data-result="succeeded" data-attempt="1">`)
	assert.Contains(t, triggered, `<code class="args" title="the trigger's arguments">day=2025-03-04 note=&#34;&lt;b&gt;two&lt;/b&gt; words&#34;</code>`, "the arguments, as text")
	skipped := rowOf(html, `<tr data-seq="4" data-source="normal" data-result="skipped" data-skipped="3">`)
	require.NotEmpty(t, skipped, html)
	assert.Contains(t, skipped, `<span class="result skipped">skipped 3 planned starts</span> <span class="skip-reason">(overlap)</span>, the last <time`)
	assert.Contains(t, skipped, "<td>—</td>", "skipped starts took no time")
	assert.NotContains(t, skipped, "run-error", "the reason is not an error")
	// The chart draws the runs only, and says how many starts were skipped.
	require.NotNil(t, p.Job.Chart)
	assert.Len(t, p.Job.Chart.Marks, 3)
	assert.Equal(t, 3, p.Job.Chart.Runs)
	assert.Equal(t, 3, p.Job.Chart.Skipped)
	assert.Contains(t, html, "(2 of 3 finished runs succeeded; 1 failed); 3 planned starts skipped, not drawn.")
	// The last run, on the job's facts and on the jobs page.
	assert.Contains(t, html, `<dt>Last run</dt><dd><span class="result skipped">skipped 3 planned starts</span>`)
	_, jobs := sc.draw("/jobs", drawnAt)
	assert.Contains(t, jobs, `data-skipped="3"`)
	assert.Contains(t, jobs, `<span class="attempt">attempt 2</span>`)
}

func TestPausedJobsShowAsPausedBesideResume(t *testing.T) {
	sc := newScene(t)
	sc.status(records.Status{Lease: "report", Schedule: "fixed rate 1s"})
	sc.status(records.Status{Lease: "billing.0", Group: "billing", Partition: 0, Schedule: "fixed rate 1s"})
	sc.status(records.Status{Lease: "billing.1", Group: "billing", Partition: 1, Schedule: "fixed rate 1s"})
	sc.status(records.Status{Lease: "digest", Schedule: "fixed rate 1s"})
	sc.put(records.DisabledPrefix+"report", records.Op{By: "a", At: drawnAt.Add(-time.Hour), Reason: "5 failed runs in a row", Paused: true})
	sc.put(records.DisabledPrefix+"billing.1", records.Op{By: "b", At: drawnAt.Add(-time.Hour), Reason: "3 failed runs in a row", Paused: true})
	sc.put(records.DisabledPrefix+"digest", records.Op{By: "alice", At: drawnAt.Add(-time.Hour), Reason: "maintenance"})

	p, html := sc.draw("/jobs", drawnAt)
	require.True(t, p.Operate, "a console with a token operates")
	report := sectionOf(t, html, `<section class="job" data-job="report"`)
	assert.Contains(t, report, `<span class="badge disabled paused" title="paused after failures, by a since 2026-03-04 15:00:00 UTC: 5 failed runs in a row">paused</span>`)
	assert.Contains(t, report, `<q class="reason">5 failed runs in a row</q>`, "the reason beside it")
	assert.Contains(t, report, `data-op="enable" data-target="report" data-what="job report" data-label="Resume" data-explain="It paused itself after failed runs in a row (5 failed runs in a row). Nodes contend for it again."`)
	assert.NotContains(t, report, `data-op="disable"`)

	partition := rowOf(html, `<tr data-job="billing.1"`)
	require.NotEmpty(t, partition, html)
	assert.Contains(t, partition, `>paused</span>`)
	assert.Contains(t, partition, `<q class="reason">3 failed runs in a row</q>`)
	assert.Contains(t, partition, `data-op="enable" data-target="billing.1" data-what="partition billing.1" data-label="Resume"`)
	assert.NotContains(t, rowOf(html, `<tr data-job="billing.0"`), `data-op="enable"`, "a partition not disabled offers no enable")

	digest := sectionOf(t, html, `<section class="job" data-job="digest"`)
	assert.Contains(t, digest, `<span class="badge disabled" title="disabled by alice since 2026-03-04 15:00:00 UTC: maintenance">disabled</span>`)
	assert.Contains(t, digest, `data-op="enable" data-target="digest" data-what="job digest" data-label="Enable"`)

	_, page := sc.draw("/elections/billing.1", drawnAt)
	assert.Contains(t, page, `>paused</span>`)
	assert.Contains(t, page, `data-label="Resume"`)
}

// sectionOf returns the part of html from marker to the end of its
// section.
func sectionOf(t *testing.T, html, marker string) string {
	t.Helper()
	_, rest, ok := strings.Cut(html, marker)
	require.True(t, ok, "no %s in the page:\n%s", marker, html)
	section, _, _ := strings.Cut(rest, "</section>")
	return section
}
