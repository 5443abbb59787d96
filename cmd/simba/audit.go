package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/internal/records"
)

// The audit trail: every operation, from the command or the console, is
// recorded by admin in the backend (who, why, when, what it changed).
// simba audit lists it, newest first; simba history shows the operations
// on a job after its runs; status, elections, groups and jobs show who
// disabled or drained what, why and since when (views.go, show.go). All of
// it is read through admin's view: no session, nothing written.

// defaultAuditLimit is how many entries simba audit shows unless told.
const defaultAuditLimit = 50

var auditCommand = &command{
	name: "audit", args: "[NAME]", maxArgs: 1, shows: true,
	summary: "the audit trail: who operated on what, when and why, newest first",
	doc: fmt.Sprintf(`Every operation (disable, enable, trigger, resign, drain, undrain), from
the command or the console, is recorded in the backend: when, who (the OS
user and host for the command; the operator for the console), the
operation and what it applies to, whether it changed anything, the
--reason given, and what it changed, in words. NAME selects the
operations on an election, job, partition or member, and for a group on
its partitions too. The writer of an entry keeps the newest %d entries
and none older than %d days.`, records.AuditKeep, int(records.AuditMaxAge/(24*time.Hour))),
	setup: func(fs *flag.FlagSet) action {
		var since sinceFlag
		fs.Var(&since, "since", "only the operations of the last `D` (a duration: 90m, 2h, 7d) or since a time (RFC 3339: 2026-03-01T16:00:00Z)")
		limit := fs.Int("limit", defaultAuditLimit, "show the newest `n` (0: all that are kept)")
		return func(ctx context.Context, inv *invocation, args []string) error {
			if *limit < 0 {
				return usagef(nil, "--limit must not be negative")
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return runAudit(ctx, inv, name, since.from(time.Now()), *limit)
		}
	},
}

// sinceFlag is --since: a duration back from now (days allowed: "7d"), or
// an instant.
type sinceFlag struct {
	d time.Duration
	t time.Time
	s string
}

func (f *sinceFlag) String() string { return f.s }

func (f *sinceFlag) Set(s string) error {
	if d, err := parseDays(s); err == nil {
		if d < 0 {
			return errors.New("must not be negative")
		}
		*f = sinceFlag{d: d, s: s}
		return nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		*f = sinceFlag{t: t, s: s}
		return nil
	}
	return errors.New("neither a duration (90m, 2h, 7d) nor a time (RFC 3339: 2026-03-01T16:00:00Z)")
}

// parseDays parses a Go duration, or a whole number of days ("7d").
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days > 100*365 {
			return 0, errors.New("not a number of days")
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// from returns the instant the flag names at now; zero when not given.
func (f *sinceFlag) from(now time.Time) time.Time {
	switch {
	case !f.t.IsZero():
		return f.t
	case f.d > 0:
		return now.Add(-f.d)
	}
	return time.Time{}
}

// auditView is one entry of the audit trail, as -o json prints it.
type auditView struct {
	At time.Time `json:"at"`
	By string    `json:"by"`
	// Op is disable, enable, trigger, resign, drain or undrain.
	Op string `json:"op"`
	// Target is what it applies to: an election, job, group or
	// partition, or a member id.
	Target string `json:"target"`
	// Token is the term a resign is of (absent: whichever holds it).
	Token uint64 `json:"token,omitempty"`
	// Changed is false for an operation that changed nothing in force
	// (an enable of what was not disabled).
	Changed bool   `json:"changed"`
	Reason  string `json:"reason"`
	// Change says what it changed, in words.
	Change string `json:"change"`
}

func auditViewOf(e admin.AuditEntry) auditView {
	return auditView{At: e.At, By: e.By, Op: e.Op, Target: e.Target, Token: e.Token, Changed: e.Changed, Reason: e.Reason, Change: e.Change}
}

// historyOp is an operation in simba history's JSON list, after the runs.
type historyOp struct {
	// Kind is "operation" (a run's is "run").
	Kind string `json:"kind"`
	auditView
}

// readAudit reads the audit trail since since (zero: all of it), newest
// first, and keeps the entries that keep selects; the entries skipped as
// unusable are added to the invocation's problems.
func (inv *invocation) readAudit(ctx context.Context, since time.Time, keep func(admin.AuditEntry) bool) ([]auditView, error) {
	a, err := inv.admin(ctx)
	if err != nil {
		return nil, err
	}
	entries, problems, err := a.Audit(ctx, admin.AuditFilter{Since: since})
	if err != nil {
		return nil, inv.backendErr(ctx, "reading the audit trail", err)
	}
	inv.addProblems(problems)
	out := []auditView{}
	for _, e := range entries {
		if keep(e) {
			out = append(out, auditViewOf(e))
		}
	}
	return out, nil
}

func runAudit(ctx context.Context, inv *invocation, name string, since time.Time, limit int) error {
	entries, err := inv.readAudit(ctx, since, func(e admin.AuditEntry) bool {
		return name == "" || e.Target == name || partitionOf(e.Target, name)
	})
	if err != nil {
		return err
	}
	if limit > 0 && len(entries) > limit {
		entries = entries[:limit]
	}
	empty := "(no operations in the audit trail"
	if name != "" {
		empty = "(no operations on " + name + " in the audit trail"
	}
	if !since.IsZero() {
		empty += " since " + inv.printer().stamp(since)
	}
	empty += ")"
	return inv.show(entries, func(w io.Writer, p printer) { printAudit(w, p, entries, empty) })
}

// partitionOf reports whether lease names a partition of group:
// "{group}.{p}".
func partitionOf(lease, group string) bool {
	rest, ok := strings.CutPrefix(lease, group+".")
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

// printAudit prints entries as a table, or empty when there are none.
func printAudit(w io.Writer, p printer, entries []auditView, empty string) {
	tw := newTable(w)
	head := []string{"TIME", "BY", "OP", "TARGET", "CHANGED", "REASON", "WHAT"}
	if p.wide {
		head = slices.Insert(head, 4, "TOKEN")
	}
	row(tw, head...)
	for _, e := range entries {
		changed := "no"
		if e.Changed {
			changed = "yes"
		}
		cells := []string{p.stamp(e.At), dash(e.By), e.Op, e.Target, changed, dash(p.text(e.Reason)), dash(p.text(e.Change))}
		if p.wide {
			cells = slices.Insert(cells, 4, tokenString(e.Token))
		}
		row(tw, cells...)
	}
	tw.Flush()
	if len(entries) == 0 {
		fmt.Fprintln(w, empty)
	}
}

// operationsOn reads the operations on what f names, oldest first: on an
// election, on a group and its partitions, or on a partition and its
// group.
func (inv *invocation) operationsOn(ctx context.Context, f found) ([]auditView, error) {
	var keep func(admin.AuditEntry) bool
	switch f.kind {
	case kindGroup:
		keep = func(e admin.AuditEntry) bool { return e.Target == f.group.Name || partitionOf(e.Target, f.group.Name) }
	case kindPartition:
		group := f.election.Status.Group
		if group == "" && f.group != nil {
			group = f.group.Name
		}
		keep = func(e admin.AuditEntry) bool {
			return e.Target == f.election.Name || (group != "" && e.Target == group)
		}
	default:
		keep = func(e admin.AuditEntry) bool { return e.Target == f.election.Name }
	}
	ops, err := inv.readAudit(ctx, time.Time{}, keep)
	slices.Reverse(ops)
	return ops, err
}

// historyOps picks the operations simba history shows with runs, the runs
// it shows of those kept (oldest first), cut to limit: with runs left out,
// the operations since the first run shown; at most the newest limit.
func historyOps(ops []auditView, runs []runView, cut bool, limit int) []auditView {
	if cut && len(runs) > 0 {
		first := runs[0].Start
		ops = slices.DeleteFunc(ops, func(o auditView) bool { return o.At.Before(first) })
	}
	if limit > 0 && len(ops) > limit {
		ops = ops[len(ops)-limit:]
	}
	return ops
}

// printHistoryOps prints the operations after the runs of simba history,
// under a heading that says what they are; nothing when there are none.
func printHistoryOps(w io.Writer, p printer, name string, ops []auditView) {
	if len(ops) == 0 {
		return
	}
	fmt.Fprintf(w, "\noperations on %s (from the audit trail, oldest first):\n", name)
	printAudit(w, p, ops, "")
}

// opNames lists the names of the operations in force, for completion.
func opNames(ops admin.Ops) []string {
	return sortedUnion(trueKeys(ops.Disabled), trueKeys(ops.Drained))
}
