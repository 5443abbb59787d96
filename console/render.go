package console

import (
	"bytes"
	"embed"
	"fmt"
	"hash/fnv"
	"html/template"
	"time"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/internal/records"
)

//go:embed templates/*.html
var templateFS embed.FS

// opButton is a button that asks for an operation, after a confirmation.
type opButton struct {
	Op      string // disable, enable, trigger, resign, drain or undrain
	Target  string // the election, job, group, lease or member
	Token   uint64 // for resign: the term to end
	What    string // the target in words: "job report"
	Label   string // the button's text
	Explain string // what the operation does, for the confirmation
}

// operations are the operations the console performs, with what each
// does, as the confirmation dialog tells it.
var operations = map[string]struct{ label, explain string }{
	"disable": {"Disable", "It hands off and runs nothing, on any node, until enabled."},
	"enable":  {"Enable", "Nodes contend for it again."},
	"trigger": {"Trigger", "Its holder runs it once, as soon as it can."},
	"resign":  {"Resign", "Its holder hands off gracefully and sits out one lease term; another member takes over with a higher token."},
	"drain":   {"Drain", "The member hands off everything it holds and contends for nothing until undrained."},
	"undrain": {"Undrain", "The member contends again."},
}

var funcs = template.FuncMap{
	"when":      when,
	"clock":     clock,
	"took":      took,
	"exit":      exit,
	"color":     color,
	"nav":       func() []navItem { return nav },
	"op":        newOpButton,
	"disableop": disableOp,
	"drainop":   drainOp,
	"short":     short,
	"stamp":     stamp,
	"describe":  describe,
	"what":      auditWhat,
	"args":      admin.FormatArgs,
}

// newOpButton is the button asking for op on target (token: the term a
// resign ends), what naming the target in words.
func newOpButton(op, target string, token uint64, what string) opButton {
	o := operations[op]
	return opButton{Op: op, Target: target, Token: token, What: what, Label: o.label, Explain: o.explain}
}

// disableOp is the button that disables target, or enables it again when
// it is disabled; note is the disable in force, if any: one that target
// wrote when it paused itself after failures makes the button "Resume".
func disableOp(note *opNote, disabled bool, target, what string) opButton {
	switch {
	case disabled && note != nil && note.Paused && note.Via == "":
		b := newOpButton("enable", target, 0, what)
		b.Label = "Resume"
		b.Explain = "It paused itself after failed runs in a row" + reasonOf(note.Reason) + ". Nodes contend for it again."
		return b
	case disabled:
		return newOpButton("enable", target, 0, what)
	}
	return newOpButton("disable", target, 0, what)
}

// reasonOf puts a reason in parentheses, or gives "" for none.
func reasonOf(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}

// drainOp is the button that drains a member, or undrains it when it is
// drained.
func drainOp(drained bool, member string) opButton {
	if drained {
		return newOpButton("undrain", member, 0, "member "+member)
	}
	return newOpButton("drain", member, 0, "member "+member)
}

// templates are the pages; "layout" is a whole page, "main" its part that
// the event stream sends.
var templates = template.Must(template.New("").Funcs(funcs).Funcs(timelineFuncs).Funcs(overviewFuncs).ParseFS(templateFS, "templates/*.html"))

// when renders a time as a <time> element that the page's script shows
// relative to now ("12s ago", "in 3s"); without the script it shows the
// time of day in UTC.
func when(t time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	t = t.UTC()
	return template.HTML(fmt.Sprintf(`<time datetime="%s" data-rel title="%s">%s</time>`,
		t.Format(time.RFC3339Nano), t.Format("2006-01-02 15:04:05.000 UTC"), t.Format("15:04:05")))
}

// clock renders a time as a <time> element showing the time of day in
// UTC, to the second.
func clock(t time.Time) template.HTML {
	t = t.UTC()
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time>`,
		t.Format(time.RFC3339Nano), t.Format("2006-01-02 15:04:05.000 UTC"), t.Format("15:04:05 UTC")))
}

// stamp renders a time as a <time> element showing the date and time of
// day in UTC, to the second, followed by the time relative to now that
// the page's script keeps up to date (see when): "2025-03-04 16:02:00 UTC
// (12m ago)".
func stamp(t time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	u := t.UTC()
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time> <span class="rel">(%s)</span>`,
		u.Format(time.RFC3339Nano), u.Format("2006-01-02 15:04:05.000 UTC"), u.Format("2006-01-02 15:04:05 UTC"), when(t)))
}

// describe says in words who asked for a disable or drain in force, since
// when and why, for a tooltip: "by alice since 2025-03-04 16:02:00 UTC:
// maintenance", with "with group billing, " first when the group's disable
// applies to a partition.
func describe(n *opNote) string {
	if n == nil {
		return ""
	}
	out := admin.DescribeOp(n.Op)
	if n.Via != "" {
		out = "with group " + n.Via + ", " + out
	}
	return out
}

// auditWhat names an audit entry's operation as the pages show it: the
// operation, and the term a resign is of.
func auditWhat(e admin.AuditEntry) string {
	if e.Token != 0 {
		return fmt.Sprintf("%s (token %d)", e.Op, e.Token)
	}
	return e.Op
}

// took renders how long a run took, or that it runs; "—" for an entry
// of skipped starts, which did not run.
func took(r admin.Run) string {
	switch {
	case r.Result == records.Skipped:
		return "—"
	case r.End.IsZero():
		return "…"
	}
	d := r.End.Sub(r.Start)
	switch {
	case d < time.Millisecond:
		return "<1ms"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}

// exit renders the exit status a run recorded, "exit 3", or "" when it
// recorded none.
func exit(code *int) string {
	if code == nil {
		return ""
	}
	return fmt.Sprintf("exit %d", *code)
}

// short shortens a long session id in the middle, keeping both ends:
// ids of one backend often share a prefix, or a suffix.
func short(id string) string {
	if len(id) <= 20 {
		return id
	}
	return id[:8] + "…" + id[len(id)-8:]
}

// colors is the number of member colours of the style sheet (--c0 to
// --c7, classes c0 to c7).
const colors = 8

// color returns the class of a member's colour: the same member has the
// same colour on every page and across updates.
func color(member string) string {
	if member == "" {
		return ""
	}
	h := fnv.New32a()
	h.Write([]byte(member))
	return fmt.Sprintf("c%d", h.Sum32()%colors)
}

// render executes the template name with p.
func render(name string, p *page) ([]byte, error) {
	var buf bytes.Buffer
	if err := templates.ExecuteTemplate(&buf, name, p); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
