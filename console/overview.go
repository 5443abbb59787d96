package console

import (
	"fmt"
	"html/template"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/internal/records"
)

// overview is what the landing page shows: what needs attention, then
// counts of the rest.
type overview struct {
	// Attention lists what needs attention, the most urgent kinds first
	// (vacant, failed, deadline, stale, disabled, drained, problem).
	Attention []attention

	// The plain elections: in all, held, vacant (not disabled), disabled.
	Elections, ElectionsHeld, ElectionsVacant, ElectionsDisabled int
	Groups                                                       []groupCount
	// The scheduled elections and partitions, and their runs as their
	// status counts them (all their runs, not only the history kept).
	Jobs, JobsFailing int
	Succeeded, Failed uint64
	// The members: known, live, and publishing health records.
	Members, MembersLive, MembersReporting int
}

// SuccessRate is the share of the jobs' runs that did not fail, in words.
func (o *overview) SuccessRate() string { return percent(o.Succeeded, o.Succeeded+o.Failed) }

// Runs counts the jobs' runs, as their status counts them.
func (o *overview) Runs() uint64 { return o.Succeeded + o.Failed }

// groupCount is one group in the overview's counts.
type groupCount struct {
	Name        string
	Held, Total int // partitions held (by anyone), and in all
	Disabled    bool
}

// attention is one item of the overview's "Needs attention".
type attention struct {
	// Kind is vacant, disabled, drained, failed, deadline, stale or
	// problem.
	Kind   string
	Target string // the name it is of: a lease, group, member or record key
	Href   string // the page that shows it
	Level  string // "bad", "warn" or "info" (an operator's deliberate act)
	What   string // the target in words: "partition billing.3"
	Reason string // why it needs attention, in words
	// At is the time the reason refers to, shown after it (zero: none).
	At time.Time
	// Detail follows, after a colon: an error, an operator's reason.
	Detail string
}

// Run results as the history names them.
var (
	resultSucceeded = simba.Succeeded.String()
	resultFailed    = simba.Failed.String()
	resultCancelled = simba.Cancelled.String()
)

// Attention kinds, in the order the overview lists them.
var attentionOrder = []string{"vacant", "failed", "deadline", "stale", "disabled", "drained", "problem"}

// maxVacantItems is the number of vacant partitions of one group the
// overview lists one by one; more make one item for the group.
const maxVacantItems = 6

// maxProblemItems is the number of skipped records the overview lists one
// by one (the page's notice above lists them all, up to its own bound).
const maxProblemItems = 5

// overviewFuncs are the template functions of the overview and charts.
// Their names are unlike those of the timeline's (timelineFuncs), which
// share the templates' namespace.
var overviewFuncs = template.FuncMap{
	"coord":   f1,
	"msWords": fmtMs,
}

// buildOverview fills the overview from the snapshot, reusing the rows of
// the other pages.
func (p *page) buildOverview(l *loader) error {
	snap, err := l.snapshot()
	if err != nil {
		return err
	}
	q := &page{View: p.View, s: p.s}
	for _, build := range []func(*loader) error{q.buildElections, q.buildGroups, q.buildMembers} {
		if err := build(l); err != nil {
			return err
		}
	}
	ops := snap.Ops
	o := &overview{}
	var items []attention
	add := func(a attention) { items = append(items, a) }

	// Elections.
	for _, e := range q.Elections {
		o.Elections++
		switch {
		case e.Disabled:
			o.ElectionsDisabled++
		case e.Held:
			o.ElectionsHeld++
		default:
			o.ElectionsVacant++
			what, href := "election "+e.Name, "/elections"
			if e.Scheduled {
				what, href = "job "+e.Name, "/jobs/"+e.Name
			}
			a := attention{Kind: "vacant", Target: e.Name, Href: href, Level: "bad", What: what, Reason: "no member holds it"}
			if !e.Status.Updated.IsZero() {
				a.Reason += "; its status was last written"
				a.At = e.Status.Updated
			}
			add(a)
		}
	}

	// Groups and their partitions.
	for _, g := range q.Groups {
		gc := groupCount{Name: g.Name, Total: len(g.Cells), Disabled: g.Disabled}
		var vacant []cell
		for _, c := range g.Cells {
			if c.State != "vacant" {
				gc.Held++
				continue
			}
			if !g.Disabled && !ops.Disabled[c.Lease] {
				vacant = append(vacant, c)
			}
		}
		o.Groups = append(o.Groups, gc)
		if len(vacant) > maxVacantItems {
			var nums []string
			for _, c := range vacant {
				nums = append(nums, "#"+strconv.Itoa(c.Index))
			}
			add(attention{Kind: "vacant", Target: g.Name, Href: "/groups", Level: "bad", What: "group " + g.Name,
				Reason: fmt.Sprintf("%d of its %d partitions are vacant: no member holds them", len(vacant), len(g.Cells)),
				Detail: strings.Join(nums, ", ")})
			continue
		}
		for _, c := range vacant {
			href := "/groups"
			if c.Scheduled {
				href = "/jobs/" + c.Lease
			}
			a := attention{Kind: "vacant", Target: c.Lease, Href: href, Level: "bad", What: "partition " + c.Lease,
				Reason: "no member holds it"}
			if c.Owner != "" {
				a.Reason += "; its owner is " + c.Owner
			}
			add(a)
		}
	}

	// Jobs: plain elections and partitions with a schedule.
	for _, e := range snap.Elections {
		if e.Status.Schedule == "" {
			continue
		}
		row := jobRowOf(e, ops)
		o.Jobs++
		o.Succeeded += row.Status.Succeeded
		o.Failed += row.Status.Failed
		r := row.Status.LastRun
		if r == nil || (r.Result != resultFailed && r.Result != records.Interrupted) {
			continue
		}
		o.JobsFailing++
		a := attention{Kind: "failed", Target: row.Name, Href: "/jobs/" + row.Name, Level: "bad", What: "job " + row.Name, At: r.Start}
		if row.Status.Group != "" {
			a.What = "partition job " + row.Name
		}
		if r.Result == records.Interrupted {
			a.Reason = fmt.Sprintf("its last run, #%d, was interrupted: its holder's term ended while it ran; it started", r.Seq)
		} else {
			a.Reason = fmt.Sprintf("its last run, #%d, failed; it started", r.Seq)
			a.Detail = r.Error
			if c := exit(r.ExitCode); c != "" {
				a.Detail = strings.TrimPrefix(a.Detail+" ("+c+")", " ")
			}
		}
		add(a)
	}

	// Members: their headroom, and drains.
	for _, m := range q.Members {
		o.Members++
		if m.Live {
			o.MembersLive++
		}
		h := m.Headroom
		if h == nil {
			continue
		}
		o.MembersReporting++
		switch h.Level {
		case "stale":
			add(attention{Kind: "stale", Target: m.ID, Href: "/members", Level: "warn", What: "member " + m.ID,
				Reason: "its client has not published its renewals for longer than it would while alive; it may be gone. Last written",
				At:     h.Updated})
		case "warn", "bad":
			share := "a third"
			if h.Level == "bad" {
				share = "a tenth"
			}
			add(attention{Kind: "deadline", Target: m.ID, Href: "/members", Level: h.Level, What: "member " + m.ID,
				Reason: fmt.Sprintf("close to its deadline: a recent renewal came with %s of its %s TTL left, under %s of it",
					fmtMs(h.MinMs), fmtMs(h.TTLms), share)})
		}
	}

	// Disables, of anything: elections, jobs, partitions, groups, names
	// not seen yet.
	groups := map[string]bool{}
	for _, g := range snap.Groups {
		groups[g.Name] = true
	}
	byName := map[string]admin.Election{}
	for _, e := range snap.Elections {
		byName[e.Name] = e
	}
	for _, name := range slices.Sorted(maps.Keys(ops.Disabled)) {
		if !ops.Disabled[name] {
			continue
		}
		a := attention{Kind: "disabled", Target: name, Href: "/elections", Level: "info", What: name,
			Reason: "disabled: it runs nowhere until enabled"}
		e, known := byName[name]
		switch {
		case groups[name]:
			a.What, a.Href = "group "+name, "/groups"
			a.Reason = "disabled: none of its partitions runs until enabled"
		case known && e.Status.Group != "":
			a.What, a.Href = "partition "+name, "/groups"
			if e.Status.Schedule != "" {
				a.Href = "/jobs/" + name
			}
		case known && e.Status.Schedule != "":
			a.What, a.Href = "job "+name, "/jobs/"+name
		case known:
			a.What = "election " + name
		}
		if op, ok := ops.Disables[name]; ok {
			a.Detail = describe(&opNote{Op: op})
		}
		add(a)
	}
	for _, id := range slices.Sorted(maps.Keys(ops.Drained)) {
		if !ops.Drained[id] {
			continue
		}
		a := attention{Kind: "drained", Target: id, Href: "/members", Level: "info", What: "member " + id,
			Reason: "drained: it holds nothing and contends for nothing until undrained"}
		if op, ok := ops.Drains[id]; ok {
			a.Detail = describe(&opNote{Op: op})
		}
		add(a)
	}

	// Records skipped.
	for i, pr := range snap.Problems {
		if i == maxProblemItems {
			add(attention{Kind: "problem", Target: "", Href: p.View.Path(), Level: "warn",
				What:   fmt.Sprintf("%d more records", len(snap.Problems)-maxProblemItems),
				Reason: "could not be used and were skipped; the notice above lists them"})
			break
		}
		add(attention{Kind: "problem", Target: pr.Key, Href: problemHref(pr.Key), Level: "warn", What: "record " + pr.Key,
			Reason: "could not be used and is skipped", Detail: pr.Reason})
	}

	slices.SortStableFunc(items, func(a, b attention) int {
		return slices.Index(attentionOrder, a.Kind) - slices.Index(attentionOrder, b.Kind)
	})
	o.Attention = items
	p.Overview = o
	return nil
}

// problemHref is the page that shows what a skipped record is of.
func problemHref(key string) string {
	switch {
	case strings.HasPrefix(key, records.StatusPrefix):
		lease := strings.TrimPrefix(key, records.StatusPrefix)
		if validLease(lease) {
			return "/jobs/" + lease
		}
		return "/elections"
	case strings.HasPrefix(key, records.HistoryPrefix):
		lease, _, _ := strings.Cut(strings.TrimPrefix(key, records.HistoryPrefix), "/")
		if validLease(lease) {
			return "/jobs/" + lease
		}
		return "/jobs"
	case strings.HasPrefix(key, records.HealthPrefix):
		return "/members"
	case strings.HasPrefix(key, "group/"):
		return "/groups"
	case strings.HasPrefix(key, records.OpsPrefix), strings.HasPrefix(key, records.AuditPrefix):
		return "/audit"
	}
	return "/elections"
}

// validLease reports whether lease is a lease name, whose job page can
// be asked for.
func validLease(lease string) bool { return simba.CheckName(lease) == nil }

// percent renders n of all as a percentage, rounded down to a tenth (so
// that 100% means all), or "—" when all is 0.
func percent(n, all uint64) string {
	if all == 0 {
		return "—"
	}
	n = min(n, all)
	var pm uint64 // per mille
	if all < 1<<50 {
		pm = n * 1000 / all
	} else { // n * 1000 could overflow
		pm = min(uint64(float64(n)/float64(all)*1000), 1000)
		if n < all {
			pm = min(pm, 999)
		}
	}
	if pm%10 == 0 {
		return strconv.FormatUint(pm/10, 10) + "%"
	}
	return fmt.Sprintf("%d.%d%%", pm/10, pm%10)
}

// fmtMs renders milliseconds as fmtDur renders durations: "250ms",
// "1.5s", "2m5s".
func fmtMs(ms int64) string { return fmtDur(time.Duration(ms) * time.Millisecond) }

// f1 renders a coordinate with one decimal.
func f1(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }

// Headroom: how much of its TTL a member had left at its last renewals.

// staleRenewals: a health record older than this many of its writes
// (records.HealthEvery) and a TTL is of a client that may be gone.
const staleRenewals = 3

// headroom is a member's recent renewals as the members page draws them.
type headroom struct {
	Member  string
	Session string
	TTLms   int64 // the TTL granted (0: not known)
	// MinMs is the least time left at the renewals shown; LastRTTms the
	// round trip of the last. Both are 0 without renewals.
	MinMs, LastRTTms int64
	Renewals         int    // how many are shown
	Failed           uint64 // renewals that failed since the client started
	Updated          time.Time
	// Level is "ok", "warn" (a renewal with under a third of the TTL
	// left), "bad" (under a tenth) or "stale" (the record is older than
	// its client would let it be while alive).
	Level string
	Bars  []headroomBar // one per renewal, oldest first
	// WarnY and BadY are the heights of the thresholds in the sparkline.
	WarnY, BadY float64
}

// headroomBar is one renewal in the sparkline.
type headroomBar struct {
	X, Y, W, H float64
	Level      string // "ok", "warn" or "bad"
	Title      string
}

// The sparkline of the renewals: HealthLen bars, newest on the right.
const (
	sparkBarStep = 6
	sparkBarW    = 4
	sparkH       = 24
)

// SparkW is the width of the headroom sparkline.
func (h *headroom) SparkW() int { return records.HealthLen * sparkBarStep }

// SparkH is the height of the headroom sparkline.
func (h *headroom) SparkH() int { return sparkH }

// leftLevel is the level of a renewal with leftMs of ttlMs left: "bad"
// under a tenth, "warn" under a third, else "ok" (also when the TTL is
// not known).
func leftLevel(leftMs, ttlMs int64) string {
	switch {
	case ttlMs <= 0:
		return "ok"
	case leftMs*10 < ttlMs:
		return "bad"
	case leftMs*3 < ttlMs:
		return "warn"
	}
	return "ok"
}

// staleAfter is how old a health record of a client with ttl may be while
// the client lives.
func staleAfter(ttl time.Duration) time.Duration {
	return staleRenewals*records.HealthEvery + max(ttl, 0)
}

// newHeadroom draws h as of now.
func newHeadroom(h admin.Health, now time.Time) *headroom {
	out := &headroom{Member: h.Member, Session: h.Session, TTLms: max(h.TTLms, 0), Failed: h.Failed, Updated: h.Updated, Level: "ok"}
	rs := h.Renewals
	if len(rs) > records.HealthLen {
		rs = rs[len(rs)-records.HealthLen:]
	}
	out.Renewals = len(rs)
	scale := func(ms int64) float64 { // height of ms in the sparkline
		if out.TTLms <= 0 {
			return sparkH
		}
		return float64(sparkH) * min(1, float64(max(ms, 0))/float64(out.TTLms))
	}
	if out.TTLms > 0 {
		out.WarnY = sparkH - scale(out.TTLms/3)
		out.BadY = sparkH - scale(out.TTLms/10)
	}
	for i, r := range rs {
		left := max(r.LeftMs, 0)
		if i == 0 || left < out.MinMs {
			out.MinMs = left
		}
		out.LastRTTms = max(r.RTTms, 0)
		bh := max(scale(left), 1) // a renewal at the deadline still shows
		lv := leftLevel(left, out.TTLms)
		out.Bars = append(out.Bars, headroomBar{
			X: float64((records.HealthLen-len(rs)+i)*sparkBarStep + 1), Y: sparkH - bh, W: sparkBarW, H: bh, Level: lv,
			Title: fmt.Sprintf("%s: %s left of %s, round trip %s", r.At.UTC().Format("15:04:05 UTC"), fmtMs(left), fmtMs(out.TTLms), fmtMs(max(r.RTTms, 0))),
		})
	}
	if len(rs) > 0 {
		out.Level = leftLevel(out.MinMs, out.TTLms)
	}
	if h.Updated.IsZero() || now.Sub(h.Updated) > staleAfter(time.Duration(out.TTLms)*time.Millisecond) {
		out.Level = "stale"
	}
	return out
}

// Words says what the level means, for the page.
func (h *headroom) Words() string {
	switch h.Level {
	case "bad":
		return "very close to its deadline"
	case "warn":
		return "close to its deadline"
	case "stale":
		return "not published lately: the client may be gone"
	}
	return ""
}

// Runs over time: the history of a job as a chart.

// runChart is a job's runs drawn as an SVG chart: x the start time, y the
// duration; or, small, as a sparkline without axes.
type runChart struct {
	W, H                     float64 // the viewBox
	Left, Top, Right, Bottom float64 // the plot area
	SourceY                  float64 // the band of the source markers
	Small                    bool
	Marks                    []runMark
	XTicks, YTicks           []tick
	Labels                   []tick // the axes' names

	// What the runs shown came to.
	Runs, Succeeded, Failed, Interrupted, Cancelled, Running int
	Undrawn                                                  int // runs without a start time, not drawn
}

// runMark is one run in a chart.
type runMark struct {
	Seq            uint64
	Result, Source string
	Ms             int64 // how long it took, or has run
	Class          string
	X, Y, W, H     float64 // its bar
	Shape          string  // the path of its result's marker, at the bar's top
	SourceShape    string  // the path of its source's marker ("" for normal)
	Title          string
}

// tick is a line of an axis or the grid, with its label at (TX, TY).
type tick struct {
	X1, Y1, X2, Y2 float64
	TX, TY         float64
	Label          string
	End            bool // the label ends at (TX, TY)
}

// legendItem is one entry of a chart's legend: a name and its marker's
// path, 12×12.
type legendItem struct{ Name, Path string }

// LegendResults are the markers of the results.
func (c *runChart) LegendResults() []legendItem {
	var out []legendItem
	for _, r := range []string{resultSucceeded, resultFailed, records.Interrupted, resultCancelled, records.Running} {
		out = append(out, legendItem{r, resultShape(r, 6, 6, 4)})
	}
	return out
}

// LegendSources are the markers of the sources other than normal.
func (c *runChart) LegendSources() []legendItem {
	var out []legendItem
	for _, s := range []string{records.SourceMisfire, records.SourceTrigger, records.SourceFailOver} {
		out = append(out, legendItem{s, sourceShape(s, 6, 6, 4.5)})
	}
	return out
}

// SuccessRate says how many of the finished runs shown succeeded.
func (c *runChart) SuccessRate() string {
	return percent(uint64(c.Succeeded), uint64(c.Runs-c.Running))
}

// Finished counts the runs shown that ended.
func (c *runChart) Finished() int { return c.Runs - c.Running }

// chart sizes.
const (
	chartW, chartH = 720, 200
	smallW, smallH = 150, 28
)

// newRunChart draws the runs h (oldest first), the running ones up to
// now; small draws a sparkline.
func newRunChart(h []admin.Run, now time.Time, small bool) *runChart {
	c := &runChart{W: chartW, H: chartH, Left: 56, Top: 32, Right: chartW - 12, Bottom: chartH - 30, SourceY: 10, Small: small}
	if small {
		c.W, c.H, c.Left, c.Top, c.Right, c.Bottom = smallW, smallH, 3, 3, smallW-3, smallH-2
	}
	type run struct {
		admin.Run
		ms int64
	}
	var runs []run
	for _, r := range h {
		c.Runs++
		switch r.Result {
		case resultSucceeded:
			c.Succeeded++
		case resultFailed:
			c.Failed++
		case records.Interrupted:
			c.Interrupted++
		case resultCancelled:
			c.Cancelled++
		case records.Running:
			c.Running++
		}
		if r.Start.IsZero() {
			c.Undrawn++
			continue
		}
		end := r.End
		if end.IsZero() {
			end = now
		}
		runs = append(runs, run{Run: r, ms: max(end.Sub(r.Start).Milliseconds(), 0)})
	}
	if len(runs) == 0 {
		return c
	}
	t0, t1 := runs[0].Start, runs[0].Start
	var maxMs int64
	for _, r := range runs {
		if r.Start.Before(t0) {
			t0 = r.Start
		}
		if r.Start.After(t1) {
			t1 = r.Start
		}
		maxMs = max(maxMs, r.ms)
	}
	plotW := c.Right - c.Left
	barW := min(max(plotW/float64(len(runs))*0.6, 2), 10)
	if small {
		barW = min(max(plotW/float64(len(runs))*0.7, 1.5), 6)
	}
	span := t1.Sub(t0)
	x := func(t time.Time) float64 {
		if span <= 0 {
			return c.Left + plotW/2
		}
		inner := plotW - barW - 8
		return c.Left + barW/2 + 4 + inner*float64(t.Sub(t0))/float64(span)
	}
	top := niceCeil(max(maxMs, 1))
	y := func(ms int64) float64 {
		return c.Bottom - (c.Bottom-c.Top)*float64(min(ms, top))/float64(top)
	}
	for _, r := range runs {
		m := runMark{Seq: r.Seq, Result: r.Result, Source: r.Source, Ms: r.ms, Class: resultClass(r.Result)}
		cx, cy := x(r.Start), y(r.ms)
		m.X, m.W = cx-barW/2, barW
		m.Y, m.H = cy, max(c.Bottom-cy, 1)
		if m.H == 1 {
			m.Y = c.Bottom - 1
		}
		size := 3.5
		if small {
			size = 2
		}
		m.Shape = resultShape(m.Class, cx, m.Y, size)
		if !small {
			m.SourceShape = sourceShape(r.Source, cx, c.SourceY, 4)
		}
		m.Title = fmt.Sprintf("run %d: %s, %s; started %s, %s", r.Seq, r.Result, r.Source,
			r.Start.UTC().Format("2006-01-02 15:04:05 UTC"), tookWords(r.Run, r.ms))
		if r.Member != "" {
			m.Title += ", on " + r.Member
		}
		if r.Error != "" {
			m.Title += ": " + r.Error
		}
		c.Marks = append(c.Marks, m)
	}
	if small {
		return c
	}
	for _, ms := range []int64{0, top / 2, top} {
		at := y(ms)
		c.YTicks = append(c.YTicks, tick{X1: c.Left, Y1: at, X2: c.Right, Y2: at, TX: c.Left - 6, TY: at + 4, Label: fmtMs(ms)})
	}
	c.Labels = []tick{
		{TX: c.Right, TY: c.H - 1, Label: "start (UTC)", End: true},
		{TX: 4, TY: c.SourceY + 4, Label: "source"},
		{TX: 4, TY: c.Top - 6, Label: "took"},
	}
	layout := "15:04:05"
	switch {
	case span >= 24*time.Hour:
		layout = "01-02 15:04"
	case t0.UTC().YearDay() != t1.UTC().YearDay():
		layout = "01-02 15:04"
	}
	n := 4
	if span <= 0 {
		n = 1
	}
	for i := range n {
		t := t0
		if n > 1 {
			t = t0.Add(time.Duration(float64(span) * float64(i) / float64(n-1)))
		}
		at := x(t)
		c.XTicks = append(c.XTicks, tick{X1: at, Y1: c.Bottom, X2: at, Y2: c.Bottom + 4, TX: at, TY: c.Bottom + 16, Label: t.UTC().Format(layout)})
	}
	return c
}

// tookWords says how long a run took, or that it runs.
func tookWords(r admin.Run, ms int64) string {
	if r.End.IsZero() {
		return "running for " + fmtMs(ms)
	}
	return "took " + fmtMs(ms)
}

// resultClass is the class of a run's result in the charts: its result,
// or "unknown".
func resultClass(result string) string {
	switch result {
	case resultSucceeded, resultFailed, records.Interrupted, resultCancelled, records.Running:
		return result
	}
	return "unknown"
}

// resultShape is the path of the marker of a result at (x, y), of size s:
// a dot for succeeded, a cross for failed, a triangle for interrupted, a
// square for cancelled, a ring for running.
func resultShape(class string, x, y, s float64) string {
	switch class {
	case resultFailed:
		return fmt.Sprintf("M%s %sL%s %sM%s %sL%s %s", f1(x-s), f1(y-s), f1(x+s), f1(y+s), f1(x+s), f1(y-s), f1(x-s), f1(y+s))
	case records.Interrupted:
		return fmt.Sprintf("M%s %sL%s %sL%s %sZ", f1(x), f1(y+s), f1(x-s), f1(y-s), f1(x+s), f1(y-s))
	case resultCancelled:
		return fmt.Sprintf("M%s %sh%sv%sh-%sZ", f1(x-s*0.8), f1(y-s*0.8), f1(s*1.6), f1(s*1.6), f1(s*1.6))
	}
	r := s * 0.85
	return fmt.Sprintf("M%s %sa%s %s 0 1 0 %s 0a%s %s 0 1 0 -%s 0Z", f1(x-r), f1(y), f1(r), f1(r), f1(2*r), f1(r), f1(r), f1(2*r))
}

// sourceShape is the path of the marker of a run's source at (x, y): a
// diamond for misfire, a triangle up for trigger, a square for
// fail-over; none for normal.
func sourceShape(source string, x, y, s float64) string {
	switch source {
	case records.SourceMisfire:
		return fmt.Sprintf("M%s %sL%s %sL%s %sL%s %sZ", f1(x), f1(y-s), f1(x+s), f1(y), f1(x), f1(y+s), f1(x-s), f1(y))
	case records.SourceTrigger:
		return fmt.Sprintf("M%s %sL%s %sL%s %sZ", f1(x), f1(y-s), f1(x+s), f1(y+s), f1(x-s), f1(y+s))
	case records.SourceFailOver:
		return fmt.Sprintf("M%s %sh%sv%sh-%sZ", f1(x-s*0.8), f1(y-s*0.8), f1(s*1.6), f1(s*1.6), f1(s*1.6))
	}
	return ""
}

// niceCeil rounds ms up to 1, 2 or 5 times a power of ten.
func niceCeil(ms int64) int64 {
	for p := int64(1); p <= 1e15; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if ms <= m*p {
				return m * p
			}
		}
	}
	return ms
}
