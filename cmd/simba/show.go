package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/internal/records"
)

var statusCommand = &command{
	name: "status", args: "[NAME]", maxArgs: 1, shows: true,
	summary: "overview, or one election, partition, group or job",
	doc: `Without NAME: the backend, the sessions seen, counts of elections, groups
and jobs, the operations in force, and what may need attention (elections
without a holder, vacant partitions, hand-offs, mismatches, failed runs).
With NAME: the status of that election, partition (group.p), group or job:
its holder and token, schedule, next planned start, last run and counts.`,
	setup: func(*flag.FlagSet) action { return runStatus },
}

func runStatus(ctx context.Context, inv *invocation, args []string) error {
	s, err := inv.readSnapshot(ctx)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		o := s.overview(inv.t.String())
		o.Problems = inv.problemList()
		return inv.show(o, func(w io.Writer, p printer) { printOverview(w, p, o, s.now) })
	}
	f, ok := s.find(args[0])
	if !ok {
		return &notFoundError{what: "election, job or group", name: args[0], known: s.names()}
	}
	if f.kind == kindGroup {
		return showGroups(inv, s, []admin.Group{*f.group}, true)
	}
	v := s.leaseView(f.election)
	return inv.show(leaseWithProblems{v, inv.problemList()}, func(w io.Writer, p printer) {
		printLease(w, p, f.kind, v, s.now)
	})
}

func printOverview(w io.Writer, p printer, o overview, now time.Time) {
	tw := newTable(w)
	row(tw, "backend", o.Backend)
	row(tw, "sessions", fmt.Sprintf("%d (seen holding leases or group memberships)", o.Sessions))
	row(tw, "elections", fmt.Sprintf("%d: %d held, %d disabled", o.Elections.Total, o.Elections.Held, o.Elections.Disabled))
	g := o.Groups
	row(tw, "groups", fmt.Sprintf("%d: %d member%s, %d partitions (%d held, %d vacant, %d in hand-off), %d mismatch%s",
		g.Total, g.Members, plural(g.Members), g.Partitions, g.Held, g.Vacant, g.InHandOff, g.Mismatches, pluralEs(g.Mismatches)))
	row(tw, "jobs", fmt.Sprintf("%d: %d running, %d disabled, %d whose last run failed", o.Jobs.Total, o.Jobs.Running, o.Jobs.Disabled, o.Jobs.LastFailed))
	inForceRows(tw, p, "disabled", o.Ops.Disables, now)
	inForceRows(tw, p, "drained", o.Ops.Drains, now)
	row(tw, "triggers", pendingList(o.Ops.Triggers))
	row(tw, "resigns", pendingList(o.Ops.Resigns))
	if n := len(o.Problems); n > 0 {
		row(tw, "problems", recordsSkipped(n))
	}
	tw.Flush()
	if len(o.Attention) > 0 {
		fmt.Fprintln(w, "attention:")
		for _, a := range o.Attention {
			fmt.Fprintln(w, "  "+a)
		}
	}
}

// inForceRows writes the disables or drains in force, one a row, or
// "none".
func inForceRows(tw io.Writer, p printer, label string, ops []opInForce, now time.Time) {
	if len(ops) == 0 {
		row(tw, label, "none")
	}
	for i, op := range ops {
		if i > 0 {
			label = ""
		}
		row(tw, label, p.namedInForce(op, now))
	}
}

func pendingList(ops []pendingOp) string {
	if len(ops) == 0 {
		return "none pending"
	}
	var parts []string
	for _, op := range ops {
		s := op.Lease
		if op.Token != 0 {
			s += fmt.Sprintf(" (token %d)", op.Token)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ") + " pending"
}

// printLease prints the status of one election or partition.
func printLease(w io.Writer, p printer, kind string, v leaseView, now time.Time) {
	tw := newTable(w)
	row(tw, kind, v.Name)
	row(tw, "state", stateText(v.State, v.Disable))
	if v.Disable != nil {
		label := "disabled"
		if v.Disable.Paused {
			label = "paused"
		}
		row(tw, label, p.disabledAs(v.Name, v.Disable, now))
	}
	if h := v.Holder; h != nil {
		row(tw, "holder", fmt.Sprintf("%s (token %d, session %s, since %s, %s)", h.Member, h.Token, h.Session, p.clock(h.Since, now), ago(h.Since, now)))
	} else {
		row(tw, "holder", "none")
	}
	row(tw, "schedule", dash(v.Schedule))
	if v.Schedule != "" {
		next := "-"
		if v.Held && v.NextPlanned == nil && v.LastRun != nil && v.LastRun.Result == "running" {
			next = "after the run in flight"
		}
		if v.NextPlanned != nil {
			next = fmt.Sprintf("%s (%s)", until(*v.NextPlanned, now), p.clock(*v.NextPlanned, now))
		}
		row(tw, "next start", next)
	}
	if r := v.LastRun; r != nil {
		took := "in flight"
		if !r.End.IsZero() {
			took = "took " + dur(r.End.Sub(r.Start))
		}
		started := ago(r.Start, now)
		if p.wide {
			started = p.stamp(r.Start)
		}
		row(tw, "last run", fmt.Sprintf("#%d %s, started %s by %s (token %d), %s, source %s", r.Seq, runResult(&r.Run), started, r.Member, r.Token, took, r.Source))
		if len(r.Args) > 0 {
			row(tw, "arguments", p.argsText(r.Args))
		}
		if r.Error != "" && r.Result != records.Skipped {
			row(tw, "error", oneLine(r.Error))
		}
	} else {
		row(tw, "last run", "-")
	}
	runs := fmt.Sprintf("%d succeeded, %d failed", v.Succeeded, v.Failed)
	if v.FailStreak > 1 {
		runs += fmt.Sprintf(" (the last %d in a row)", v.FailStreak)
	}
	if v.SkippedRuns > 0 {
		runs += fmt.Sprintf(", %d planned start%s skipped", v.SkippedRuns, plural(int(v.SkippedRuns)))
	}
	row(tw, "runs", runs)
	if op := v.TriggerPending; op != nil {
		pending := fmt.Sprintf("trigger, asked by %s %s (%s)%s", op.By, ago(op.At, now), p.clock(op.At, now), reasonSuffix(op.Reason))
		if len(op.Args) > 0 {
			pending += "; arguments " + p.argsText(op.Args)
		}
		row(tw, "pending", pending)
	}
	if op := v.ResignPending; op != nil {
		row(tw, "pending", fmt.Sprintf("resign of token %s, asked by %s %s (%s)%s", tokenString(op.Token), op.By, ago(op.At, now), p.clock(op.At, now), reasonSuffix(op.Reason)))
	}
	if v.Updated != nil {
		row(tw, "updated", fmt.Sprintf("%s (%s)", ago(*v.Updated, now), p.clock(*v.Updated, now)))
	}
	tw.Flush()
}

var electionsCommand = &command{
	name: "elections", maxArgs: 0, shows: true,
	summary: "elections, their holders and tokens",
	doc: `One line per election: state (held, vacant, disabled), holder, token,
how long it has held it, schedule and last run.`,
	setup: func(fs *flag.FlagSet) action {
		all := fs.Bool("partitions", false, "list the partitions of groups too")
		return func(ctx context.Context, inv *invocation, _ []string) error {
			return runElections(ctx, inv, *all)
		}
	},
}

func runElections(ctx context.Context, inv *invocation, withPartitions bool) error {
	s, err := inv.readSnapshot(ctx)
	if err != nil {
		return err
	}
	list := s.elections
	if withPartitions {
		list = nil
		for _, name := range sortedKeys(s.leases) {
			list = append(list, s.leases[name])
		}
	}
	views := make([]leaseView, 0, len(list))
	for _, e := range list {
		views = append(views, s.leaseView(e))
	}
	return inv.show(views, func(w io.Writer, p printer) { printElections(w, p, views, s.now) })
}

func printElections(w io.Writer, p printer, views []leaseView, now time.Time) {
	tw := newTable(w)
	if p.wide {
		row(tw, "ELECTION", "STATE", "HOLDER", "TOKEN", "SESSION", "SINCE", "SCHEDULE", "NEXT START", "LAST RUN", "DISABLED")
	} else {
		row(tw, "ELECTION", "STATE", "HOLDER", "TOKEN", "SINCE", "SCHEDULE", "LAST RUN")
	}
	for _, v := range views {
		holder, token, session, since := "-", "-", "-", "-"
		if h := v.Holder; h != nil {
			holder, token, session, since = h.Member, tokenString(h.Token), h.Session, ago(h.Since, now)
			if p.wide {
				since = p.stamp(h.Since)
			}
		}
		state := stateText(v.State, v.Disable)
		if !p.wide {
			row(tw, v.Name, state, holder, token, since, dash(v.Schedule), runSummary(v.LastRun.run(), now))
			continue
		}
		next := "-"
		if v.NextPlanned != nil {
			next = p.stamp(*v.NextPlanned)
		}
		row(tw, v.Name, state, holder, token, session, since, dash(v.Schedule), next, runSummary(v.LastRun.run(), now), p.disabledAs(v.Name, v.Disable, now))
	}
	tw.Flush()
	if len(views) == 0 {
		fmt.Fprintln(w, "(no elections)")
	}
}

var groupsCommand = &command{
	name: "groups", args: "[GROUP]", maxArgs: 1, shows: true,
	summary: "members, assignment and holders of partition groups",
	doc: `For each group (or GROUP): its live members with the partitions the
assignment gives them and those they hold; every partition with its
owner, holder and token, as held, vacant or in hand-off; and mismatches
(members that disagree on the partition count or assignment, or share an
id).`,
	setup: func(*flag.FlagSet) action { return runGroups },
}

func runGroups(ctx context.Context, inv *invocation, args []string) error {
	s, err := inv.readSnapshot(ctx)
	if err != nil {
		return err
	}
	groups, one := s.groups, len(args) == 1
	if one {
		g := s.group(args[0])
		if g == nil {
			var known []string
			for _, g := range s.groups {
				known = append(known, g.Name)
			}
			return &notFoundError{what: "group", name: args[0], known: known}
		}
		groups = []admin.Group{*g}
	}
	return showGroups(inv, s, groups, one)
}

// showGroups prints groups of s; one prints a single group as a JSON
// object rather than a list.
func showGroups(inv *invocation, s *snapshot, groups []admin.Group, one bool) error {
	views := make([]groupView, 0, len(groups))
	for _, g := range groups {
		views = append(views, groupViewOf(g, s.ops))
	}
	var doc any = views
	if one {
		doc = groupWithProblems{views[0], inv.problemList()}
	}
	return inv.show(doc, func(w io.Writer, p printer) {
		for i, v := range views {
			if i > 0 {
				fmt.Fprintln(w)
			}
			printGroup(w, p, v, s.now)
		}
		if len(views) == 0 {
			fmt.Fprintln(w, "(no groups)")
		}
	})
}

func printGroup(w io.Writer, p printer, v groupView, now time.Time) {
	head := fmt.Sprintf("group %s: %d partitions, %s assignment, %d member%s", v.Name, v.PartitionCount, dash(v.Assignment), len(v.Members), plural(len(v.Members)))
	if v.Disabled {
		head += ", DISABLED"
	}
	fmt.Fprintln(w, head)
	tw := newTable(w)
	if p.wide {
		row(tw, "  MEMBER", "SESSION", "OWNS", "HOLDS", "STATE", "PARTITIONS", "ASSIGNMENT")
	} else {
		row(tw, "  MEMBER", "SESSION", "OWNS", "HOLDS", "STATE")
	}
	for _, m := range v.Members {
		state := "live"
		if m.Drained {
			state = "drained"
		}
		cells := []string{"  " + m.ID, m.Session, intList(m.Owns), intList(m.Holds), state}
		if p.wide {
			cells = append(cells, fmt.Sprint(m.PartitionCount), dash(m.Assignment))
		}
		row(tw, cells...)
	}
	tw.Flush()
	tw = newTable(w)
	if p.wide {
		row(tw, "  PARTITION", "LEASE", "OWNER", "HOLDER", "TOKEN", "STATE")
	} else {
		row(tw, "  PARTITION", "OWNER", "HOLDER", "TOKEN", "STATE")
	}
	for _, pv := range v.Partitions {
		state := pv.State
		if pv.State == "hand-off" {
			state = fmt.Sprintf("hand-off to %s", dash(pv.Owner))
		}
		switch {
		case pv.Disable != nil && pv.Disable.Paused:
			state += " (paused)"
		case pv.Disable != nil:
			state += " (disabled)"
		}
		cells := []string{fmt.Sprintf("  %d", pv.Index), dash(pv.Owner), dash(pv.Holder), tokenString(pv.Token), state}
		if p.wide {
			cells = slices.Insert(cells, 1, pv.Lease)
		}
		row(tw, cells...)
	}
	tw.Flush()
	fmt.Fprintf(w, "  vacant: %s; in hand-off: %s\n", listOr(intsToStrings(v.Vacant), "none"), listOr(intsToStrings(v.InHandOff), "none"))
	fmt.Fprintf(w, "  mismatches: %s\n", listOr(v.Mismatches, "none"))
	// The disables and drains that apply, with who, since when and why.
	var disables, drains []opInForce
	if v.Disable != nil {
		disables = append(disables, *v.Disable)
	}
	for _, pv := range v.Partitions {
		if d := pv.Disable; d != nil && d.Name != v.Name {
			disables = append(disables, *d)
		}
	}
	for _, m := range v.Members {
		if m.Drain != nil {
			drains = append(drains, *m.Drain)
		}
	}
	for _, d := range disables {
		fmt.Fprintf(w, "  disabled: %s\n", p.namedInForce(d, now))
	}
	for _, d := range drains {
		fmt.Fprintf(w, "  drained: %s\n", p.namedInForce(d, now))
	}
}

func intsToStrings(xs []int) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprint(x)
	}
	return out
}

var jobsCommand = &command{
	name: "jobs", maxArgs: 0, shows: true,
	summary: "scheduled jobs: state, next start, last result, counts",
	doc: `Scheduled elections, and groups run on a schedule (one line per group):
state (scheduled, running, partly held, vacant, disabled), holders, next
planned start, last run, and the counts of runs that succeeded and failed.`,
	setup: func(*flag.FlagSet) action { return runJobs },
}

func runJobs(ctx context.Context, inv *invocation, _ []string) error {
	s, err := inv.readSnapshot(ctx)
	if err != nil {
		return err
	}
	jobs := s.jobs()
	if jobs == nil {
		jobs = []jobView{}
	}
	return inv.show(jobs, func(w io.Writer, p printer) { printJobs(w, p, jobs, s.now) })
}

func printJobs(w io.Writer, p printer, jobs []jobView, now time.Time) {
	tw := newTable(w)
	head := []string{"JOB", "KIND", "SCHEDULE", "STATE", "HOLDERS", "NEXT START", "LAST RUN", "OK", "FAILED"}
	if p.wide {
		head = append(slices.Insert(head, 7, "LAST START"), "DISABLED")
	}
	row(tw, head...)
	for _, j := range jobs {
		kind, holders := j.Kind, listOr(j.Holders, "-")
		if j.Kind == kindGroup {
			kind = fmt.Sprintf("group/%d", j.Partitions)
			if j.State != "disabled" && j.State != "vacant" {
				holders = fmt.Sprintf("%s (%d/%d held)", holders, j.Held, j.Partitions)
			}
		} else if j.Token != 0 {
			holders = fmt.Sprintf("%s (token %d)", holders, j.Token)
		}
		next := "-"
		switch {
		case j.NextPlanned != nil && p.wide:
			next = fmt.Sprintf("%s (%s)", until(*j.NextPlanned, now), p.stamp(*j.NextPlanned))
		case j.NextPlanned != nil:
			next = until(*j.NextPlanned, now)
		case j.State == "running":
			next = "after the run"
		}
		cells := []string{j.Name, kind, j.Schedule, stateText(j.State, j.Disable), holders, next, runSummary(j.LastRun.run(), now), fmt.Sprint(j.Succeeded), fmt.Sprint(j.Failed)}
		if p.wide {
			start := "-"
			if r := j.LastRun.run(); r != nil {
				start = p.stamp(r.Start)
			}
			cells = append(slices.Insert(cells, 7, start), p.disabledAs(j.Name, j.Disable, now))
		}
		row(tw, cells...)
	}
	tw.Flush()
	if len(jobs) == 0 {
		fmt.Fprintln(w, "(no scheduled jobs)")
	}
}

var historyCommand = &command{
	name: "history", args: "JOB", minArgs: 1, maxArgs: 1, shows: true,
	summary: "the runs of a job, oldest first, and the operations on it",
	doc: `The execution history of an election, a partition (group.p), or every
partition of a group: start, duration, result (succeeded, failed,
cancelled, running, interrupted; with the exit status of a command and
a retry's attempt, as "failed (exit 3, attempt 2)"), source (normal,
misfire, trigger, fail-over), member and token, and a triggered run's
arguments (column ARGS, when a run shown has any). Planned starts that
did not happen are entries too: "skipped 3 starts (overlap)", from the
first (START) to the last (END, with -o wide), and why (overlap, misfire,
catch-up window, disabled, paused). The last 50 entries of each lease are
kept.
After the runs, the operations on it from the audit trail (on a group,
those on its partitions too; on a partition, those on its group), oldest
first: when, who, the operation, its reason and what it changed; at most
--limit of them, and when --limit leaves runs out, only those since the
first run shown. With -o json or yaml, the list holds the runs (kind
"run") and then the operations (kind "operation").`,
	setup: func(fs *flag.FlagSet) action {
		limit := fs.Int("limit", 20, "show the last `n` runs, and at most n operations (0: all that are kept)")
		return func(ctx context.Context, inv *invocation, args []string) error {
			if *limit < 0 {
				return usagef(nil, "--limit must not be negative")
			}
			return runHistory(ctx, inv, args[0], *limit)
		}
	},
}

func runHistory(ctx context.Context, inv *invocation, name string, limit int) error {
	s, err := inv.readSnapshot(ctx)
	if err != nil {
		return err
	}
	f, ok := s.find(name)
	if !ok {
		return &notFoundError{what: "job", name: name, known: s.names()}
	}
	runs, err := inv.history(ctx, f)
	if err != nil {
		return err
	}
	cut := limit > 0 && len(runs) > limit
	if cut {
		runs = runs[len(runs)-limit:]
	}
	ops, err := inv.operationsOn(ctx, f)
	if err != nil {
		return err
	}
	ops = historyOps(ops, runs, cut, limit)
	doc := make([]any, 0, len(runs)+len(ops))
	for _, r := range runs {
		doc = append(doc, r)
	}
	for _, o := range ops {
		doc = append(doc, historyOp{Kind: "operation", auditView: o})
	}
	return inv.show(doc, func(w io.Writer, p printer) {
		printHistory(w, p, name, f.kind == kindGroup, runs)
		printHistoryOps(w, p, name, ops)
	})
}

func printHistory(w io.Writer, p printer, name string, group bool, runs []runView) {
	tw := newTable(w)
	withArgs := slices.ContainsFunc(runs, func(r runView) bool { return len(r.Args) > 0 })
	head := []string{"SEQ", "START", "DURATION", "RESULT", "SOURCE", "MEMBER", "TOKEN", "ERROR"}
	if withArgs {
		head = slices.Insert(head, 5, "ARGS")
	}
	if p.wide {
		head = slices.Insert(head, 2, "END")
	}
	if group {
		head = append([]string{"PARTITION"}, head...)
	}
	row(tw, head...)
	for _, r := range runs {
		d := "-"
		if !r.End.IsZero() && r.Result != records.Skipped {
			d = dur(r.End.Sub(r.Start))
		}
		errText := oneLine(r.Error)
		if p.wide {
			errText = strings.Join(strings.Fields(r.Error), " ")
		}
		if r.Result == records.Skipped {
			errText = "" // the reason is in the result
		}
		cells := []string{fmt.Sprint(r.Seq), p.stamp(r.Start), d, runResult(&r.Run), r.Source, r.Member, tokenString(r.Token), dash(errText)}
		if withArgs {
			cells = slices.Insert(cells, 5, p.argsText(r.Args))
		}
		if p.wide {
			cells = slices.Insert(cells, 2, p.stamp(r.End))
		}
		if group {
			cells = append([]string{r.Lease[len(name)+1:]}, cells...)
		}
		row(tw, cells...)
	}
	tw.Flush()
	if len(runs) == 0 {
		fmt.Fprintf(w, "(no runs of %s recorded)\n", name)
	}
}

// history reads the runs of an election or partition, or of every
// partition of a group, oldest first.
func (inv *invocation) history(ctx context.Context, f found) ([]runView, error) {
	leases := []string{f.election.Name}
	if f.kind == kindGroup {
		leases = leases[:0]
		for _, p := range f.group.Partitions {
			leases = append(leases, partitionLease(f.group.Name, p.Index))
		}
	}
	runs := []runView{}
	for _, lease := range leases {
		list, problems, err := inv.adm.HistoryWithProblems(ctx, lease)
		inv.addProblems(problems)
		if errors.Is(err, admin.ErrNotFound) {
			continue // a partition nobody has held yet
		}
		if err != nil {
			return nil, inv.backendErr(ctx, "reading the history of "+lease, err)
		}
		for _, r := range list {
			runs = append(runs, runView{Kind: "run", Lease: lease, runInfo: runInfoOf(r)})
		}
	}
	slices.SortStableFunc(runs, func(a, b runView) int { return a.Start.Compare(b.Start) })
	return runs, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
