package console

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/records"
)

// drawnAt is the time the tests draw their pages at.
var drawnAt = time.Date(2026, 3, 4, 16, 0, 0, 0, time.UTC)

// scene is a backend whose records a test writes itself, through a
// session of its own, and a console on it.
type scene struct {
	t    *testing.T
	ctx  context.Context
	b    *memory.Backend
	sess backend.Session
	s    *Server
	a    *admin.Admin
	done func()
}

// newScene opens a memory backend, a session on it and a console.
func newScene(t *testing.T) *scene {
	t.Helper()
	b := memory.New()
	sess, err := b.Open(t.Context(), backend.SessionOptions{TTL: time.Minute})
	require.NoError(t, err)
	s, a, done := openConsole(t, b, WithToken(testToken))
	sc := &scene{t: t, ctx: t.Context(), b: b, sess: sess, s: s, a: a, done: done}
	t.Cleanup(func() {
		sc.done()
		require.NoError(t, sess.Close(context.Background()))
		require.NoError(t, b.Close())
	})
	return sc
}

// put writes v, encoded, at key.
func (sc *scene) put(key string, v any) {
	sc.t.Helper()
	_, err := sc.sess.(backend.Records).PutRecord(sc.ctx, key, records.Encode(v), backend.Condition{})
	require.NoError(sc.t, err, key)
}

// putRaw writes a value as it is at key.
func (sc *scene) putRaw(key, v string) {
	sc.t.Helper()
	_, err := sc.sess.(backend.Records).PutRecord(sc.ctx, key, []byte(v), backend.Condition{})
	require.NoError(sc.t, err, key)
}

// hold makes the scene's session hold lease.
func (sc *scene) hold(lease string) uint64 {
	sc.t.Helper()
	l, err := sc.sess.Acquire(sc.ctx, lease)
	require.NoError(sc.t, err, lease)
	return l.Token()
}

// status writes the status of a plain election or job held by member a.
func (sc *scene) status(st records.Status) {
	sc.t.Helper()
	if st.Group == "" && st.Partition == 0 && !strings.Contains(st.Lease, ".") {
		st.Partition = -1
	}
	sc.put(records.StatusKey(st.Lease), st)
}

// health writes member's health record, updated at updated, with a
// renewal for each of left (ms left of ttlMs).
func (sc *scene) health(member string, ttlMs int64, updated time.Time, left ...int64) {
	sc.t.Helper()
	h := records.Health{Member: member, Session: "s-" + member, TTLms: ttlMs, Updated: updated}
	for i, l := range left {
		h.Renewals = append(h.Renewals, records.Renewal{At: updated.Add(time.Duration(i-len(left)) * time.Second), LeftMs: l, RTTms: 7})
	}
	sc.put(records.HealthKey(member), h)
}

// draw builds the page of path at now, as a poll would, and renders its
// main part.
func (sc *scene) draw(path string, now time.Time) (*page, string) {
	sc.t.Helper()
	v, ok := parseView(path)
	require.True(sc.t, ok, path)
	p := sc.s.newPage(v)
	require.NoError(sc.t, p.build(&loader{ctx: sc.ctx, a: sc.a, now: now}), path)
	html, err := render("main", p)
	require.NoError(sc.t, err, path)
	return p, string(html)
}

var attentionPattern = regexp.MustCompile(`<li class="attention-item (bad|warn|info)" data-attention="([a-z]+)" data-target="([^"]*)">`)

// attentionItems returns the overview's items as "kind target" → level.
func attentionItems(html string) map[string]string {
	out := map[string]string{}
	for _, m := range attentionPattern.FindAllStringSubmatch(html, -1) {
		out[m[2]+" "+m[3]] = m[1]
	}
	return out
}

// troubled writes one thing of each kind that needs attention, beside
// things that do not.
func troubled(t *testing.T) *scene {
	sc := newScene(t)
	ctx := sc.ctx
	held := records.Holder{Member: "a", Session: sc.sess.ID(), Since: drawnAt.Add(-time.Hour)}

	// Healthy: a held election, a held partition, a member with headroom.
	held.Token = sc.hold("ingest")
	sc.status(records.Status{Lease: "ingest", Holder: &held, Updated: drawnAt.Add(-time.Minute)})
	require.NoError(t, sc.sess.Join(ctx, "billing", backend.Member{ID: "a", Data: []byte(`{"p":2,"a":"rendezvous"}`)}))
	part := held
	part.Token = sc.hold("billing.0")
	sc.put(records.StatusKey("billing.0"), records.Status{Lease: "billing.0", Group: "billing", Partition: 0, Holder: &part})
	sc.health("e", 3000, drawnAt.Add(-2*time.Second), 2900, 2800, 2950)

	// Vacant: an election nobody holds, a partition nobody holds.
	sc.status(records.Status{Lease: "report", Updated: drawnAt.Add(-10 * time.Minute)})
	sc.put(records.StatusKey("billing.1"), records.Status{Lease: "billing.1", Group: "billing", Partition: 1})

	// A disabled job (vacant too, but because it is disabled), a drained
	// member.
	sc.status(records.Status{Lease: "nightly", Schedule: "@daily"})
	require.NoError(t, sc.a.As("alice").Disable(ctx, "nightly", "maintenance window"))
	require.NoError(t, sc.a.As("bob").Drain(ctx, "b", "kernel update"))

	// A job whose last run failed.
	dh := held
	dh.Token = sc.hold("digest")
	last := records.Run{Seq: 3, Token: dh.Token, Member: "a", Start: drawnAt.Add(-2 * time.Minute), End: drawnAt.Add(-2*time.Minute + 1500*time.Millisecond), Result: "failed", Error: "boom", Source: records.SourceNormal}
	sc.status(records.Status{Lease: "digest", Holder: &dh, Schedule: "every 1m", LastRun: &last, Succeeded: 2, Failed: 1, HistorySeq: 3})

	// Members close to their deadline (TTL 3s: a third is 1s, a tenth
	// 300ms), and one whose record is stale.
	sc.health("a", 3000, drawnAt.Add(-time.Second), 2900, 250, 2800)
	sc.health("c", 3000, drawnAt.Add(-time.Second), 2900, 900, 2800)
	sc.health("d", 3000, drawnAt.Add(-time.Hour), 2900, 2900)

	// A record that cannot be used.
	sc.putRaw("status/broken", "garbage")
	return sc
}

func TestOverviewListsWhatNeedsAttention(t *testing.T) {
	sc := troubled(t)
	p, html := sc.draw("/", drawnAt)
	items := attentionItems(html)
	assert.Equal(t, map[string]string{
		"vacant report":         "bad",
		"vacant billing.1":      "bad",
		"failed digest":         "bad",
		"deadline a":            "bad",
		"deadline c":            "warn",
		"stale d":               "warn",
		"disabled nightly":      "info",
		"drained b":             "info",
		"problem status/broken": "warn",
	}, items, html)
	assert.NotContains(t, html, "data-attention-none")

	// Each item links to its page and says why in words.
	o := p.Overview
	require.NotNil(t, o)
	byKey := map[string]attention{}
	for _, a := range o.Attention {
		byKey[a.Kind+" "+a.Target] = a
	}
	assert.Equal(t, "/elections/report", byKey["vacant report"].Href)
	assert.Equal(t, "/groups", byKey["vacant billing.1"].Href)
	assert.Contains(t, byKey["vacant billing.1"].Reason, "no member holds it")
	assert.Equal(t, "/jobs/digest", byKey["failed digest"].Href)
	assert.Contains(t, byKey["failed digest"].Reason, "#3, failed")
	assert.Equal(t, "boom", byKey["failed digest"].Detail)
	assert.Equal(t, "/jobs/nightly", byKey["disabled nightly"].Href)
	assert.Contains(t, byKey["disabled nightly"].Detail, "alice")
	assert.Contains(t, byKey["disabled nightly"].Detail, "maintenance window")
	assert.Contains(t, byKey["drained b"].Detail, "kernel update")
	assert.Equal(t, "/members", byKey["deadline a"].Href)
	assert.Contains(t, byKey["deadline a"].Reason, "250ms of its 3s TTL left, under a tenth")
	assert.Contains(t, byKey["deadline c"].Reason, "under a third")
	assert.Contains(t, byKey["stale d"].Reason, "may be gone")
	assert.Equal(t, "/jobs/broken", byKey["problem status/broken"].Href)
	assert.Contains(t, html, `<a href="/jobs/digest">job digest</a>: its last run, #3, failed`)

	// The most urgent first.
	var kinds []string
	for _, a := range o.Attention {
		kinds = append(kinds, a.Kind)
	}
	assert.Equal(t, []string{"vacant", "vacant", "failed", "deadline", "deadline", "stale", "disabled", "drained", "problem"}, kinds)

	// The rest, counted.
	assert.Equal(t, 4, o.Elections, "ingest, report, nightly, digest")
	assert.Equal(t, 2, o.ElectionsHeld)
	assert.Equal(t, 1, o.ElectionsVacant)
	assert.Equal(t, 1, o.ElectionsDisabled)
	assert.Equal(t, []groupCount{{Name: "billing", Held: 1, Total: 2}}, o.Groups)
	assert.Equal(t, 2, o.Jobs)
	assert.Equal(t, "66.6%", o.SuccessRate())
	assert.Contains(t, html, `data-group="billing" data-held="1" data-total="2"`)
	assert.Equal(t, 4, o.MembersReporting, "a, c, d, e")

	// Served as the landing page.
	w := get(sc.s, "/")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Contains(t, w.Body.String(), `data-attention="failed" data-target="digest"`)
	assert.Contains(t, w.Body.String(), `<link rel="stylesheet" href="/static/charts.css">`)
}

func TestOverviewCountsJobsAsSimbaStatus(t *testing.T) {
	sc := troubled(t) // two scheduled plain elections: digest, nightly
	for i := range 4 {
		st := records.Status{Lease: "sweep." + string(rune('0'+i)), Group: "sweep", Partition: i, Schedule: "every 1m", Succeeded: 1}
		if i == 1 || i == 2 {
			st.LastRun = &records.Run{Seq: 1, Result: "failed", Start: drawnAt.Add(-time.Minute), Source: records.SourceNormal}
		}
		sc.put(records.StatusKey(st.Lease), st)
	}
	p, html := sc.draw("/", drawnAt)
	o := p.Overview
	assert.Equal(t, 3, o.Jobs, "digest, nightly, and the group sweep")
	assert.Equal(t, []int{2, 1, 4}, []int{o.JobElections, o.JobGroups, o.JobPartitions})
	assert.Equal(t, 2, o.JobsFailing, "digest, and sweep for two of its partitions")
	assert.Contains(t, html, `<span class="tile-big" data-jobs="3">3<span class="of"> scheduled</span></span>`)
	assert.Contains(t, html, `2 elections, 1 group (4 partitions)`)
	items := attentionItems(html)
	assert.Contains(t, items, "failed sweep.1", "each failing partition is listed")
	assert.Contains(t, items, "failed sweep.2")
}

func TestOverviewSaysWhenNothingNeedsAttention(t *testing.T) {
	sc := newScene(t)
	h := records.Holder{Member: "a", Session: sc.sess.ID(), Since: drawnAt.Add(-time.Hour)}
	h.Token = sc.hold("ingest")
	sc.status(records.Status{Lease: "ingest", Holder: &h})
	sc.health("a", 3000, drawnAt.Add(-3*time.Second), 2900, 2950, 2800)

	p, html := sc.draw("/", drawnAt)
	assert.Contains(t, html, `<p class="all-well" data-attention-none>Nothing needs attention`)
	assert.NotContains(t, html, "data-attention=")
	assert.Empty(t, p.Overview.Attention)
	assert.Equal(t, 1, p.Overview.ElectionsHeld)
	assert.Equal(t, 1, p.Overview.MembersLive)

	// The same record, a minute later, is stale: its client may be gone.
	_, html = sc.draw("/", drawnAt.Add(time.Minute))
	assert.Equal(t, map[string]string{"stale a": "warn"}, attentionItems(html))

	// An empty backend needs nothing either.
	empty := newScene(t)
	_, html = empty.draw("/", drawnAt)
	assert.Contains(t, html, "Nothing needs attention")
	assert.Contains(t, html, "no groups yet")
}

func TestOverviewGroupsManyVacantPartitions(t *testing.T) {
	sc := newScene(t)
	for i := range 10 {
		lease := "wide." + strconv.Itoa(i)
		sc.put(records.StatusKey(lease), records.Status{Lease: lease, Group: "wide", Partition: i})
	}
	_, html := sc.draw("/", drawnAt)
	assert.Equal(t, map[string]string{"vacant wide": "bad"}, attentionItems(html))
	assert.Contains(t, html, "10 of its 10 partitions are vacant")
}

var runMarkPattern = regexp.MustCompile(`<g class="run ([a-z]+)" data-run="([0-9]+)" data-result="([a-z-]+)" data-source="([a-z-]+)" data-ms="([0-9]+)"><title>([^<]*)</title><rect class="bar" [^>]*/><path class="mark" d="([^"]+)"/>(<path class="source-mark src-([a-z-]+)" d="[^"]+"/>)?</g>`)

func TestJobChartDrawsEveryRun(t *testing.T) {
	sc := newScene(t)
	start := drawnAt.Add(-10 * time.Minute)
	runs := []records.Run{
		{Seq: 1, Result: "succeeded", Source: records.SourceNormal, Start: start, End: start.Add(800 * time.Millisecond)},
		{Seq: 2, Result: "failed", Source: records.SourceTrigger, Start: start.Add(time.Minute), End: start.Add(time.Minute + 2*time.Second), Error: "boom"},
		{Seq: 3, Result: "interrupted", Source: records.SourceFailOver, Start: start.Add(2 * time.Minute), End: start.Add(2*time.Minute + 300*time.Millisecond)},
		{Seq: 4, Result: "succeeded", Source: records.SourceMisfire, Start: start.Add(3 * time.Minute), End: start.Add(3*time.Minute + time.Second)},
		{Seq: 5, Result: "cancelled", Source: records.SourceNormal, Start: start.Add(4 * time.Minute), End: start.Add(4*time.Minute + 100*time.Millisecond)},
		// An end before its start is drawn as taking nothing.
		{Seq: 6, Result: "succeeded", Source: records.SourceNormal, Start: start.Add(5 * time.Minute), End: start.Add(4 * time.Minute)},
		{Seq: 7, Result: "running", Source: records.SourceNormal, Start: drawnAt.Add(-3 * time.Second)},
	}
	for _, r := range runs {
		r.Member, r.Token = "a", 9
		sc.put(records.HistoryKey("digest", r.Seq), r)
	}
	last := runs[len(runs)-1]
	sc.status(records.Status{Lease: "digest", Schedule: "every 1m", LastRun: &last, HistorySeq: 7})

	_, html := sc.draw("/jobs/digest", drawnAt)
	marks := runMarkPattern.FindAllStringSubmatch(html, -1)
	require.Len(t, marks, len(runs), html)
	assert.Equal(t, len(runs), strings.Count(html, `data-run="`), "one mark per run")
	want := map[string]struct {
		class, source string
		ms            int64
	}{
		"1": {"succeeded", "normal", 800},
		"2": {"failed", "trigger", 2000},
		"3": {"interrupted", "fail-over", 300},
		"4": {"succeeded", "misfire", 1000},
		"5": {"cancelled", "normal", 100},
		"6": {"succeeded", "normal", 0},
		"7": {"running", "normal", 3000},
	}
	shapes := map[string]string{}
	for _, m := range marks {
		w, ok := want[m[2]]
		require.True(t, ok, m[2])
		assert.Equal(t, w.class, m[1], "run %s: class", m[2])
		assert.Equal(t, w.class, m[3], "run %s: data-result", m[2])
		assert.Equal(t, w.source, m[4], "run %s: data-source", m[2])
		assert.Equal(t, strconv.FormatInt(w.ms, 10), m[5], "run %s: data-ms", m[2])
		assert.Contains(t, m[6], "run "+m[2]+": "+w.class, "run %s: its title", m[2])
		if w.source == "normal" {
			assert.Empty(t, m[8], "run %s: no source marker", m[2])
		} else {
			assert.Equal(t, w.source, m[9], "run %s: its source's marker", m[2])
		}
		// The shape of a result's marker is its own, not only its colour.
		shape := regexp.MustCompile(`[0-9.-]+`).ReplaceAllString(m[7], "n")
		if prev, ok := shapes[w.class]; ok {
			assert.Equal(t, prev, shape, "the marker of %s", w.class)
		}
		shapes[w.class] = shape
	}
	assert.Len(t, shapes, 5, "a shape per result")
	assert.Contains(t, html, `<g class="run failed" data-run="2" data-result="failed"`)
	assert.Contains(t, html, "boom", "the failed run's title says its error")
	assert.Contains(t, html, `Success rate over the 7 runs shown: <strong>50%</strong> (3 of 6 finished runs succeeded; 1 failed; 1 interrupted; 1 cancelled; 1 running)`)
	assert.Contains(t, html, `>15:50:00</text>`, "the axis is in UTC")
	assert.Contains(t, html, `>start (UTC)</text>`)

	// The runs are placed by their start, left to right.
	history, err := sc.a.History(sc.ctx, "digest")
	require.NoError(t, err)
	c := newRunChart(history, drawnAt, false)
	for i := 1; i < len(c.Marks); i++ {
		assert.Greater(t, c.Marks[i].X, c.Marks[i-1].X, "run %d after run %d", c.Marks[i].Seq, c.Marks[i-1].Seq)
	}
	for _, m := range c.Marks {
		assert.GreaterOrEqual(t, m.Y, c.Top, "run %d within the plot", m.Seq)
		assert.LessOrEqual(t, m.Y+m.H, c.Bottom+0.01, "run %d within the plot", m.Seq)
	}

	// The jobs page has the small version.
	_, list := sc.draw("/jobs", drawnAt)
	assert.Equal(t, len(runs), strings.Count(list, `data-spark-run="`), list)
	assert.Contains(t, list, `<span class="spark-rate">50% ok</span>`)
}

func TestJobChartOfOddHistories(t *testing.T) {
	for name, runs := range map[string][]admin.Run{
		"none":          nil,
		"one":           {{Seq: 1, Result: "succeeded", Source: "normal", Start: drawnAt.Add(-time.Minute), End: drawnAt.Add(-time.Minute)}},
		"same start":    {{Seq: 1, Result: "failed", Start: drawnAt, End: drawnAt.Add(time.Second)}, {Seq: 2, Result: "bogus", Source: "?", Start: drawnAt}},
		"no start":      {{Seq: 1, Result: "succeeded"}},
		"running ahead": {{Seq: 1, Result: "running", Start: drawnAt.Add(time.Hour)}},
		"days":          {{Seq: 1, Result: "succeeded", Start: drawnAt.Add(-72 * time.Hour), End: drawnAt.Add(-71 * time.Hour)}, {Seq: 2, Result: "succeeded", Start: drawnAt, End: drawnAt.Add(time.Millisecond)}},
	} {
		t.Run(name, func(t *testing.T) {
			for _, small := range []bool{false, true} {
				c := newRunChart(runs, drawnAt, small)
				for _, m := range c.Marks {
					for _, v := range []float64{m.X, m.Y, m.W, m.H} {
						assert.False(t, math.IsNaN(v) || math.IsInf(v, 0), "run %d: %v", m.Seq, m)
					}
					assert.GreaterOrEqual(t, m.X, 0.0)
					assert.LessOrEqual(t, m.X+m.W, c.W)
				}
				assert.Equal(t, len(runs), len(c.Marks)+c.Undrawn)
			}
		})
	}
	c := newRunChart([]admin.Run{{Seq: 1, Result: "succeeded", Start: drawnAt.Add(-72 * time.Hour)}, {Seq: 2, Result: "succeeded", Start: drawnAt}}, drawnAt, false)
	assert.Equal(t, "03-01 16:00", c.XTicks[0].Label, "a span of days labels the day")
}

func TestHeadroomLevels(t *testing.T) {
	for _, tc := range []struct {
		left, ttl int64
		want      string
	}{
		{3000, 3000, "ok"}, {1000, 3000, "ok"}, {999, 3000, "warn"}, {300, 3000, "warn"},
		{299, 3000, "bad"}, {0, 3000, "bad"}, {100, 0, "ok"}, {-5, 3000, "bad"},
	} {
		assert.Equal(t, tc.want, leftLevel(tc.left, tc.ttl), "%dms of %dms", tc.left, tc.ttl)
	}

	h := admin.Health{Member: "a", TTLms: 3000, Updated: drawnAt.Add(-time.Second), Failed: 2}
	for i, l := range []int64{2900, 800, 2700} {
		h.Renewals = append(h.Renewals, admin.Renewal{At: drawnAt.Add(time.Duration(i-3) * time.Second), LeftMs: l, RTTms: int64(10 + i)})
	}
	hr := newHeadroom(h, drawnAt)
	assert.Equal(t, "warn", hr.Level)
	assert.Equal(t, int64(800), hr.MinMs)
	assert.Equal(t, int64(12), hr.LastRTTms)
	assert.Len(t, hr.Bars, 3)
	assert.Equal(t, []string{"ok", "warn", "ok"}, []string{hr.Bars[0].Level, hr.Bars[1].Level, hr.Bars[2].Level})

	// Stale: older than three publications and a TTL.
	assert.Equal(t, "warn", newHeadroom(h, h.Updated.Add(18*time.Second)).Level)
	assert.Equal(t, "stale", newHeadroom(h, h.Updated.Add(18*time.Second+time.Millisecond)).Level)
	zero := h
	zero.Updated = time.Time{}
	assert.Equal(t, "stale", newHeadroom(zero, drawnAt).Level)

	// Odd records: too many renewals, none, a TTL not known.
	many := h
	many.Renewals = nil
	for i := range 40 {
		many.Renewals = append(many.Renewals, admin.Renewal{LeftMs: int64(i * 100)})
	}
	hr = newHeadroom(many, drawnAt)
	assert.Len(t, hr.Bars, records.HealthLen)
	assert.Equal(t, int64(2400), hr.MinMs, "the last renewals only")
	none := h
	none.Renewals = nil
	assert.Equal(t, "ok", newHeadroom(none, drawnAt).Level)
	noTTL := h
	noTTL.TTLms = -1
	assert.Equal(t, "ok", newHeadroom(noTTL, drawnAt).Level)
}

var headroomPattern = regexp.MustCompile(`<td class="headroom ([a-z]+)" data-headroom="([^"]+)" data-min-ms="([0-9]+)" data-ttl-ms="([0-9]+)" data-level="([a-z]+)">`)

func TestMembersPageShowsHeadroom(t *testing.T) {
	sc := troubled(t)
	_, html := sc.draw("/members", drawnAt)
	got := map[string]string{}
	for _, m := range headroomPattern.FindAllStringSubmatch(html, -1) {
		assert.Equal(t, m[1], m[5], m[2])
		got[m[2]] = m[5] + " " + m[3] + "/" + m[4]
	}
	assert.Equal(t, map[string]string{
		"a": "bad 250/3000",
		"c": "warn 900/3000",
		"d": "stale 2900/3000",
		"e": "ok 2800/3000",
	}, got, html)
	assert.Contains(t, html, `<td class="headroom none" data-headroom="b" data-level="none"><span class="muted">no renewals published</span></td>`)
	assert.Contains(t, html, `<span class="badge headroom-level bad">very close to its deadline</span>`)
	assert.Contains(t, html, `<span class="badge headroom-level warn">close to its deadline</span>`)
	assert.Contains(t, html, `<span class="badge headroom-level stale">not published lately: the client may be gone</span>`)
	assert.Contains(t, html, `<tr data-member="e" data-drained="false" data-state="active">`, "a member known by its health record only")
	d := rowOf(html, `<tr data-member="d"`)
	assert.Contains(t, d, `data-state="gone">`, "a member whose client stopped renewing without closing")
	assert.Contains(t, d, `<span class="badge gone"`)
	assert.NotContains(t, d, "active", "gone is its one state")
	b := rowOf(html, `<tr data-member="b"`)
	assert.Contains(t, b, `data-state="gone">`, "a drained member without a session")
	assert.Contains(t, b, "still drained", "its drain in force, beside")
	assert.Equal(t, 3, strings.Count(rowOf(html, `<tr data-member="a"`), `<rect class="bar `), "a bar per renewal")
}

// cssVars returns the custom properties of the first block of css that
// follows marker.
func cssVars(t *testing.T, css, marker string) map[string]string {
	t.Helper()
	i := strings.Index(css, marker)
	require.GreaterOrEqual(t, i, 0, marker)
	block := css[i:]
	block = block[:strings.Index(block, "}")]
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`--([a-z0-9-]+):\s*#([0-9a-fA-F]{6}|[0-9a-fA-F]{3})\b`).FindAllStringSubmatch(block, -1) {
		hex := strings.ToLower(m[2])
		if len(hex) == 3 { // #rgb
			hex = string([]byte{hex[0], hex[0], hex[1], hex[1], hex[2], hex[2]})
		}
		out[m[1]] = "#" + hex
	}
	return out
}

// srgb parses #rrggbb.
func srgb(t *testing.T, hex string) [3]float64 {
	t.Helper()
	require.Len(t, hex, 7, "a colour #rrggbb")
	var c [3]float64
	for i := range c {
		v, err := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		require.NoError(t, err, hex)
		c[i] = float64(v) / 255
	}
	return c
}

// linear is a channel in linear light.
func linear(c float64) float64 {
	if c <= 0.04045 {
		return c / 12.92
	}
	return math.Pow((c+0.055)/1.055, 2.4)
}

// luminance is the WCAG relative luminance of a colour.
func luminance(c [3]float64) float64 {
	return 0.2126*linear(c[0]) + 0.7152*linear(c[1]) + 0.0722*linear(c[2])
}

// contrast is the WCAG contrast ratio of two colours.
func contrast(a, b [3]float64) float64 {
	la, lb := luminance(a), luminance(b)
	return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)
}

// labDistance is the CIE76 distance of two colours in CIELAB (D65).
func labDistance(a, b [3]float64) float64 {
	lab := func(c [3]float64) [3]float64 {
		r, g, b := linear(c[0]), linear(c[1]), linear(c[2])
		x := (0.4124*r + 0.3576*g + 0.1805*b) / 0.95047
		y := 0.2126*r + 0.7152*g + 0.0722*b
		z := (0.0193*r + 0.1192*g + 0.9505*b) / 1.08883
		f := func(v float64) float64 {
			if v > 216.0/24389 {
				return math.Cbrt(v)
			}
			return (24389.0/27*v + 16) / 116
		}
		return [3]float64{116*f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))}
	}
	p, q := lab(a), lab(b)
	return math.Sqrt((p[0]-q[0])*(p[0]-q[0]) + (p[1]-q[1])*(p[1]-q[1]) + (p[2]-q[2])*(p[2]-q[2]))
}

func TestMemberPaletteIsApartFromDangerAndWarning(t *testing.T) {
	raw, err := os.ReadFile("static/console.css")
	require.NoError(t, err)
	css := string(raw)
	light := cssVars(t, css, ":root {")
	dark := cssVars(t, css, "@media (prefers-color-scheme: dark)")
	for scheme, vars := range map[string]map[string]string{"light": light, "dark": dark} {
		bad, warn, panel, bg := srgb(t, vars["bad"]), srgb(t, vars["warn"]), srgb(t, vars["panel"]), srgb(t, vars["bg"])
		for i := range colors {
			name := fmt.Sprintf("c%d", i)
			hex, ok := vars[name]
			require.True(t, ok, "%s: --%s", scheme, name)
			c := srgb(t, hex)
			assert.NotEqual(t, vars["bad"], hex, "%s: --%s is --bad", scheme, name)
			assert.NotEqual(t, vars["warn"], hex, "%s: --%s is --warn", scheme, name)
			assert.Greater(t, labDistance(c, bad), 25.0, "%s: --%s %s is close to the danger red %s", scheme, name, hex, vars["bad"])
			assert.Greater(t, labDistance(c, warn), 20.0, "%s: --%s %s is close to the warning %s", scheme, name, hex, vars["warn"])
			assert.GreaterOrEqual(t, contrast(c, panel), 4.5, "%s: member names in --%s %s are hard to read", scheme, name, hex)
			assert.GreaterOrEqual(t, contrast(c, bg), 4.5, "%s: member names in --%s %s are hard to read", scheme, name, hex)
			for j := range i {
				other := vars[fmt.Sprintf("c%d", j)]
				assert.Greater(t, labDistance(c, srgb(t, other)), 10.0, "%s: --c%d %s and --%s %s look alike", scheme, j, other, name, hex)
			}
		}
		_, extra := vars[fmt.Sprintf("c%d", colors)]
		assert.False(t, extra, "%s: more member colours than color uses", scheme)
	}
	// Each class is defined, and no page uses a class beyond them.
	for i := range colors {
		assert.Contains(t, css, fmt.Sprintf(".c%d { --m: var(--c%d); }", i, i))
	}
	assert.NotRegexp(t, `\.c([89]|[1-9][0-9]) `, css)
	for _, m := range []string{"a", "b", "c", "node-1", "ingest-7f3c", "é"} {
		assert.Regexp(t, `^c[0-7]$`, color(m), m)
	}
	// Vacancy is told by a dashed border too, not only by its colour.
	assert.Regexp(t, `\.cell\.vacant \{[^}]*border-style: dashed`, css)
}
