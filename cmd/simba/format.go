package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/simba-go/simba/admin"
)

// newTable returns a tabwriter for aligned columns, two spaces apart.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// row writes one tab-separated row.
func row(w io.Writer, cells ...string) {
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// dur formats a duration for people: milliseconds below a second, tenths
// below ten seconds, then whole seconds, then whole minutes.
func dur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
}

// ago formats a past instant relative to now ("3.2s ago").
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if d := now.Sub(t); d >= 0 {
		return dur(d) + " ago"
	}
	return "in " + dur(t.Sub(now))
}

// until formats a planned instant relative to now ("in 1.5s", "2s late").
func until(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if d := t.Sub(now); d >= 0 {
		return "in " + dur(d)
	}
	return dur(now.Sub(t)) + " late"
}

// stamp formats an instant in local time, to the millisecond.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000")
}

// clock formats an instant in local time of day, to the millisecond.
func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("15:04:05.000")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func tokenString(t uint64) string {
	if t == 0 {
		return "-"
	}
	return fmt.Sprint(t)
}

// runSummary describes a run in a few words: "succeeded 3s ago (trigger)".
func runSummary(r *admin.Run, now time.Time) string {
	if r == nil {
		return "-"
	}
	var s string
	if r.End.IsZero() {
		s = fmt.Sprintf("%s for %s", r.Result, dur(now.Sub(r.Start)))
	} else {
		s = fmt.Sprintf("%s %s", r.Result, ago(r.End, now))
	}
	if r.Source != "" && r.Source != "normal" {
		s += " (" + r.Source + ")"
	}
	return s
}

// intList formats partition numbers: "0 2 5", or "-" for none.
func intList(xs []int) string {
	if len(xs) == 0 {
		return "-"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, " ")
}

// listOr joins names, or returns none.
func listOr(xs []string, none string) string {
	if len(xs) == 0 {
		return none
	}
	return strings.Join(xs, ", ")
}
