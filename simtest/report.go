package simtest

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// entry is one line of the timeline.
type entry struct {
	at   time.Time
	who  string
	what string
}

// timelineMax bounds the lines a report prints around its first violation.
const timelineMax = 80

// lines merges the notes (terms, faults, logs), the resources'
// operations and the violations, in order of time: built once, when a
// report or the timeline is asked for.
func (r *Result) lines() []entry {
	r.once.Do(func() {
		out := append([]entry(nil), r.notes...)
		for _, op := range r.Ops {
			out = append(out, entry{at: op.At, who: op.Node, what: op.String()})
		}
		for _, v := range r.found {
			out = append(out, entry{at: v.at, who: "!!", what: v.err.Error()})
		}
		sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
		r.timeline = out
	})
	return r.timeline
}

// Report describes the seed's run: its violations, its schedule, and the
// timeline of terms, faults and resource operations around the first
// violation (at most 80 lines; [Result.Timeline] has all of it).
func (r *Result) Report() string {
	var b strings.Builder
	if !r.Failed() {
		fmt.Fprintf(&b, "simtest: seed %d: no violation (%d terms, %d resource operations)\n", r.Seed, len(r.Terms), len(r.Ops))
	} else {
		fmt.Fprintf(&b, "simtest: seed %d: %d violation(s):\n", r.Seed, len(r.Violations))
		for i, err := range r.Violations {
			if i == 10 {
				fmt.Fprintf(&b, "  … and %d more\n", len(r.Violations)-i)
				break
			}
			fmt.Fprintf(&b, "  %s\n", err)
		}
	}
	fmt.Fprintf(&b, "schedule (%d faults):\n", len(r.Schedule))
	for _, f := range r.Schedule {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	lines := r.lines()
	title := "timeline"
	if r.Failed() && len(lines) > timelineMax {
		// The first violation, and what led to it.
		first := 0
		for i, e := range lines {
			if e.who == "!!" {
				first = i
				break
			}
		}
		from := max(0, first-timelineMax*3/4)
		to := min(len(lines), from+timelineMax)
		title = fmt.Sprintf("timeline around the first violation (lines %d–%d of %d)", from+1, to, len(lines))
		lines = lines[from:to]
	}
	fmt.Fprintf(&b, "%s:\n", title)
	for _, e := range lines {
		fmt.Fprintf(&b, "  %9.3fs  %-6s %s\n", e.at.Sub(r.start).Seconds(), e.who, e.what)
	}
	return b.String()
}

// Timeline returns the whole timeline of the run, one line per entry, as
// Report prints it.
func (r *Result) Timeline() []string {
	lines := r.lines()
	out := make([]string, len(lines))
	for i, e := range lines {
		out[i] = fmt.Sprintf("%9.3fs  %-6s %s", e.at.Sub(r.start).Seconds(), e.who, e.what)
	}
	return out
}
