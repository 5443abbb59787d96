package console

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/internal/records"
)

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

	// Log reports that the durations are drawn on a log scale: the
	// longest run took more than ten times as long as the typical one, so
	// that on a linear scale the typical runs would be flat (see
	// newDurScale).
	Log bool

	// What the runs shown came to.
	Runs, Succeeded, Failed, Interrupted, Cancelled, Running int
	Undrawn                                                  int // runs without a start time, not drawn
	// Skipped counts the planned starts that the history's entries of
	// result "skipped" stand for: not runs, neither drawn nor counted in
	// Runs.
	Skipped int
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
	// Vertical turns the label to read upwards, centred on (TX, TY): the
	// vertical axis's name, in the margin left of its ticks' labels.
	Vertical bool
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
	chartW, chartH = 720, 210
	smallW, smallH = 150, 28
)

// newRunChart draws the runs h (oldest first), the running ones up to
// now; small draws a sparkline.
func newRunChart(h []admin.Run, now time.Time, small bool) *runChart {
	c := &runChart{W: chartW, H: chartH, Left: 64, Top: 32, Right: chartW - 12, Bottom: chartH - 38, SourceY: 10, Small: small}
	if small {
		c.W, c.H, c.Left, c.Top, c.Right, c.Bottom = smallW, smallH, 3, 3, smallW-3, smallH-2
	}
	type run struct {
		admin.Run
		ms int64
	}
	var runs []run
	for _, r := range h {
		if r.Result == records.Skipped {
			c.Skipped += max(r.Skipped, 1)
			continue
		}
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
	for _, r := range runs {
		if r.Start.Before(t0) {
			t0 = r.Start
		}
		if r.Start.After(t1) {
			t1 = r.Start
		}
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
	durs := make([]int64, len(runs))
	for i, r := range runs {
		durs[i] = r.ms
	}
	sc := newDurScale(durs)
	c.Log = sc.log
	y := func(ms int64) float64 { return c.Bottom - (c.Bottom-c.Top)*sc.frac(ms) }
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
	for _, ms := range sc.ticks() {
		at := y(ms)
		c.YTicks = append(c.YTicks, tick{X1: c.Left, Y1: at, X2: c.Right, Y2: at, TX: c.Left - 6, TY: at + 4, Label: fmtMs(ms)})
	}
	took := "took"
	if sc.log {
		took = "took (log scale)"
	}
	// The axes' names, each clear of the others and of the ticks' labels:
	// the source band's at its left, the durations' upright in the left
	// margin, the start times' under theirs.
	c.Labels = []tick{
		{TX: c.Right, TY: c.H - 2, Label: "start (UTC)", End: true},
		{TX: 4, TY: c.SourceY + 4, Label: "source"},
		{TX: 11, TY: (c.Top + c.Bottom) / 2, Label: took, Vertical: true},
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
		c.XTicks = append(c.XTicks, tick{X1: at, Y1: c.Bottom, X2: at, Y2: c.Bottom + 4, TX: at, TY: c.Bottom + 18, Label: t.UTC().Format(layout)})
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

// durScale places durations on a chart's vertical axis: linearly from
// 0 to top, or logarithmically from lo to hi, powers of ten.
type durScale struct {
	log         bool
	top, lo, hi int64 // milliseconds
}

// logAbove is how many times longer than the typical run (the lower
// median) the longest may take before a chart's scale turns logarithmic:
// on a linear scale the typical runs would be under a tenth of its
// height, flat lines beside one long run.
const logAbove = 10

// newDurScale returns the scale for runs that took durs milliseconds
// (at least one): linear, unless the longest is more than logAbove times
// the typical one, for a log scale then keeps the typical runs as visible
// as the long one. The log scale starts a decade below the shortest run
// (at least 1ms), so that even the shortest has a bar.
func newDurScale(durs []int64) durScale {
	sorted := slices.Clone(durs)
	slices.Sort(sorted)
	longest, typical := max(sorted[len(sorted)-1], 1), max(sorted[(len(sorted)-1)/2], 1)
	s := durScale{top: niceCeil(longest)}
	if longest <= logAbove*typical {
		return s
	}
	s.log = true
	s.hi = 1
	for s.hi < longest {
		s.hi *= 10
	}
	s.lo = 1
	for s.lo*100 <= max(sorted[0], 1) {
		s.lo *= 10
	}
	return s
}

// frac returns the height of ms on the scale, as a share of the plot's
// height: 0 at the bottom, 1 at the top.
func (s durScale) frac(ms int64) float64 {
	if !s.log {
		return float64(min(max(ms, 0), s.top)) / float64(s.top)
	}
	ms = min(max(ms, s.lo), s.hi)
	return math.Log10(float64(ms)/float64(s.lo)) / math.Log10(float64(s.hi)/float64(s.lo))
}

// ticks returns the durations the axis labels: 0, half the top and the
// top; on a log scale each power of ten from lo to hi (every other one
// when there are more than six).
func (s durScale) ticks() []int64 {
	if !s.log {
		return []int64{0, s.top / 2, s.top}
	}
	var decades []int64
	for d := s.lo; d <= s.hi; d *= 10 {
		decades = append(decades, d)
	}
	if len(decades) <= 6 {
		return decades
	}
	var out []int64
	for i := len(decades) - 1; i >= 0; i -= 2 { // keep the top
		out = append(out, decades[i])
	}
	slices.Reverse(out)
	return out
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
