package console

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
)

// view names what a page or an event stream shows: one of the pages, or
// the history of one lease.
type view struct {
	// Kind is "overview", "elections", "groups", "jobs", "members",
	// "audit", "job", "election" or "timeline".
	Kind  string
	Lease string // for "job" and "election": the election or partition
	// Name is, for "audit", the name whose operations it shows ("": all);
	// for "timeline", the group it shows ("": the plain elections).
	Name string
	// Range is, for "timeline", the time range it shows ("15m", "1h",
	// "24h" or "all").
	Range string
	// Part is, for "timeline" of a group, the partition it zooms to, or
	// -1 for all of them.
	Part int
}

// navItem is one entry of the navigation bar.
type navItem struct{ Kind, Path, Label string }

var nav = []navItem{
	{"overview", "/", "Overview"},
	{"timeline", "/timeline", "Timeline"},
	{"elections", "/elections", "Elections"},
	{"groups", "/groups", "Groups"},
	{"jobs", "/jobs", "Jobs"},
	{"members", "/members", "Members"},
	{"audit", "/audit", "Audit"},
}

// Path is the page's path, with the audit page's filter, which also names
// its event stream.
func (v view) Path() string {
	switch {
	case v.Kind == "overview":
		return "/"
	case v.Kind == "timeline":
		return v.timelinePath()
	case v.Kind == "job":
		return "/jobs/" + v.Lease
	case v.Kind == "election":
		return "/elections/" + v.Lease
	case v.Kind == "audit" && v.Name != "":
		return "/audit?" + url.Values{"name": {v.Name}}.Encode()
	}
	return "/" + v.Kind
}

// parseView returns the view of a page's path and query ("/audit?name=x");
// the query counts for the audit page only.
func parseView(pathQuery string) (view, bool) {
	u, err := url.ParseRequestURI(pathQuery)
	if err != nil {
		return view{}, false
	}
	for _, page := range []struct{ prefix, kind string }{{"/jobs/", "job"}, {"/elections/", "election"}} {
		if lease, ok := strings.CutPrefix(u.Path, page.prefix); ok {
			if backend.CheckName(lease) != nil {
				return view{}, false
			}
			return view{Kind: page.kind, Lease: lease}, true
		}
	}
	if u.Path == "/timeline" {
		return parseTimelineView(u.Query())
	}
	for _, n := range nav {
		if u.Path != n.Path {
			continue
		}
		v := view{Kind: n.Kind}
		if n.Kind == "audit" {
			v.Name = strings.TrimSpace(u.Query().Get("name"))
			if !validFilter(v.Name) {
				return view{}, false
			}
		}
		return v, true
	}
	return view{}, false
}

// validFilter reports whether name may filter the audit page: "", or at
// most backend.MaxNameLen bytes of UTF-8 without control characters (a name
// no operation has cannot match, but is shown as asked).
func validFilter(name string) bool {
	return len(name) <= backend.MaxNameLen && utf8.ValidString(name) &&
		!strings.ContainsFunc(name, unicode.IsControl)
}

// loader reads the backend through admin for one or more renderings: one
// admin.Snapshot however many pages and parts of pages need it.
type loader struct {
	ctx context.Context
	a   *admin.Admin
	// now is the time the pictures are drawn at (their right edge): one
	// time for every page of a rendering.
	now time.Time

	snap    admin.Snapshot
	snapErr error
	snapOK  bool

	audits map[admin.AuditFilter]auditRead // by filter, once each
}

// auditRead is one read of the audit trail.
type auditRead struct {
	entries  []admin.AuditEntry
	problems []admin.Problem
	err      error
}

// audit reads the entries of the audit trail that filter selects, once
// per filter, and the problems of the entries that could not be used.
func (l *loader) audit(filter admin.AuditFilter) ([]admin.AuditEntry, []admin.Problem, error) {
	r, ok := l.audits[filter]
	if !ok {
		r.entries, r.problems, r.err = l.a.Audit(l.ctx, filter)
		if l.audits == nil {
			l.audits = map[admin.AuditFilter]auditRead{}
		}
		l.audits[filter] = r
	}
	return r.entries, r.problems, r.err
}

// snapshot reads the snapshot, once.
func (l *loader) snapshot() (admin.Snapshot, error) {
	if !l.snapOK {
		l.snap, l.snapErr = l.a.Snapshot(l.ctx)
		l.snapOK = true
	}
	return l.snap, l.snapErr
}

// problems returns the records the snapshot skipped, if it was read.
func (l *loader) problems() []admin.Problem {
	if !l.snapOK || l.snapErr != nil {
		return nil
	}
	return l.snap.Problems
}

// page is what a template renders: the whole page, or its main part for
// the event stream.
type page struct {
	View    view
	Title   string
	Operate bool   // operations are allowed: show their buttons
	Backend string // the backend's name (WithBackendName), or ""
	Err     string // the backend could not be read: why
	// DownSince is when the backend became unreachable, for a page with
	// Err.
	DownSince time.Time
	NotFound  bool
	// Problems are the records skipped because they could not be used,
	// sorted by key: the page shows what it could, and lists them.
	Problems []admin.Problem

	Elections []electionRow
	Groups    []groupView
	Jobs      []jobRow    // scheduled elections
	GroupJobs []groupJobs // scheduled groups, by partition
	Members   []memberRow
	Job       *jobRow       // for "job"
	Election  *electionPage // for "election"
	// Audit is, for "audit", the newest entries of the audit trail (of
	// View.Name if given); for "job" and "election", the newest of its
	// lease.
	Audit []admin.AuditEntry
	// AuditMore reports that the trail holds older entries than Audit.
	AuditMore bool
	Overview  *overview // for "overview"
	Timeline  *timeline // for "timeline"

	s *Server
}

// failed makes p the error page of a read that failed with err, the
// backend being in state st.
func (p *page) failed(err error, st health) {
	p.Err = p.s.describe(err)
	if !st.OK {
		p.DownSince = st.Since
	}
	p.Elections, p.Groups, p.Jobs, p.GroupJobs, p.Members, p.Job, p.Election = nil, nil, nil, nil, nil, nil, nil
	p.Audit, p.AuditMore = nil, false
	p.Overview, p.Timeline = nil, nil
}

// opNote is a disable or a drain in force, as the pages show it: who
// asked, since when and why.
type opNote struct {
	admin.Op
	// Via is the group whose disable applies to a partition, when the
	// partition is not disabled itself.
	Via string
}

// disableNote returns the disable in force of name, or else of its
// group, or nil.
func disableNote(ops admin.Ops, name, group string) *opNote {
	if op, ok := ops.Disables[name]; ok {
		return &opNote{Op: op}
	}
	if op, ok := ops.Disables[group]; ok && group != "" {
		return &opNote{Op: op, Via: group}
	}
	return nil
}

// drainNote returns the drain in force of member, or nil.
func drainNote(ops admin.Ops, member string) *opNote {
	if op, ok := ops.Drains[member]; ok {
		return &opNote{Op: op}
	}
	return nil
}

// electionRow is one plain election (not a partition).
type electionRow struct {
	Name      string
	Held      bool
	Disabled  bool
	Disable   *opNote // the disable in force, when Disabled
	Status    admin.Status
	Holder    *admin.Holder // nil when nobody holds it
	Scheduled bool
	Trigger   bool // a trigger is pending
	Resign    bool // a resignation is pending
}

// groupView is one group with its grid.
type groupView struct {
	admin.Group
	Note              *opNote // the group's disable, when Disabled
	Members           []groupMember
	Cells             []cell
	Held, Vacant, Off int // partitions held by their owner, vacant, in hand-off
	Scheduled         bool
}

// groupMember is one member of a group with what it owns and holds.
type groupMember struct {
	admin.Member
	Note        *opNote // its drain, when Drained
	Owns, Holds int
}

// cell is one partition of the grid.
type cell struct {
	admin.Partition
	Lease     string
	State     string // "held", "handoff", "vacant" or "unknown" (held, holder not known)
	Scheduled bool
	Trigger   bool // a trigger is pending
}

// jobRow is one scheduled election or partition.
type jobRow struct {
	Name      string
	Held      bool
	Disabled  bool
	Disable   *opNote // the disable in force, when Disabled
	Status    admin.Status
	Holder    *admin.Holder
	Trigger   bool
	History   []admin.Run // the last runs, newest first
	HistoryOf int         // how many runs the history keeps in all
	// Chart is the runs of the history drawn over time: on the job's page
	// the chart, on the jobs page a sparkline; nil where not read.
	Chart *runChart
}

// groupJobs is a scheduled group's partitions.
type groupJobs struct {
	Group    string
	Schedule string
	Disabled bool
	Disable  *opNote // the group's disable, when Disabled
	Rows     []jobRow
}

// memberRow is one member: of a group, holder of an election, or drained.
type memberRow struct {
	ID        string
	Sessions  []string
	Groups    []memberGroup
	Elections []string // plain elections it holds
	Drained   bool
	Note      *opNote // the drain in force, when Drained
	// Live reports that it has a live membership, holds a lease, or
	// publishes its renewals (a health record not stale).
	Live bool
	// State is its one state: "active" (live), "drained" (live, and
	// drained) or "gone" (not live: its session ended, or its client
	// stopped renewing it without closing, as a SIGKILL leaves it; a
	// drain still in force is shown beside it).
	State string
	// Headroom is its recent renewals, from its health record; nil when
	// it publishes none.
	Headroom *headroom
}

// memberGroup is a member's share of one group.
type memberGroup struct {
	Name        string
	Owns, Holds int
}

// historyInline is the number of runs the jobs page shows per job.
const historyInline = 5

// auditShown is the number of entries the audit page shows, the newest;
// auditInline the number a job's page shows of its own.
const (
	auditShown  = 200
	auditInline = 10
)

// maxShownProblems bounds the skipped records a page lists.
const maxShownProblems = 20

// ShownProblems returns the problems the page lists.
func (p *page) ShownProblems() []admin.Problem {
	return p.Problems[:min(len(p.Problems), maxShownProblems)]
}

// HiddenProblems counts the problems the page does not list.
func (p *page) HiddenProblems() int { return len(p.Problems) - len(p.ShownProblems()) }

// addProblems adds problems to the page's, once each, in order.
func (p *page) addProblems(problems ...admin.Problem) {
	for _, q := range problems {
		i, found := slices.BinarySearchFunc(p.Problems, q, func(x, y admin.Problem) int {
			if c := strings.Compare(x.Key, y.Key); c != 0 {
				return c
			}
			return strings.Compare(x.Reason, y.Reason)
		})
		if !found {
			p.Problems = slices.Insert(p.Problems, i, q)
		}
	}
}

// build fills p for its view from l. It returns the error of the first
// read that failed; records that could not be used are not errors, but
// Problems.
func (p *page) build(l *loader) error {
	err := p.buildView(l)
	p.addProblems(l.problems()...)
	return err
}

func (p *page) buildView(l *loader) error {
	switch p.View.Kind {
	case "overview":
		return p.buildOverview(l)
	case "timeline":
		return p.buildTimeline(l)
	case "elections":
		return p.buildElections(l)
	case "groups":
		return p.buildGroups(l)
	case "jobs":
		return p.buildJobs(l)
	case "members":
		return p.buildMembers(l)
	case "audit":
		return p.buildAudit(l, p.View.Name, auditShown)
	case "job":
		return p.buildJob(l)
	case "election":
		return p.buildElection(l)
	}
	return fmt.Errorf("unknown view %q", p.View.Kind)
}

// partitionName matches "{group}.{partition}".
var partitionName = regexp.MustCompile(`^(.+)\.([0-9]+)$`)

// splitElections parses elections into plain ones and partitions: a lease
// with no status yet is a partition when its name is "{group}.{n}" of a
// group known from the others' statuses.
func splitElections(es []admin.Election) (plain, partitions []admin.Election) {
	groups := map[string]bool{}
	for _, e := range es {
		if e.Status.Group != "" {
			groups[e.Status.Group] = true
		}
	}
	for _, e := range es {
		isPart := e.Status.Group != ""
		if e.Status.Lease == "" {
			if m := partitionName.FindStringSubmatch(e.Name); m != nil && groups[m[1]] {
				isPart = true
			}
		}
		if isPart {
			partitions = append(partitions, e)
		} else {
			plain = append(plain, e)
		}
	}
	return plain, partitions
}

// holder returns the holder of e now, or nil.
func holder(e admin.Election) *admin.Holder {
	if !e.Held {
		return nil
	}
	return e.Status.Holder
}

func (p *page) buildElections(l *loader) error {
	snap, err := l.snapshot()
	if err != nil {
		return err
	}
	ops := snap.Ops
	plain, _ := splitElections(snap.Elections)
	for _, e := range plain {
		p.Elections = append(p.Elections, electionRowOf(e, ops))
	}
	return nil
}

// electionRowOf makes the row of an election or partition.
func electionRowOf(e admin.Election, ops admin.Ops) electionRow {
	_, trig := ops.Triggers[e.Name]
	_, res := ops.Resigns[e.Name]
	return electionRow{
		Name: e.Name, Held: e.Held, Disabled: e.Disabled, Disable: disableNote(ops, e.Name, e.Status.Group),
		Status: e.Status, Holder: holder(e),
		Scheduled: e.Status.Schedule != "", Trigger: trig, Resign: res,
	}
}

func (p *page) buildGroups(l *loader) error {
	snap, err := l.snapshot()
	if err != nil {
		return err
	}
	ops := snap.Ops
	scheduled := map[string]bool{}
	for _, e := range snap.Elections {
		if e.Status.Schedule != "" {
			scheduled[e.Name] = true
		}
	}
	for _, g := range snap.Groups {
		gv := groupView{Group: g, Note: disableNote(ops, g.Name, "")}
		owns, holds := shares(g)
		for _, part := range g.Partitions {
			c := cell{Partition: part, Lease: g.Name + "." + strconv.Itoa(part.Index)}
			switch {
			case !part.Held:
				c.State = "vacant"
				gv.Vacant++
			case part.Holder == "":
				c.State = "unknown"
			case part.InHandOff():
				c.State = "handoff"
				gv.Off++
			default:
				c.State = "held"
				gv.Held++
			}
			c.Scheduled = scheduled[c.Lease]
			_, c.Trigger = ops.Triggers[c.Lease]
			gv.Scheduled = gv.Scheduled || c.Scheduled
			gv.Cells = append(gv.Cells, c)
		}
		for _, m := range g.Members {
			gv.Members = append(gv.Members, groupMember{Member: m, Note: drainNote(ops, m.ID), Owns: owns[m.ID], Holds: holds[m.ID]})
		}
		slices.SortStableFunc(gv.Members, func(a, b groupMember) int { return strings.Compare(a.ID, b.ID) })
		p.Groups = append(p.Groups, gv)
	}
	return nil
}

// shares counts, by member, the partitions of g it owns and those it
// holds (a partition held by a holder not known counts for nobody).
func shares(g admin.Group) (owns, holds map[string]int) {
	owns, holds = map[string]int{}, map[string]int{}
	for _, part := range g.Partitions {
		owns[part.Owner]++
		if part.Held && part.Holder != "" {
			holds[part.Holder]++
		}
	}
	return owns, holds
}

// jobRowOf makes the row of a scheduled election or partition.
func jobRowOf(e admin.Election, ops admin.Ops) jobRow {
	_, trig := ops.Triggers[e.Name]
	return jobRow{Name: e.Name, Held: e.Held, Disabled: e.Disabled, Disable: disableNote(ops, e.Name, e.Status.Group),
		Status: e.Status, Holder: holder(e), Trigger: trig}
}

// newestFirst returns at most n runs of h, newest first.
func newestFirst(h []admin.Run, n int) []admin.Run {
	out := slices.Clone(h)
	slices.Reverse(out)
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

func (p *page) buildJobs(l *loader) error {
	snap, err := l.snapshot()
	if err != nil {
		return err
	}
	ops := snap.Ops
	plain, parts := splitElections(snap.Elections)
	for _, e := range plain {
		if e.Status.Schedule == "" {
			continue
		}
		row := jobRowOf(e, ops)
		h, problems, err := l.a.HistoryWithProblems(l.ctx, e.Name)
		if err != nil && !errors.Is(err, admin.ErrNotFound) {
			return err
		}
		p.addProblems(problems...)
		row.History, row.HistoryOf = newestFirst(h, historyInline), len(h)
		row.Chart = newRunChart(h, l.now, true)
		p.Jobs = append(p.Jobs, row)
	}
	byGroup := map[string]*groupJobs{}
	var order []string
	for _, e := range parts {
		if e.Status.Schedule == "" {
			continue
		}
		g := byGroup[e.Status.Group]
		if g == nil {
			g = &groupJobs{Group: e.Status.Group, Schedule: e.Status.Schedule, Disabled: ops.Disabled[e.Status.Group],
				Disable: disableNote(ops, e.Status.Group, "")}
			byGroup[e.Status.Group] = g
			order = append(order, e.Status.Group)
		}
		g.Rows = append(g.Rows, jobRowOf(e, ops))
	}
	slices.Sort(order)
	for _, name := range order {
		g := byGroup[name]
		slices.SortFunc(g.Rows, func(a, b jobRow) int { return a.Status.Partition - b.Status.Partition })
		p.GroupJobs = append(p.GroupJobs, *g)
	}
	return nil
}

func (p *page) buildMembers(l *loader) error {
	snap, err := l.snapshot()
	if err != nil {
		return err
	}
	ops := snap.Ops
	rows := map[string]*memberRow{}
	row := func(id string) *memberRow {
		r := rows[id]
		if r == nil {
			r = &memberRow{ID: id, Drained: ops.Drained[id], Note: drainNote(ops, id)}
			rows[id] = r
		}
		return r
	}
	addSession := func(r *memberRow, s string) {
		if s != "" && !slices.Contains(r.Sessions, s) {
			r.Sessions = append(r.Sessions, s)
		}
	}
	for _, g := range snap.Groups {
		owns, holds := shares(g)
		seen := map[string]bool{}
		for _, m := range g.Members {
			r := row(m.ID)
			r.Live = true
			addSession(r, m.Session)
			if !seen[m.ID] {
				seen[m.ID] = true
				r.Groups = append(r.Groups, memberGroup{Name: g.Name, Owns: owns[m.ID], Holds: holds[m.ID]})
			}
		}
	}
	plain, _ := splitElections(snap.Elections)
	for _, e := range plain {
		if h := holder(e); h != nil && h.Member != "" {
			r := row(h.Member)
			r.Live = true
			addSession(r, h.Session)
			r.Elections = append(r.Elections, e.Name)
		}
	}
	for id := range ops.Drained {
		row(id)
	}
	for _, h := range snap.Health {
		if h.Member != "" {
			r := row(h.Member)
			r.Headroom = newHeadroom(h, l.now)
			r.Live = r.Live || r.Headroom.Level != "stale" // its client renews a session
		}
	}
	for _, id := range slices.Sorted(maps.Keys(rows)) {
		r := rows[id]
		slices.Sort(r.Sessions)
		switch {
		case !r.Live:
			r.State = "gone"
		case r.Drained:
			r.State = "drained"
		default:
			r.State = "active"
		}
		p.Members = append(p.Members, *r)
	}
	return nil
}

func (p *page) buildJob(l *loader) error {
	st, err := l.a.Status(l.ctx, p.View.Lease)
	var re *admin.RecordError
	switch {
	case errors.Is(err, admin.ErrNotFound):
		p.NotFound = true
		return nil
	case errors.As(err, &re): // shown without its status, and listed
		p.addProblems(re.Problem)
		st = admin.Status{Lease: p.View.Lease, Partition: -1}
	case err != nil:
		return err
	}
	snap, err := l.snapshot()
	if err != nil {
		return err
	}
	es, ops := snap.Elections, snap.Ops
	e := admin.Election{Name: p.View.Lease, Status: st, Disabled: ops.Disabled[st.Lease] || (st.Group != "" && ops.Disabled[st.Group])}
	if i := slices.IndexFunc(es, func(x admin.Election) bool { return x.Name == p.View.Lease }); i >= 0 {
		e = es[i]
	}
	h, problems, err := l.a.HistoryWithProblems(l.ctx, p.View.Lease)
	if err != nil && !errors.Is(err, admin.ErrNotFound) {
		return err
	}
	p.addProblems(problems...)
	row := jobRowOf(e, ops)
	row.History, row.HistoryOf = newestFirst(h, 0), len(h)
	row.Chart = newRunChart(h, l.now, false)
	p.Job = &row
	return p.buildAudit(l, p.View.Lease, auditInline)
}

// buildAudit fills the page's audit trail: the newest n entries of the
// operations on name, or of all if name is "".
func (p *page) buildAudit(l *loader, name string, n int) error {
	entries, problems, err := l.audit(admin.AuditFilter{Name: name, Limit: n + 1})
	if err != nil {
		return err
	}
	p.addProblems(problems...)
	p.Audit, p.AuditMore = entries[:min(len(entries), n)], len(entries) > n
	return nil
}
