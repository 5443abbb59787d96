package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
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
	"github.com/simba-go/simba/internal/consoletest"
	"github.com/simba-go/simba/internal/records"
)

// tlNow is the drawing time of the timeline tests.
var tlNow = time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)

// ago is the time d before tlNow.
func ago(d time.Duration) time.Time { return tlNow.Add(-d) }

// svgEl is an element of a rendered picture: its name and attributes.
type svgEl struct {
	name  string
	attrs map[string]string
}

var (
	elPattern   = regexp.MustCompile(`<(rect|polygon|g|li|tr)\s([^>]*)>`)
	attrPattern = regexp.MustCompile(`([a-zA-Z-]+)="([^"]*)"`)
)

// elements returns the elements of html whose class has all of the
// classes given, or that carry the attribute given as "[name]".
func elements(html string, sel ...string) []svgEl {
	var out []svgEl
	for _, m := range elPattern.FindAllStringSubmatch(html, -1) {
		el := svgEl{name: m[1], attrs: map[string]string{}}
		for _, a := range attrPattern.FindAllStringSubmatch(m[2], -1) {
			el.attrs[a[1]] = a[2]
		}
		classes := strings.Fields(el.attrs["class"])
		ok := true
		for _, s := range sel {
			if name, isAttr := strings.CutPrefix(s, "["); isAttr {
				_, has := el.attrs[strings.TrimSuffix(name, "]")]
				ok = ok && has
			} else {
				ok = ok && containsStr(classes, s)
			}
		}
		if ok {
			out = append(out, el)
		}
	}
	return out
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// attrInt returns an attribute of el as an integer.
func attrInt(t *testing.T, el svgEl, name string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(el.attrs[name], 10, 64)
	require.NoError(t, err, "%s=%q", name, el.attrs[name])
	return n
}

// attrFloat returns an attribute of el as a number.
func attrFloat(t *testing.T, el svgEl, name string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(el.attrs[name], 64)
	require.NoError(t, err, "%s=%q", name, el.attrs[name])
	return f
}

// election makes an election of status st.
func election(st admin.Status, held bool) admin.Election {
	return admin.Election{Name: st.Lease, Status: st, Held: held}
}

// timelinePage builds the page of path from snap at tlNow, and renders
// its main part (and the whole page, which must render too).
func timelinePage(t *testing.T, snap admin.Snapshot, path string) (*page, string) {
	t.Helper()
	v, ok := parseView(path)
	require.True(t, ok, path)
	p := &page{View: v, Title: "Timeline"}
	require.NoError(t, p.build(&loader{ctx: t.Context(), now: tlNow, snap: snap, snapOK: true}))
	_, err := render("layout", p)
	require.NoError(t, err)
	out, err := render("main", p)
	require.NoError(t, err)
	return p, string(out)
}

func TestTimelineViews(t *testing.T) {
	for _, tc := range []struct {
		path, canonical string
		want            view
	}{
		{"/timeline", "/timeline", view{Kind: "timeline", Range: "1h", Part: -1}},
		{"/timeline?range=1h", "/timeline", view{Kind: "timeline", Range: "1h", Part: -1}},
		{"/timeline?range=15m", "/timeline?range=15m", view{Kind: "timeline", Range: "15m", Part: -1}},
		{"/timeline?range=all&group=billing", "/timeline?group=billing&range=all", view{Kind: "timeline", Name: "billing", Range: "all", Part: -1}},
		{"/timeline?group=billing&p=3&range=24h", "/timeline?group=billing&p=3&range=24h", view{Kind: "timeline", Name: "billing", Range: "24h", Part: 3}},
		{"/timeline?group=billing&p=0", "/timeline?group=billing&p=0", view{Kind: "timeline", Name: "billing", Range: "1h", Part: 0}},
		{"/timeline?other=x", "/timeline", view{Kind: "timeline", Range: "1h", Part: -1}},
	} {
		v, ok := parseView(tc.path)
		require.True(t, ok, tc.path)
		assert.Equal(t, tc.want, v, tc.path)
		assert.Equal(t, tc.canonical, v.Path(), tc.path)
		back, ok := parseView(v.Path())
		require.True(t, ok, tc.path)
		assert.Equal(t, v, back, "the event stream of %s shows the same view", tc.path)
	}
	for _, bad := range []string{
		"/timeline?range=2h", "/timeline?range=ALL", "/timeline?p=3", "/timeline?group=billing&p=-1",
		"/timeline?group=billing&p=x", "/timeline?group=billing&p=03", "/timeline?group=billing&p=99999999999",
		"/timeline?group=bad%20name", "/timeline?group=" + strings.Repeat("g", 200), "/timeline?group=.x",
	} {
		_, ok := parseView(bad)
		assert.False(t, ok, bad)
	}
}

// tlSnapshot is the elections of the bars test:
//   - alpha: a's term began before the range and handed off (clipped at
//     the range's start); a gap of 5m; b's failed over to c, who holds it.
//   - beta: a's term ended unseen (not held, no end): drawn a TTL long,
//     then a gap to now.
//   - old: one term that ended before the range: no bar, a gap.
//   - fresh: no terms.
func tlSnapshot() admin.Snapshot {
	return admin.Snapshot{Elections: []admin.Election{
		election(admin.Status{Lease: "alpha", Partition: -1, Schedule: "every 1m",
			Holder: &admin.Holder{Member: "c", Token: 3, Since: ago(30 * time.Minute)},
			Terms: []admin.Term{
				{Token: 1, Member: "a", Start: ago(2 * time.Hour), End: ago(50 * time.Minute), Ended: "resigned", TTLms: 3000},
				{Token: 2, Member: "b", Start: ago(45 * time.Minute), End: ago(30 * time.Minute), Ended: records.EndedFailOver, TTLms: 3000},
				{Token: 3, Member: "c", Start: ago(30 * time.Minute), TTLms: 3000},
			}}, true),
		election(admin.Status{Lease: "beta", Partition: -1,
			Terms: []admin.Term{{Token: 7, Member: "a", Start: ago(20 * time.Minute), TTLms: 3000}}}, false),
		election(admin.Status{Lease: "fresh", Partition: -1}, false),
		election(admin.Status{Lease: "old", Partition: -1,
			Terms: []admin.Term{{Token: 1, Member: "d", Start: ago(4 * time.Hour), End: ago(3 * time.Hour), Ended: "stopped"}}}, false),
	}}
}

func TestTimelineBars(t *testing.T) {
	p, html := timelinePage(t, tlSnapshot(), "/timeline")
	tl := p.Timeline
	require.NotNil(t, tl)
	assert.Equal(t, ago(time.Hour), tl.From)
	assert.Equal(t, []string{"a", "b", "c"}, tl.Members, "the legend's members: of the bars shown")

	lanes := elements(html, "lane")
	require.Len(t, lanes, 4)
	for i, name := range []string{"alpha", "beta", "fresh", "old"} {
		assert.Equal(t, name, lanes[i].attrs["data-lane"])
	}
	assert.Contains(t, html, `<a href="/jobs/alpha">`, "a scheduled election's label links to its job")
	assert.NotContains(t, html, `href="/jobs/beta"`)
	assert.Contains(t, html, "no terms recorded")

	bars := elements(html, "bar", "[data-token]")
	require.Len(t, bars, 4)
	type want struct {
		token, member, state, ended string
		start, end                  time.Time
	}
	for i, w := range []want{
		{"1", "a", "ended", "resigned", ago(2 * time.Hour), ago(50 * time.Minute)},
		{"2", "b", "ended", "fail-over", ago(45 * time.Minute), ago(30 * time.Minute)},
		{"3", "c", "open", "", ago(30 * time.Minute), tlNow},
		{"7", "a", "unseen", "", ago(20 * time.Minute), ago(20*time.Minute - 3*time.Second)},
	} {
		b := bars[i]
		assert.Equal(t, w.token, b.attrs["data-token"], "bar %d", i)
		assert.Equal(t, w.member, b.attrs["data-member"], "bar %d", i)
		assert.Equal(t, w.ended, b.attrs["data-ended"], "bar %d", i)
		assert.Equal(t, w.start.UnixMilli(), attrInt(t, b, "data-start"), "bar %d", i)
		assert.Equal(t, w.end.UnixMilli(), attrInt(t, b, "data-end"), "bar %d", i)
		classes := strings.Fields(b.attrs["class"])
		assert.Contains(t, classes, color(w.member), "bar %d has its member's colour", i)
		assert.Contains(t, classes, w.state, "bar %d", i)
		x, width := attrFloat(t, b, "x"), attrFloat(t, b, "width")
		assert.GreaterOrEqual(t, x, tlLabelW, "bar %d within the plot", i)
		assert.LessOrEqual(t, x+width, tlLabelW+tlPlotW+0.05, "bar %d within the plot", i)
	}
	assert.Equal(t, tlLabelW, attrFloat(t, bars[0], "x"), "a term begun before the range is clipped at its start")
	assert.InDelta(t, tlPlotW*10/60, attrFloat(t, bars[0], "width"), 0.1)
	assert.InDelta(t, tlLabelW+tlPlotW, attrFloat(t, bars[2], "x")+attrFloat(t, bars[2], "width"), 0.1, "the open term reaches now")

	// The token labels of bars wide enough.
	assert.Contains(t, html, `<text class="tok"`)

	// Ends: a hand-off (a tick) and a fail-over (a triangle).
	handoffs, failovers := elements(html, "mark", "handoff", "[data-token]"), elements(html, "mark", "failover", "[data-token]")
	require.Len(t, handoffs, 1)
	require.Len(t, failovers, 1)
	assert.Equal(t, "rect", handoffs[0].name)
	assert.Equal(t, "1", handoffs[0].attrs["data-token"])
	assert.Equal(t, "polygon", failovers[0].name)
	assert.Equal(t, "2", failovers[0].attrs["data-token"])

	// Gaps, hatched: alpha's 5 minutes; beta's after its unseen end;
	// old's whole range.
	gaps := elements(html, "gap", "[data-start]")
	require.Len(t, gaps, 3)
	for _, g := range gaps {
		assert.Equal(t, "url(#tl-hatch)", g.attrs["fill"])
	}
	assert.Equal(t, ago(50*time.Minute).UnixMilli(), attrInt(t, gaps[0], "data-start"))
	assert.Equal(t, ago(45*time.Minute).UnixMilli(), attrInt(t, gaps[0], "data-end"))
	assert.Equal(t, tlNow.UnixMilli(), attrInt(t, gaps[1], "data-end"))
	assert.Equal(t, tlLabelW, attrFloat(t, gaps[2], "x"))
	assert.Equal(t, 1, strings.Count(html, `<pattern id="tl-hatch"`), "the pattern is defined once")

	// The tooltips, the axis and the legend.
	assert.Contains(t, html, "<title>b · token 2\n2026-03-04 11:15:00.000 UTC – 2026-03-04 11:30:00.000 UTC (15m0s)\nfail-over")
	assert.Contains(t, html, `<text class="tick" x="170" y="16">11:00</text>`)
	assert.Contains(t, html, `>11:30</text>`)
	assert.Contains(t, html, `class="tl-legend"`)
	assert.NotContains(t, html, "Rebalances", "plain elections list no rebalances")

	// Ranges: 15m clips alpha's 3rd term, drops the others; all begins at the
	// earliest start.
	_, html15 := timelinePage(t, tlSnapshot(), "/timeline?range=15m")
	bars = elements(html15, "bar", "[data-token]")
	require.Len(t, bars, 1, "beta's term ended unseen before the range")
	assert.Equal(t, "3", bars[0].attrs["data-token"])
	assert.Equal(t, tlLabelW, attrFloat(t, bars[0], "x"))
	pa, htmlAll := timelinePage(t, tlSnapshot(), "/timeline?range=all")
	assert.Equal(t, ago(4*time.Hour), pa.Timeline.From)
	assert.Len(t, elements(htmlAll, "bar", "[data-token]"), 5)
	assert.Contains(t, htmlAll, `href="/timeline?range=all" aria-current="true">all</a>`)
	p24, _ := timelinePage(t, tlSnapshot(), "/timeline?range=24h")
	assert.Equal(t, "Mar 3 12:00", p24.Timeline.Ticks[0].Label, "24h: the date where it changes")
}

// rebalanceGroup is a group of 5 partitions: at T (40m ago) a drained
// member A hands partitions 0, 1 and 2 to B within 2s; 10m later A's
// node crashes and C takes partition 3 over; partition 4 is re-acquired
// by its own member (no move).
func rebalanceGroup() admin.Snapshot {
	T := ago(40 * time.Minute)
	ms := time.Millisecond
	drained := func(i int, at time.Time) consoletest.PartTerms {
		return consoletest.PartTerms{Index: i, Terms: []admin.Term{
			{Token: 10, Member: "A", Start: ago(50 * time.Minute), End: at, Ended: "member drained", TTLms: 3000},
			{Token: 11, Member: "B", Start: at.Add(200 * ms), TTLms: 3000},
		}}
	}
	crash := T.Add(10 * time.Minute)
	return consoletest.GroupSnapshot("g",
		drained(0, T), drained(1, T.Add(700*ms)), drained(2, T.Add(2*time.Second)),
		consoletest.PartTerms{Index: 3, Terms: []admin.Term{
			{Token: 5, Member: "A", Start: ago(50 * time.Minute), End: crash, Ended: records.EndedFailOver, TTLms: 3000},
			{Token: 6, Member: "C", Start: crash, TTLms: 3000},
		}},
		consoletest.PartTerms{Index: 4, Terms: []admin.Term{
			{Token: 1, Member: "C", Start: ago(50 * time.Minute), End: ago(20 * time.Minute), Ended: "yielded"},
			{Token: 2, Member: "C", Start: ago(19 * time.Minute)},
		}},
	)
}

// laneSrcs returns the sources of a group snapshot's lanes.
func laneSrcs(snap admin.Snapshot) []laneSrc {
	var out []laneSrc
	for _, e := range snap.Elections {
		ts, _ := orderedTerms(e.Status.Terms)
		out = append(out, laneSrc{e: e, index: e.Status.Partition, terms: ts})
	}
	return out
}

func TestTimelineRebalances(t *testing.T) {
	T := ago(40 * time.Minute)
	rbs := rebalances(laneSrcs(rebalanceGroup()), "g")
	require.Len(t, rbs, 2)

	drain := rbs[0]
	assert.Equal(t, "drain", drain.Kind)
	assert.Equal(t, T, drain.At)
	assert.Equal(t, "2s", drain.Span)
	require.Len(t, drain.Moves, 3)
	for i, m := range drain.Moves {
		assert.Equal(t, i, m.Partition)
		assert.Equal(t, "A", m.From)
		assert.Equal(t, "B", m.To)
		assert.Equal(t, int64(200), m.Ms)
		assert.Zero(t, m.MaxMs)
	}

	crash := rbs[1]
	assert.Equal(t, "crash", crash.Kind)
	require.Len(t, crash.Moves, 1)
	assert.Equal(t, move{Partition: 3, Lease: "g.3", From: "A", To: "C", Token: 6, At: T.Add(10 * time.Minute),
		Reason: records.EndedFailOver, Kind: "crash", Ms: 0, MaxMs: 3000}, crash.Moves[0])

	// Moves of different kinds close together are one rebalance, mixed.
	mixed := rebalanceGroup()
	mixed.Elections[3].Status.Terms[0].End = T.Add(4 * time.Second)
	mixed.Elections[3].Status.Terms[1].Start = T.Add(4 * time.Second)
	rbs = rebalances(laneSrcs(mixed), "g")
	require.Len(t, rbs, 1)
	assert.Equal(t, "crash drain", rbs[0].Kind)
	assert.Equal(t, "mixed: crash (fail-over), drain", rbs[0].Label)
	assert.Len(t, rbs[0].Moves, 4)

	// The group's page lists them newest first.
	p, html := timelinePage(t, rebalanceGroup(), "/timeline?group=g")
	assert.False(t, p.NotFound)
	assert.Len(t, elements(html, "lane"), 5)
	for i, l := range elements(html, "lane") {
		assert.Equal(t, fmt.Sprintf("g.%d", i), l.attrs["data-lane"])
	}
	assert.Contains(t, html, `<a href="/timeline?group=g&amp;p=3"><title>g.3: zoom in</title>`)
	items := elements(html, "[data-rebalance]")
	require.Len(t, items, 2)
	assert.Equal(t, "crash", items[0].attrs["data-kind"])
	assert.Equal(t, strconv.FormatInt(T.Add(10*time.Minute).UnixMilli(), 10), items[0].attrs["data-rebalance"])
	assert.Equal(t, "drain", items[1].attrs["data-kind"])
	moves := elements(html, "[data-partition]")
	require.Len(t, moves, 4)
	assert.Equal(t, map[string]string{"data-partition": "3", "data-from": "A", "data-to": "C", "data-ms": "0"}, moves[0].attrs)
	assert.Equal(t, map[string]string{"data-partition": "0", "data-from": "A", "data-to": "B", "data-ms": "200"}, moves[1].attrs)
	assert.Contains(t, html, "upper bound")

	// The 15m range shows neither.
	_, html = timelinePage(t, rebalanceGroup(), "/timeline?group=g&range=15m")
	assert.Empty(t, elements(html, "[data-rebalance]"))
	assert.Contains(t, html, "No partition moved between members in this range.")
}

func TestTimelineZoom(t *testing.T) {
	p, html := timelinePage(t, rebalanceGroup(), "/timeline?group=g&p=1")
	tl := p.Timeline
	require.False(t, p.NotFound)
	assert.True(t, tl.Zoom)
	lanes := elements(html, "lane")
	require.Len(t, lanes, 1)
	assert.Equal(t, "g.1", lanes[0].attrs["data-lane"])
	assert.Contains(t, html, `<svg class="timeline zoom"`)
	bars := elements(html, "bar", "[data-token]")
	require.Len(t, bars, 2)
	assert.Equal(t, strconv.FormatFloat(zoomLane.H, 'f', -1, 64), bars[0].attrs["height"], "a bigger lane")
	assert.Contains(t, html, `<text class="tok"`)
	assert.Contains(t, html, `>11</text>`, "token labels")
	assert.Contains(t, html, `<a href="/timeline?group=g" data-back>`)
	assert.Len(t, elements(html, "[data-rebalance]"), 1, "the rebalances that moved it")
	assert.Len(t, tl.Terms, 2)
	assert.Equal(t, uint64(11), tl.Terms[0].Token, "terms newest first")

	p, _ = timelinePage(t, rebalanceGroup(), "/timeline?group=g&p=9")
	assert.True(t, p.NotFound)
	p, html = timelinePage(t, rebalanceGroup(), "/timeline?group=nogroup")
	assert.True(t, p.NotFound)
	assert.Contains(t, html, "No group nogroup")
}

func TestTimelineCompact(t *testing.T) {
	snap := consoletest.BigGroup(tlNow, 100, 4)
	p, html := timelinePage(t, snap, "/timeline?group=big")
	assert.True(t, p.Timeline.Compact)
	assert.Contains(t, html, `<svg class="timeline compact"`)
	assert.Len(t, elements(html, "lane"), 100)
	assert.Len(t, elements(html, "bar", "[data-token]"), 400)
	assert.NotContains(t, html, `<text class="tok"`, "no text on compact bars")
	assert.Equal(t, 25, strings.Count(html, `<text class="label"`), "every 4th lane labelled")
	assert.Equal(t, 100, strings.Count(html, `<rect class="hit"`), "every lane zooms")
}

func TestTimelineBadRecords(t *testing.T) {
	snap := admin.Snapshot{Elections: []admin.Election{
		election(admin.Status{Lease: "bad", Partition: -1,
			Holder: &admin.Holder{Member: "<b>x</b>", Token: 9},
			Terms: []admin.Term{
				{Token: 9, Member: "<b>x</b>", Start: ago(5 * time.Minute)},                                                             // open, out of order
				{Token: 4, Member: "a", Start: ago(30 * time.Minute), End: ago(40 * time.Minute), Ended: "?"},                           // ends before it starts
				{Token: 5, Member: "", Start: time.Time{}, End: ago(20 * time.Minute)},                                                  // no start
				{Token: 6, Member: "b", Start: ago(10 * time.Minute), End: ago(10 * time.Minute)},                                       // no time at all
				{Token: 7, Member: "c", Start: tlNow.Add(time.Hour), End: tlNow.Add(2 * time.Hour)},                                     // in the future
				{Token: 8, Member: "d", Start: ago(100 * 365 * 24 * time.Hour), Ended: records.EndedFailOver},                           // a century ago, no end
				{Token: 3, Member: "e", Start: time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC), End: time.Date(1, 1, 1, 0, 0, 2, 0, time.UTC)}, // the year 1: beyond a Duration
			}}, true),
	}}
	for _, rng := range []string{"15m", "1h", "24h", "all"} {
		p, html := timelinePage(t, snap, "/timeline?range="+rng)
		assert.Equal(t, 1, p.Timeline.Undrawn, rng)
		assert.NotContains(t, html, "<b>x</b>", "names are escaped")
		assert.Contains(t, html, `data-member="&lt;b&gt;x&lt;/b&gt;"`, rng)
		for _, b := range elements(html, "bar", "[data-token]") {
			assert.GreaterOrEqual(t, attrInt(t, b, "data-end"), attrInt(t, b, "data-start"), rng)
			assert.GreaterOrEqual(t, attrFloat(t, b, "width"), minBarW, rng)
		}
		assert.LessOrEqual(t, len(p.Timeline.Ticks), maxTicks+1, rng)
	}
	_, html := timelinePage(t, snap, "/timeline")
	var tokens []string
	for _, b := range elements(html, "bar", "[data-token]") {
		tokens = append(tokens, b.attrs["data-token"])
	}
	assert.Equal(t, []string{"8", "4", "6", "9"}, tokens, "in order of start, the future's not in range (the century-old one ended unseen: drawn up to the next start)")
}

func TestTimelineEmpty(t *testing.T) {
	_, html := timelinePage(t, admin.Snapshot{}, "/timeline")
	assert.Contains(t, html, "data-empty")
	assert.NotContains(t, html, "<svg class=\"timeline")
	_, html = timelinePage(t, admin.Snapshot{Elections: []admin.Election{election(admin.Status{Lease: "x", Partition: -1}, false)}}, "/timeline")
	assert.Contains(t, html, "No terms recorded yet")
}

// TestTimelineServed reads the page through a console on the memory
// backend: status records written by a session of its own, one lease held.
func TestTimelineServed(t *testing.T) {
	b := memory.New()
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	sess, err := b.Open(ctx, backend.SessionOptions{TTL: 10 * time.Second})
	require.NoError(t, err)
	defer sess.Close(ctx)
	lease, err := sess.Acquire(ctx, "alpha")
	require.NoError(t, err)
	now := time.Now()
	for _, st := range []records.Status{
		{Lease: "alpha", Partition: -1, Holder: &records.Holder{Member: "n1", Session: sess.ID(), Token: lease.Token(), Since: now.Add(-time.Minute)},
			Terms: []records.Term{
				{Token: lease.Token() - 1, Member: "n2", Start: now.Add(-10 * time.Minute), End: now.Add(-time.Minute), Ended: "client closed"},
				{Token: lease.Token(), Member: "n1", Start: now.Add(-time.Minute)},
			}},
		{Lease: "jobs.0", Group: "jobs", Partition: 0, Terms: []records.Term{{Token: 1, Member: "n2", Start: now.Add(-time.Minute), End: now, Ended: "moved"}}},
	} {
		_, err := sess.(backend.Records).PutRecord(ctx, records.StatusKey(st.Lease), records.Encode(st), backend.Condition{})
		require.NoError(t, err)
	}
	s, _, done := openConsole(t, b, WithReadOnly(true))
	defer done()

	w := get(s, "/timeline")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	body := w.Body.String()
	assert.Contains(t, body, `<body data-view="/timeline"`)
	assert.Contains(t, body, `data-lane="alpha"`)
	assert.NotContains(t, body, `data-lane="jobs.0"`)
	assert.Len(t, elements(body, "bar", "open"), 1, "the lease held: its term is open")
	assert.Len(t, elements(body, "mark", "handoff", "[data-token]"), 1)
	assert.Contains(t, body, `href="/timeline?group=jobs"`, "the group selector")

	w = get(s, "/timeline?group=jobs&range=15m")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Contains(t, w.Body.String(), `<body data-view="/timeline?group=jobs&amp;range=15m"`)
	assert.Contains(t, w.Body.String(), `data-lane="jobs.0"`)

	// The page's event stream renders the same view.
	ws, stop := openStream(t, s, url.QueryEscape("/timeline?group=jobs&range=15m"))
	ev := ws.next(t, 10*time.Second)
	stop()
	assert.Contains(t, ev.data, `data-lane="jobs.0"`)
	assert.Contains(t, ev.data, `<a href="/timeline?group=jobs&amp;range=15m" aria-current="true">jobs</a>`)

	assert.Equal(t, http.StatusNotFound, get(s, "/timeline?range=2h").Code)
	assert.Equal(t, http.StatusNotFound, get(s, "/timeline?group=nope").Code)
	assert.Equal(t, http.StatusNotFound, get(s, "/timeline?group=jobs&p=5").Code)
	require.NoError(t, lease.Release(ctx))
}

// BenchmarkPages1024 builds and renders, from a snapshot in memory, the
// pages of a group of 1,024 partitions with 32 terms each, all within the
// hour shown, and the health records of its 5 members: the worst case of
// the timeline (every term a move), and the overview and members pages
// over the same snapshot; and the timeline of the same group with 2 terms
// per partition in the hour. The backend's read is not measured (it is the
// same Snapshot for every page; see BENCHMARKS.md).
func BenchmarkPages1024(b *testing.B) {
	snap := consoletest.BigGroup(tlNow, 1024, records.TermsLen)
	for _, m := range []string{"node-a", "node-b", "node-c", "node-d", "node-e"} {
		h := admin.Health{Member: m, Session: m + "-s", TTLms: 3000, Updated: tlNow.Add(-2 * time.Second)}
		for i := range records.HealthLen {
			h.Renewals = append(h.Renewals, admin.Renewal{At: tlNow.Add(-time.Duration(records.HealthLen-i) * time.Second), LeftMs: 1800 + int64(i), RTTms: 3})
		}
		snap.Health = append(snap.Health, h)
	}
	light := consoletest.BigGroup(tlNow, 1024, 2) // a deploy's worth: one move per partition in the hour
	light.Health = snap.Health
	for _, c := range []struct {
		name string
		snap admin.Snapshot
		path string
	}{
		{"32terms", snap, "/timeline?group=big"}, {"2terms", light, "/timeline?group=big"},
		{"32terms", snap, "/timeline?group=big&p=7"}, {"32terms", snap, "/"}, {"32terms", snap, "/members"},
	} {
		snap, path := c.snap, c.path
		b.Run(c.name+strings.ReplaceAll(path, "/", "_"), func(b *testing.B) {
			v, ok := parseView(path)
			if !ok {
				b.Fatalf("no view %s", path)
			}
			var size int
			for b.Loop() {
				p := &page{View: v, Title: path}
				if err := p.build(&loader{ctx: b.Context(), now: tlNow, snap: snap, snapOK: true}); err != nil {
					b.Fatal(err)
				}
				out, err := render("layout", p)
				if err != nil {
					b.Fatal(err)
				}
				size = len(out)
			}
			b.ReportMetric(float64(size), "html-bytes")
		})
	}
}

// TestFmtDur: the one short duration format of the console's pages, for
// durations and for milliseconds alike.
func TestFmtDur(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{250 * time.Millisecond, "250ms"},
		{1500 * time.Millisecond, "1.5s"},
		{12345 * time.Millisecond, "12.3s"},
		{125 * time.Second, "2m5s"},
		{5*time.Hour + 2*time.Minute + 10*time.Second, "5h2m"},
		{50 * time.Hour, "2d2h"},
		{-1500 * time.Millisecond, "-1.5s"},
	} {
		if got := fmtDur(c.d); got != c.want {
			t.Errorf("fmtDur(%v) = %q, want %q", c.d, got, c.want)
		}
		if got := fmtMs(c.d.Milliseconds()); got != c.want {
			t.Errorf("fmtMs(%d) = %q, want %q", c.d.Milliseconds(), got, c.want)
		}
	}
}
