package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/internal/records"
)

// The views below are what -o json and -o yaml print: field names are part
// of the command's interface for scripts. Times are RFC 3339 with their
// offset from UTC; durations are in seconds, as numbers, in fields whose
// names end in "Seconds".

// leaseView is one election or partition.
type leaseView struct {
	Name      string `json:"name"`
	Group     string `json:"group,omitempty"`
	Partition *int   `json:"partition,omitempty"`
	// State is "held", "vacant" or "disabled".
	State    string `json:"state"`
	Held     bool   `json:"held"`
	Disabled bool   `json:"disabled"`
	// Disable is the disable in force, of the lease itself or else of its
	// group (its name says which): who asked, since when, why.
	Disable *opInForce `json:"disable,omitempty"`
	// Holder is the current holder, null when the lease is not held (or
	// its new holder has not written its status yet).
	Holder      *admin.Holder `json:"holder"`
	Schedule    string        `json:"schedule,omitempty"`
	NextPlanned *time.Time    `json:"nextPlanned,omitempty"`
	LastRun     *runInfo      `json:"lastRun,omitempty"`
	Succeeded   uint64        `json:"succeeded"`
	Failed      uint64        `json:"failed"`
	// FailStreak is the number of runs in a row that failed, up to the
	// last one; SkippedRuns counts the planned starts skipped (the
	// history's "skipped" entries say when and why).
	FailStreak  int    `json:"failStreak,omitempty"`
	SkippedRuns uint64 `json:"skippedRuns,omitempty"`
	// Updated is when a holder last wrote the status.
	Updated *time.Time `json:"updated,omitempty"`
	// TriggerPending and ResignPending are requests not carried out yet.
	TriggerPending *admin.Op `json:"triggerPending,omitempty"`
	ResignPending  *admin.Op `json:"resignPending,omitempty"`
}

func (s *snapshot) leaseView(e admin.Election) leaseView {
	st := e.Status
	v := leaseView{
		Name: e.Name, Group: st.Group, Held: e.Held, Disabled: e.Disabled,
		Holder: holder(e), Schedule: st.Schedule, LastRun: lastRunOf(st.LastRun),
		Succeeded: st.Succeeded, Failed: st.Failed, Disable: s.disableOf(e.Name, st.Group),
		FailStreak: st.FailStreak, SkippedRuns: st.SkippedRuns,
	}
	if st.Group != "" {
		v.Partition = &st.Partition
	}
	switch {
	case e.Disabled:
		v.State = "disabled"
	case e.Held:
		v.State = "held"
	default:
		v.State = "vacant"
	}
	if next := nextPlanned(st); !next.IsZero() && e.Held {
		v.NextPlanned = &next
	}
	if !st.Updated.IsZero() {
		v.Updated = &st.Updated
	}
	if op, ok := s.ops.Triggers[e.Name]; ok {
		v.TriggerPending = &op
	}
	if op, ok := s.ops.Resigns[e.Name]; ok {
		v.ResignPending = &op
	}
	return v
}

// opInForce is a disable or drain in force: what it names (an election,
// job, group or partition; a member), who asked, since when and why.
type opInForce struct {
	Name   string    `json:"name"`
	By     string    `json:"by"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason,omitempty"`
	// Paused, for a disable, says that the job paused itself after failed
	// runs in a row (its reason says how many) rather than that an
	// operator disabled it; simba enable resumes it.
	Paused bool `json:"paused,omitempty"`
}

func inForce(name string, op admin.Op) *opInForce {
	return &opInForce{Name: name, By: op.By, Since: op.At, Reason: op.Reason, Paused: op.Paused}
}

// disableOf returns the disable in force of name, or else of its group
// (if any), or nil.
func (s *snapshot) disableOf(name, group string) *opInForce {
	return disableIn(s.ops, name, group)
}

func disableIn(ops admin.Ops, name, group string) *opInForce {
	for _, n := range []string{name, group} {
		if op, ok := ops.Disables[n]; ok && n != "" {
			return inForce(n, op)
		}
	}
	return nil
}

// drainIn returns the drain in force of member, or nil.
func drainIn(ops admin.Ops, member string) *opInForce {
	if op, ok := ops.Drains[member]; ok {
		return inForce(member, op)
	}
	return nil
}

// nextPlanned returns the next planned start of a schedule, or zero when
// it is not known: while a run is in flight, and for a moment after, the
// status still shows that run's own planned start.
func nextPlanned(st admin.Status) time.Time {
	if r := st.LastRun; r != nil && !st.NextPlanned.After(r.Start) {
		return time.Time{}
	}
	return st.NextPlanned
}

// groupView is one partition group.
type groupView struct {
	Name     string `json:"name"`
	Disabled bool   `json:"disabled"`
	// Disable is the group's disable in force: who asked, since when, why.
	Disable *opInForce `json:"disable,omitempty"`
	// PartitionCount and Assignment are what the members use (the largest
	// count, when they disagree).
	PartitionCount int             `json:"partitionCount"`
	Assignment     string          `json:"assignment,omitempty"`
	Members        []memberView    `json:"members"`
	Partitions     []partitionView `json:"partitions"`
	Vacant         []int           `json:"vacant"`
	InHandOff      []int           `json:"inHandOff"`
	Mismatches     []string        `json:"mismatches"`
}

// memberView is one live member of a group.
type memberView struct {
	ID             string `json:"id"`
	Session        string `json:"session"`
	PartitionCount int    `json:"partitionCount"`
	Assignment     string `json:"assignment"`
	Drained        bool   `json:"drained"`
	// Drain is the member's drain in force: who asked, since when, why.
	Drain *opInForce `json:"drain,omitempty"`
	Owns  []int      `json:"owns"`  // assigned to it
	Holds []int      `json:"holds"` // held by it now
}

// partitionView is one partition of a group.
type partitionView struct {
	Index  int    `json:"index"`
	Lease  string `json:"lease"`
	Owner  string `json:"owner"`  // the member the assignment gives it to
	Holder string `json:"holder"` // the member holding it, "" when vacant
	Token  uint64 `json:"token,omitempty"`
	Held   bool   `json:"held"`
	// State is "held", "vacant" or "hand-off" (held by another member
	// than its owner).
	State string `json:"state"`
	// Disable is the disable in force of the partition, or else of its
	// group (its name says which).
	Disable *opInForce `json:"disable,omitempty"`
}

// groupViewOf builds the view of g, with the disables and drains of ops.
func groupViewOf(g admin.Group, ops admin.Ops) groupView {
	v := groupView{
		Name: g.Name, Disabled: g.Disabled, Disable: disableIn(ops, g.Name, ""), PartitionCount: len(g.Partitions),
		Members: []memberView{}, Partitions: []partitionView{},
		Vacant: []int{}, InHandOff: []int{}, Mismatches: append([]string{}, g.Mismatches...),
	}
	variants := map[string]int{}
	for _, m := range g.Members {
		variants[m.Assignment]++
		mv := memberView{ID: m.ID, Session: m.Session, PartitionCount: m.Partitions, Assignment: m.Assignment, Drained: m.Drained, Drain: drainIn(ops, m.ID), Owns: []int{}, Holds: []int{}}
		for _, p := range g.Partitions {
			if p.Owner == m.ID {
				mv.Owns = append(mv.Owns, p.Index)
			}
			if p.Held && p.Holder == m.ID {
				mv.Holds = append(mv.Holds, p.Index)
			}
		}
		v.Members = append(v.Members, mv)
	}
	for _, a := range slices.Sorted(maps.Keys(variants)) {
		if v.Assignment == "" || variants[a] > variants[v.Assignment] {
			v.Assignment = a
		}
	}
	for _, p := range g.Partitions {
		pv := partitionView{Index: p.Index, Lease: partitionLease(g.Name, p.Index), Owner: p.Owner, Holder: p.Holder, Token: p.Token, Held: p.Held}
		pv.Disable = disableIn(ops, pv.Lease, g.Name)
		switch {
		case p.Vacant():
			pv.State = "vacant"
			v.Vacant = append(v.Vacant, p.Index)
		case p.InHandOff():
			pv.State = "hand-off"
			v.InHandOff = append(v.InHandOff, p.Index)
		default:
			pv.State = "held"
		}
		v.Partitions = append(v.Partitions, pv)
	}
	return v
}

// jobView is a scheduled election, or a scheduled group taken as one job.
type jobView struct {
	Name string `json:"name"`
	// Kind is "election" or "group"; a group's partitions are its leases.
	Kind       string `json:"kind"`
	Partitions int    `json:"partitions,omitempty"`
	Schedule   string `json:"schedule"`
	// State is "disabled", "vacant" (no lease held), "running" (a run in
	// flight), "scheduled" (held, waiting for the next planned start) or,
	// for a group, "partly held".
	State string `json:"state"`
	// Held counts the leases held: 0 or 1 for an election.
	Held int `json:"held"`
	// Holders are the members holding its leases, sorted.
	Holders []string `json:"holders"`
	// Token is the holder's token, for an election.
	Token uint64 `json:"token,omitempty"`
	// NextPlanned is the earliest next planned start among the leases
	// held.
	NextPlanned *time.Time `json:"nextPlanned,omitempty"`
	// LastRun is the latest run started.
	LastRun   *runInfo `json:"lastRun,omitempty"`
	Succeeded uint64   `json:"succeeded"`
	Failed    uint64   `json:"failed"`
	// SkippedRuns counts the planned starts skipped, of all its leases.
	SkippedRuns uint64 `json:"skippedRuns,omitempty"`
	Disabled    bool   `json:"disabled"`
	// Disable is the job's disable in force: who asked, since when, why.
	Disable *opInForce `json:"disable,omitempty"`
}

// jobs lists the scheduled elections and groups, sorted by name.
func (s *snapshot) jobs() []jobView {
	var out []jobView
	for _, e := range s.elections {
		if e.Status.Schedule != "" {
			out = append(out, s.jobOf(e.Name, kindElection, 0, e.Disabled, []admin.Election{e}))
		}
	}
	for i := range s.groups {
		g := &s.groups[i]
		if s.scheduled(found{kind: kindGroup, group: g}) {
			out = append(out, s.jobOf(g.Name, kindGroup, len(g.Partitions), g.Disabled, s.partitions(g)))
		}
	}
	slices.SortFunc(out, func(a, b jobView) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (s *snapshot) jobOf(name, kind string, partitions int, disabled bool, leases []admin.Election) jobView {
	j := jobView{Name: name, Kind: kind, Partitions: partitions, Disabled: disabled, Holders: []string{}}
	if disabled {
		j.Disable = s.disableOf(name, "") // a job is a plain election or a group
	}
	holders := map[string]bool{}
	running := false
	for _, e := range leases {
		st := e.Status
		if j.Schedule == "" {
			j.Schedule = st.Schedule
		}
		j.Succeeded += st.Succeeded
		j.Failed += st.Failed
		j.SkippedRuns += st.SkippedRuns
		if st.LastRun != nil && (j.LastRun == nil || st.LastRun.Start.After(j.LastRun.Start)) {
			j.LastRun = lastRunOf(st.LastRun)
		}
		if !e.Held {
			continue
		}
		j.Held++
		if h := holder(e); h != nil {
			holders[h.Member] = true
			if kind == kindElection {
				j.Token = h.Token
			}
			if st.LastRun != nil && st.LastRun.Result == "running" && st.LastRun.Token == h.Token {
				running = true
			}
		}
		if next := nextPlanned(st); !next.IsZero() && (j.NextPlanned == nil || next.Before(*j.NextPlanned)) {
			j.NextPlanned = &next
		}
	}
	j.Holders = slices.Sorted(maps.Keys(holders))
	if j.Holders == nil {
		j.Holders = []string{}
	}
	want := 1
	if kind == kindGroup {
		want = partitions
	}
	switch {
	case disabled:
		j.State = "disabled"
	case j.Held == 0:
		j.State = "vacant"
	case running:
		j.State = "running"
	case j.Held < want:
		j.State = "partly held"
	default:
		j.State = "scheduled"
	}
	return j
}

// overview is what simba status prints without a name.
type overview struct {
	Backend string `json:"backend"`
	// Sessions counts the distinct sessions seen holding a lease or a
	// group membership (a node contending for nothing is not seen).
	Sessions  int            `json:"sessions"`
	Elections electionCounts `json:"elections"`
	Groups    groupCounts    `json:"groups"`
	Jobs      jobCounts      `json:"jobs"`
	Ops       opsView        `json:"operations"`
	// Attention lists what an operator may want to look at: elections
	// without a holder, vacant partitions, hand-offs, mismatches, failed
	// runs.
	Attention []string `json:"attention"`
	// Problems lists the records skipped because they could not be used:
	// their keys, and why.
	Problems []admin.Problem `json:"problems"`
}

// leaseWithProblems is what simba status NAME --json prints: the lease,
// and the records skipped while reading it, if any.
type leaseWithProblems struct {
	leaseView
	Problems []admin.Problem `json:"problems,omitempty"`
}

// groupWithProblems is what simba groups GROUP --json prints.
type groupWithProblems struct {
	groupView
	Problems []admin.Problem `json:"problems,omitempty"`
}

type electionCounts struct {
	Total    int `json:"total"`
	Held     int `json:"held"`
	Disabled int `json:"disabled"`
}

type groupCounts struct {
	Total      int `json:"total"`
	Members    int `json:"members"`
	Partitions int `json:"partitions"`
	Held       int `json:"held"`
	Vacant     int `json:"vacant"`
	InHandOff  int `json:"inHandOff"`
	Mismatches int `json:"mismatches"`
}

type jobCounts struct {
	Total    int `json:"total"`
	Running  int `json:"running"`
	Disabled int `json:"disabled"`
	// LastFailed counts the jobs whose last run failed.
	LastFailed int `json:"lastFailed"`
}

// opsView is the operations in force.
type opsView struct {
	Disabled []string `json:"disabled"`
	Drained  []string `json:"drained"`
	// Disables and Drains are the same, with who asked, since when and
	// why.
	Disables []opInForce `json:"disables"`
	Drains   []opInForce `json:"drains"`
	Triggers []pendingOp `json:"triggers"`
	Resigns  []pendingOp `json:"resigns"`
}

// pendingOp is a trigger or resign request not carried out yet.
type pendingOp struct {
	Lease string `json:"lease"`
	admin.Op
}

func opsViewOf(ops admin.Ops) opsView {
	v := opsView{
		Disabled: trueKeys(ops.Disabled), Drained: trueKeys(ops.Drained),
		Disables: []opInForce{}, Drains: []opInForce{},
		Triggers: []pendingOp{}, Resigns: []pendingOp{},
	}
	for _, k := range slices.Sorted(maps.Keys(ops.Disables)) {
		v.Disables = append(v.Disables, *inForce(k, ops.Disables[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(ops.Drains)) {
		v.Drains = append(v.Drains, *inForce(k, ops.Drains[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(ops.Triggers)) {
		v.Triggers = append(v.Triggers, pendingOp{Lease: k, Op: ops.Triggers[k]})
	}
	for _, k := range slices.Sorted(maps.Keys(ops.Resigns)) {
		v.Resigns = append(v.Resigns, pendingOp{Lease: k, Op: ops.Resigns[k]})
	}
	return v
}

func trueKeys(m map[string]bool) []string {
	out := []string{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] {
			out = append(out, k)
		}
	}
	return out
}

func (s *snapshot) overview(backend string) overview {
	o := overview{Backend: backend, Sessions: s.sessions(), Ops: opsViewOf(s.ops), Attention: []string{}}
	for _, e := range s.elections {
		o.Elections.Total++
		switch {
		case e.Disabled:
			o.Elections.Disabled++
		case !e.Held:
			o.Attention = append(o.Attention, fmt.Sprintf("election %s has no holder", e.Name))
		}
		if e.Held {
			o.Elections.Held++
		}
	}
	members := map[string]bool{}
	for _, g := range s.groups {
		gv := groupViewOf(g, s.ops)
		o.Groups.Total++
		o.Groups.Partitions += gv.PartitionCount
		o.Groups.Held += gv.PartitionCount - len(gv.Vacant)
		o.Groups.Vacant += len(gv.Vacant)
		o.Groups.InHandOff += len(gv.InHandOff)
		o.Groups.Mismatches += len(gv.Mismatches)
		for _, m := range g.Members {
			members[m.Session] = true
		}
		if len(gv.Vacant) > 0 && !g.Disabled {
			o.Attention = append(o.Attention, fmt.Sprintf("group %s: partition%s %s vacant", g.Name, plural(len(gv.Vacant)), joinInts(gv.Vacant)))
		}
		if len(gv.InHandOff) > 0 {
			o.Attention = append(o.Attention, fmt.Sprintf("group %s: partition%s %s in hand-off", g.Name, plural(len(gv.InHandOff)), joinInts(gv.InHandOff)))
		}
		for _, m := range gv.Mismatches {
			o.Attention = append(o.Attention, fmt.Sprintf("group %s: %s", g.Name, m))
		}
	}
	o.Groups.Members = len(members)
	for _, j := range s.jobs() {
		o.Jobs.Total++
		switch j.State {
		case "disabled":
			o.Jobs.Disabled++
		case "running":
			o.Jobs.Running++
		}
		if j.LastRun != nil && j.LastRun.Result == "failed" {
			o.Jobs.LastFailed++
			o.Attention = append(o.Attention, fmt.Sprintf("job %s: last run failed: %s", j.Name, oneLine(j.LastRun.Error)))
		}
	}
	return o
}

// runView is one run of a job's history.
type runView struct {
	// Kind is "run": simba history lists the operations on the job too
	// (historyOp, of kind "operation").
	Kind  string `json:"kind"`
	Lease string `json:"lease"`
	runInfo
}

// runInfo is a run as the JSON output shows it: the run as recorded (a
// retry's attempt, a triggered run's args; for an entry of result
// "skipped", how many planned starts it stands for, from start to end,
// and why in error), and how long it took.
type runInfo struct {
	admin.Run
	// DurationSeconds is how long the run took, in seconds; absent while
	// it runs, and for skipped starts.
	DurationSeconds *float64 `json:"durationSeconds,omitempty"`
}

func runInfoOf(r admin.Run) runInfo {
	ri := runInfo{Run: r}
	if r.Result != records.Skipped {
		ri.DurationSeconds = seconds(r.Start, r.End)
	}
	return ri
}

func lastRunOf(r *admin.Run) *runInfo {
	if r == nil {
		return nil
	}
	ri := runInfoOf(*r)
	return &ri
}

// run returns the run, or nil.
func (ri *runInfo) run() *admin.Run {
	if ri == nil {
		return nil
	}
	return &ri.Run
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func pluralEs(n int) string {
	if n == 1 {
		return ""
	}
	return "es"
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ", ")
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
