package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/internal/records"
)

// newTable returns a tabwriter for aligned columns, two spaces apart.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// row writes one tab-separated row.
func row(w io.Writer, cells ...string) {
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// What -o json and -o yaml print: the same structs (the views of
// views.go, opResult, versionInfo), with the same field names; YAML is
// the JSON document re-encoded, so that the two never differ but in
// syntax. Times are RFC 3339 strings with their offset from UTC, as the
// nodes recorded them; durations are seconds, as a number (fields named
// "...Seconds").

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeYAML prints v as YAML: its JSON encoding, re-encoded as YAML in
// block style with the keys in the same order.
func writeYAML(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("re-encoding as YAML: %w", err)
	}
	blockStyle(&doc)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	return enc.Close()
}

// blockStyle clears the flow and quoting styles that parsing JSON gives
// the nodes: the encoder then quotes only the strings that need it.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		if len(n.Content) == 0 {
			n.Style = yaml.FlowStyle // [] and {} rather than nothing
		}
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// show prints v in the invocation's output format: as JSON or YAML, or as
// the table that table draws for people (-o table and -o wide).
func (inv *invocation) show(v any, table func(w io.Writer, p printer)) error {
	switch inv.g.output {
	case outJSON:
		return writeJSON(inv.stdout, v)
	case outYAML:
		return writeYAML(inv.stdout, v)
	}
	table(inv.stdout, inv.printer())
	return nil
}

// printer is how tables print: in which time zone, and with the wide
// columns or not.
type printer struct {
	loc  *time.Location
	wide bool
}

func (inv *invocation) printer() printer {
	p := printer{loc: time.Local, wide: inv.g.output == outWide}
	if inv.g.utc {
		p.loc = time.UTC
	}
	return p
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

// stamp formats an instant to the millisecond, with its date and time
// zone: "2026-03-01 16:02:03.120 UTC".
func (p printer) stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.In(p.loc).Format("2006-01-02 15:04:05.000 MST")
}

// clock formats an instant as a time of day to the millisecond, with its
// time zone ("16:02:03.120 UTC"); with its date too when it is not today
// or when the table is wide.
func (p printer) clock(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	t = t.In(p.loc)
	if y, m, d := now.In(p.loc).Date(); !p.wide && t.Year() == y && t.Month() == m && t.Day() == d {
		return t.Format("15:04:05.000 MST")
	}
	return p.stamp(t)
}

// seconds is a duration in seconds, as the JSON output gives durations;
// nil for an instant that is not known.
func seconds(from, to time.Time) *float64 {
	if from.IsZero() || to.IsZero() {
		return nil
	}
	s := to.Sub(from).Seconds()
	return &s
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

// runSummary describes a run in a few words: "succeeded 3s ago (trigger)",
// "failed (exit 3) 1m ago", "skipped 2 starts (overlap) 5s ago".
func runSummary(r *admin.Run, now time.Time) string {
	if r == nil {
		return "-"
	}
	var s string
	switch {
	case r.Result == records.Skipped:
		s = fmt.Sprintf("%s %s", runResult(r), ago(cmpOr(r.End, r.Start), now))
	case r.End.IsZero():
		s = fmt.Sprintf("%s for %s", r.Result, dur(now.Sub(r.Start)))
	default:
		s = fmt.Sprintf("%s %s", runResult(r), ago(r.End, now))
	}
	if r.Source != "" && r.Source != "normal" {
		s += " (" + r.Source + ")"
	}
	return s
}

// runResult is a run's result with the exit status of the command it ran,
// when it recorded one, and its attempt when it was a retry: "failed
// (exit 3)", "succeeded (exit 0)", "succeeded (attempt 2)". An entry of
// skipped starts says how many and why: "skipped 3 starts (overlap)".
func runResult(r *admin.Run) string {
	if r.Result == records.Skipped {
		n := max(r.Skipped, 1)
		s := fmt.Sprintf("skipped %d start%s", n, plural(n))
		if r.Error != "" {
			s += " (" + oneLine(r.Error) + ")"
		}
		return s
	}
	var notes []string
	if r.ExitCode != nil {
		notes = append(notes, fmt.Sprintf("exit %d", *r.ExitCode))
	}
	if r.Attempt > 1 {
		notes = append(notes, fmt.Sprintf("attempt %d", r.Attempt))
	}
	if len(notes) == 0 {
		return r.Result
	}
	return r.Result + " (" + strings.Join(notes, ", ") + ")"
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

// reasonSuffix appends an operator's reason to a description: ": why".
func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + oneLine(reason)
}

// text is an operator's free text (a reason, what an operation changed)
// in a table: on one line, and cut short unless the table is wide.
func (p printer) text(s string) string {
	if p.wide {
		return strings.Join(strings.Fields(s), " ")
	}
	return oneLine(s)
}

// inForce says who asked for a disable or drain in force, since when and
// why: "by alice@h1, since 16:02:03.120 UTC, 2h ago: maintenance"; for a
// job that paused itself, "paused after failures, by node-1, since ...".
func (p printer) inForce(op *opInForce, now time.Time) string {
	by := op.By
	if by == "" {
		by = "someone unnamed"
	}
	s := "by " + by
	if op.Paused {
		s = "paused after failures, " + s
	}
	if !op.Since.IsZero() {
		s += ", since " + p.clock(op.Since, now) + ", " + ago(op.Since, now)
	}
	if op.Reason != "" {
		s += ": " + p.text(op.Reason)
	}
	return s
}

// disabledAs describes the disable in force of self, an election,
// partition, job or group, as p.inForce does, saying so when it is its
// group's; "-" when there is none.
func (p printer) disabledAs(self string, op *opInForce, now time.Time) string {
	switch {
	case op == nil:
		return "-"
	case op.Name != self:
		return "with its group " + op.Name + ", " + p.inForce(op, now)
	}
	return p.inForce(op, now)
}

// namedInForce describes an operation in force with what it names:
// "report (by alice@h1, since 16:02:03.120 UTC, 2h ago: maintenance)".
func (p printer) namedInForce(op opInForce, now time.Time) string {
	return op.Name + " (" + p.inForce(&op, now) + ")"
}

// stateText is a state as a table shows it: a disable that a job wrote
// when it paused itself after failures shows as "paused" (the JSON keeps
// "disabled", with the disable's paused).
func stateText(state string, d *opInForce) string {
	if state == "disabled" && d != nil && d.Paused {
		return "paused"
	}
	return state
}

// argsText is a run's or trigger's arguments in a table: "-" for none, on
// one line and cut short unless the table is wide.
func (p printer) argsText(args map[string]string) string {
	if len(args) == 0 {
		return "-"
	}
	s := admin.FormatArgs(args) // on one line: values with spaces are quoted
	if !p.wide && len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// cmpOr returns t, or else (when t is zero) or.
func cmpOr(t, or time.Time) time.Time {
	if t.IsZero() {
		return or
	}
	return t
}
