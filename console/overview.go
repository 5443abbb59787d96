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
	"github.com/simba-go/simba/backend"
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
	// The jobs, as the simba command counts them (simba status, simba
	// jobs): a scheduled plain election is a job, and so is a group whose
	// partitions are scheduled, however many partitions it has. Of them:
	// the elections, the groups and their scheduled partitions, and the
	// jobs whose last run failed or was interrupted (a group's, on any of
	// its partitions).
	Jobs, JobElections, JobGroups, JobPartitions, JobsFailing int
	// The runs of the scheduled elections and partitions as their status
	// counts them (all their runs, not only the history kept).
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
	resultSucceeded = simba.ResultSucceeded.String()
	resultFailed    = simba.ResultFailed.String()
	resultCancelled = simba.ResultCancelled.String()
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
	o := &overview{}
	items := slices.Concat(
		o.countElections(q.Elections),
		o.countGroups(q.Groups, snap.Ops),
		o.countJobs(snap),
		o.countMembers(q.Members),
		disabledItems(snap),
		drainedItems(snap.Ops),
		problemItems(snap.Problems, p.View.Path()),
	)
	slices.SortStableFunc(items, func(a, b attention) int {
		return slices.Index(attentionOrder, a.Kind) - slices.Index(attentionOrder, b.Kind)
	})
	o.Attention = items
	p.Overview = o
	return nil
}

// countElections counts the plain elections, and returns the vacant ones
// that are not disabled.
func (o *overview) countElections(rows []electionRow) []attention {
	var items []attention
	for _, e := range rows {
		o.Elections++
		switch {
		case e.Disabled:
			o.ElectionsDisabled++
		case e.Held:
			o.ElectionsHeld++
		default:
			o.ElectionsVacant++
			what, href := "election "+e.Name, "/elections/"+e.Name
			if e.Scheduled {
				what, href = "job "+e.Name, "/jobs/"+e.Name
			}
			a := attention{Kind: "vacant", Target: e.Name, Href: href, Level: "bad", What: what, Reason: "no member holds it"}
			if !e.Status.Updated.IsZero() {
				a.Reason += "; its status was last written"
				a.At = e.Status.Updated
			}
			items = append(items, a)
		}
	}
	return items
}

// countGroups counts the groups' partitions, and returns the vacant
// partitions that are not disabled: one by one, or as one item for a
// group with more than maxVacantItems of them.
func (o *overview) countGroups(groups []groupView, ops admin.Ops) []attention {
	var items []attention
	for _, g := range groups {
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
		items = append(items, vacantPartitionItems(g, vacant)...)
	}
	return items
}

// vacantPartitionItems are the items of the vacant partitions of g.
func vacantPartitionItems(g groupView, vacant []cell) []attention {
	if len(vacant) > maxVacantItems {
		var nums []string
		for _, c := range vacant {
			nums = append(nums, "#"+strconv.Itoa(c.Index))
		}
		return []attention{{Kind: "vacant", Target: g.Name, Href: "/groups", Level: "bad", What: "group " + g.Name,
			Reason: fmt.Sprintf("%d of its %d partitions are vacant: no member holds them", len(vacant), len(g.Cells)),
			Detail: strings.Join(nums, ", ")}}
	}
	var items []attention
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
		items = append(items, a)
	}
	return items
}

// countJobs counts the jobs and their runs, and returns those whose last
// run failed or was interrupted. A plain election with a schedule is one
// job, and so is a group whose partitions have one, however many they
// are, as simba status counts them; runs and failures are of each
// election and partition.
func (o *overview) countJobs(snap admin.Snapshot) []attention {
	_, parts := splitElections(snap.Elections)
	groupOf := map[string]string{} // by partition
	for _, e := range parts {
		groupOf[e.Name] = partitionGroup(e)
	}
	var items []attention
	jobs, failing := map[string]bool{}, map[string]bool{} // "election NAME" or "group NAME"
	for _, e := range snap.Elections {
		if e.Status.Schedule == "" {
			continue
		}
		job := "election " + e.Name
		if g, ok := groupOf[e.Name]; ok {
			job = "group " + g
			o.JobPartitions++
			if !jobs[job] {
				o.JobGroups++
			}
		} else {
			o.JobElections++
		}
		jobs[job] = true
		row := jobRowOf(e, snap.Ops)
		o.Succeeded += row.Status.Succeeded
		o.Failed += row.Status.Failed
		if a, ok := failedRunItem(row); ok {
			failing[job] = true
			items = append(items, a)
		}
	}
	o.Jobs, o.JobsFailing = len(jobs), len(failing)
	return items
}

// failedRunItem is the item of a job whose last run failed or was
// interrupted; false for another.
func failedRunItem(row jobRow) (attention, bool) {
	r := row.Status.LastRun
	if r == nil || (r.Result != resultFailed && r.Result != records.Interrupted) {
		return attention{}, false
	}
	a := attention{Kind: "failed", Target: row.Name, Href: "/jobs/" + row.Name, Level: "bad", What: "job " + row.Name, At: r.Start}
	if row.Status.Group != "" {
		a.What = "partition job " + row.Name
	}
	if r.Result == records.Interrupted {
		a.Reason = fmt.Sprintf("its last run, #%d, was interrupted: its holder's term ended while it ran; it started", r.Seq)
		return a, true
	}
	a.Reason = fmt.Sprintf("its last run, #%d, failed; it started", r.Seq)
	a.Detail = r.Error
	if c := exit(r.ExitCode); c != "" {
		a.Detail = strings.TrimPrefix(a.Detail+" ("+c+")", " ")
	}
	return a, true
}

// countMembers counts the members, and returns those whose headroom is
// stale or close to their deadline.
func (o *overview) countMembers(rows []memberRow) []attention {
	var items []attention
	for _, m := range rows {
		o.Members++
		if m.Live {
			o.MembersLive++
		}
		if m.Headroom == nil {
			continue
		}
		o.MembersReporting++
		if a, ok := headroomItem(m.ID, m.Headroom); ok {
			items = append(items, a)
		}
	}
	return items
}

// headroomItem is the item of member id with headroom h, if h is stale
// or close to the deadline.
func headroomItem(id string, h *headroom) (attention, bool) {
	switch h.Level {
	case "stale":
		return attention{Kind: "stale", Target: id, Href: "/members", Level: "warn", What: "member " + id,
			Reason: "its client has not published its renewals for longer than it would while alive; it may be gone. Last written",
			At:     h.Updated}, true
	case "warn", "bad":
		share := "a third"
		if h.Level == "bad" {
			share = "a tenth"
		}
		return attention{Kind: "deadline", Target: id, Href: "/members", Level: h.Level, What: "member " + id,
			Reason: fmt.Sprintf("close to its deadline: a recent renewal came with %s of its %s TTL left, under %s of it",
				fmtMs(h.MinMs), fmtMs(h.TTLms), share)}, true
	}
	return attention{}, false
}

// disabledItems are the disables in force, of anything: elections, jobs,
// partitions, groups, names not seen yet.
func disabledItems(snap admin.Snapshot) []attention {
	ops := snap.Ops
	groups := map[string]bool{}
	for _, g := range snap.Groups {
		groups[g.Name] = true
	}
	byName := map[string]admin.Election{}
	for _, e := range snap.Elections {
		byName[e.Name] = e
	}
	var items []attention
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
			a.What, a.Href = "election "+name, "/elections/"+name
		}
		if op, ok := ops.Disables[name]; ok {
			a.Detail = describe(&opNote{Op: op})
		}
		items = append(items, a)
	}
	return items
}

// drainedItems are the drains in force.
func drainedItems(ops admin.Ops) []attention {
	var items []attention
	for _, id := range slices.Sorted(maps.Keys(ops.Drained)) {
		if !ops.Drained[id] {
			continue
		}
		a := attention{Kind: "drained", Target: id, Href: "/members", Level: "info", What: "member " + id,
			Reason: "drained: it holds nothing and contends for nothing until undrained"}
		if op, ok := ops.Drains[id]; ok {
			a.Detail = describe(&opNote{Op: op})
		}
		items = append(items, a)
	}
	return items
}

// problemItems are the records skipped: maxProblemItems one by one, then
// one item for the rest, whose link is here (the page's notice lists
// them).
func problemItems(problems []admin.Problem, here string) []attention {
	var items []attention
	for i, pr := range problems {
		if i == maxProblemItems {
			items = append(items, attention{Kind: "problem", Target: "", Href: here, Level: "warn",
				What:   fmt.Sprintf("%d more records", len(problems)-maxProblemItems),
				Reason: "could not be used and were skipped; the notice above lists them"})
			break
		}
		items = append(items, attention{Kind: "problem", Target: pr.Key, Href: problemHref(pr.Key), Level: "warn", What: "record " + pr.Key,
			Reason: "could not be used and is skipped", Detail: pr.Reason})
	}
	return items
}

// problemHref is the page that shows what a skipped record is of.
func problemHref(key string) string {
	switch {
	case strings.HasPrefix(key, records.StatusPrefix), strings.HasPrefix(key, records.TermsPrefix):
		_, lease, _ := strings.Cut(key, "/")
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
func validLease(lease string) bool { return backend.CheckName(lease) == nil }

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
