package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
)

// pollInterval is how often --wait reads the backend again.
const pollInterval = 100 * time.Millisecond

// opResult is what an operation prints with --json.
type opResult struct {
	Op   string `json:"op"`
	Name string `json:"name"`
	// Token is the token of the term asked to resign.
	Token uint64 `json:"token,omitempty"`
	// Changed is false when nothing had to be written (already disabled,
	// not drained, …).
	Changed bool `json:"changed"`
	// Waited reports that --wait saw the operation take effect.
	Waited  bool   `json:"waited"`
	Message string `json:"message"`
}

// report prints the result of an operation.
func (inv *invocation) report(r opResult) error {
	if inv.g.json {
		return writeJSON(inv.stdout, r)
	}
	fmt.Fprintln(inv.stdout, r.Message)
	return nil
}

// waitFor reads the backend every pollInterval until done reports true,
// and returns its description of the outcome. When ctx ends first it
// returns a failure saying what was still awaited.
func (inv *invocation) waitFor(ctx context.Context, awaited string, done func(*snapshot) (string, bool)) (string, error) {
	for {
		s, err := inv.readSnapshot(ctx)
		if err == nil {
			if msg, ok := done(s); ok {
				return msg, nil
			}
		} else if ctx.Err() == nil {
			return "", err
		}
		t := time.NewTimer(pollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			if errors.Is(ctx.Err(), context.Canceled) {
				return "", ctx.Err()
			}
			return "", failf("the request is recorded, but %s within --timeout %v (raise --timeout to wait longer)", awaited, inv.g.timeout)
		case <-t.C:
		}
	}
}

// heldLeases lists the leases held now of an election, partition or group.
func (s *snapshot) heldLeases(name string) []string {
	f, ok := s.find(name)
	if !ok {
		if e, ok := s.leases[name]; ok && e.Held {
			return []string{e.Name}
		}
		return nil
	}
	var out []string
	if f.kind == kindGroup {
		for _, e := range s.partitions(f.group) {
			if e.Held {
				out = append(out, e.Name)
			}
		}
		return out
	}
	if f.election.Held {
		out = append(out, f.election.Name)
	}
	return out
}

var disableCommand = &command{
	name: "disable", args: "NAME", minArgs: 1, maxArgs: 1,
	summary: "stop an election, job or group everywhere",
	doc: `Every node obeys at once: the holder hands off and no node contends for
NAME until simba enable NAME. A group name disables all its partitions.`,
	setup: func(fs *flag.FlagSet) action {
		reason := fs.String("reason", "", "why, recorded with the operation")
		force := fs.Bool("force", false, "disable a name the backend does not show (yet)")
		wait := fs.Bool("wait", false, "wait until nothing of it is held")
		return func(ctx context.Context, inv *invocation, args []string) error {
			return runDisable(ctx, inv, args[0], *reason, *force, *wait)
		}
	},
}

func runDisable(ctx context.Context, inv *invocation, name, reason string, force, wait bool) error {
	if err := simba.CheckName(name); err != nil {
		return usagef(nil, "%v", err)
	}
	s, err := inv.readSnapshot(ctx)
	if err != nil {
		return err
	}
	r := opResult{Op: "disable", Name: name}
	if _, ok := s.find(name); !ok && !force {
		return &notFoundError{what: "election, job or group", name: name, known: s.names()}
	}
	if s.ops.Disabled[name] {
		r.Message = fmt.Sprintf("%s is already disabled", name)
	} else {
		if err := inv.adm.Disable(ctx, name, reason); err != nil {
			return inv.backendErr(ctx, "disabling "+name, err)
		}
		r.Changed = true
		r.Message = fmt.Sprintf("disabled %s: its holder hands off and no node runs it until 'simba enable %s'", name, name)
	}
	if wait {
		msg, err := inv.waitFor(ctx, "its leases were still held", func(s *snapshot) (string, bool) {
			return fmt.Sprintf("disabled %s: nothing of it is held", name), len(s.heldLeases(name)) == 0
		})
		if err != nil {
			return err
		}
		r.Waited, r.Message = true, msg
	}
	return inv.report(r)
}

var enableCommand = &command{
	name: "enable", args: "NAME", minArgs: 1, maxArgs: 1,
	summary: "undo disable",
	setup: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, inv *invocation, args []string) error {
			name := args[0]
			if err := simba.CheckName(name); err != nil {
				return usagef(nil, "%v", err)
			}
			return runUndo(ctx, inv, undo{
				op: "enable", name: name, notSet: "is not disabled", doing: "enabling",
				done:  "enabled %s: nodes contend for it again",
				isSet: func(ops admin.Ops) bool { return ops.Disabled[name] },
				clear: (*admin.Admin).Enable,
			})
		}
	},
}

var triggerCommand = &command{
	name: "trigger", args: "JOB", minArgs: 1, maxArgs: 1,
	summary: "run a scheduled job once, as soon as its holder can",
	doc: `The holder of the job (of each partition, for a group) runs it once as soon
as it can, besides its schedule. The request waits for a holder when there
is none.`,
	setup: func(fs *flag.FlagSet) action {
		wait := fs.Bool("wait", false, "wait until the holders have taken the request up")
		return func(ctx context.Context, inv *invocation, args []string) error {
			return runTrigger(ctx, inv, args[0], *wait)
		}
	},
}

func runTrigger(ctx context.Context, inv *invocation, name string, wait bool) error {
	s, err := inv.readSnapshot(ctx)
	if err != nil {
		return err
	}
	f, ok := s.find(name)
	if !ok {
		return &notFoundError{what: "job", name: name, known: s.jobNames()}
	}
	if !s.scheduled(f) {
		return failf("%s runs while leader, not on a schedule: there is nothing to trigger (resign moves its term instead)", name)
	}
	leases := []string{name}
	if f.kind == kindGroup {
		leases = leases[:0]
		for _, e := range s.partitions(f.group) {
			leases = append(leases, e.Name)
		}
	}
	for _, lease := range leases {
		if err := inv.adm.Trigger(ctx, lease, ""); err != nil {
			return inv.backendErr(ctx, "triggering "+lease, err)
		}
	}
	r := opResult{Op: "trigger", Name: name, Changed: true}
	held := s.heldLeases(name)
	switch {
	case len(held) == 0:
		r.Message = fmt.Sprintf("triggered %s; nobody holds it now: the request waits for the next holder", name)
	case f.kind == kindGroup:
		r.Message = fmt.Sprintf("triggered %s: %d partitions, %d held now", name, len(leases), len(held))
	default:
		r.Message = fmt.Sprintf("triggered %s: %s runs it as soon as it can", name, holder(f.election).Member)
	}
	if wait {
		msg, err := inv.waitFor(ctx, "the holders had not taken the request up", func(s *snapshot) (string, bool) {
			for _, l := range leases {
				if _, ok := s.ops.Triggers[l]; ok {
					return "", false
				}
			}
			return fmt.Sprintf("triggered %s: the run has started", name), true
		})
		if err != nil {
			return err
		}
		r.Waited, r.Message = true, msg
	}
	return inv.report(r)
}

var resignCommand = &command{
	name: "resign", args: "NAME", minArgs: 1, maxArgs: 1,
	summary: "make a holder hand off; another takes over",
	doc: `The holder of the election or partition hands off gracefully and sits out
one lease term, so that another member takes over with a higher token. The
lease is never deleted from outside. Without --token it applies to the term
holding NAME now, never to a later one.`,
	setup: func(fs *flag.FlagSet) action {
		token := fs.Uint64("token", 0, "resign only the term with this `token` (default: the term holding it now)")
		wait := fs.Bool("wait", false, "wait until a term with a higher token holds it")
		return func(ctx context.Context, inv *invocation, args []string) error {
			return runResign(ctx, inv, args[0], *token, *wait)
		}
	},
}

func runResign(ctx context.Context, inv *invocation, name string, token uint64, wait bool) error {
	s, err := inv.readSnapshot(ctx)
	if err != nil {
		return err
	}
	f, ok := s.find(name)
	switch {
	case !ok:
		return &notFoundError{what: "election", name: name, known: s.names()}
	case f.kind == kindGroup:
		return failf("%s is a group: resign one of its partitions (%s.0, …), or drain a member to move all of its partitions", name, name)
	case !f.election.Held:
		return failf("nobody holds %s: there is no term to resign", name)
	}
	h := holder(f.election)
	switch {
	case token != 0 && h != nil && h.Token != token:
		return failf("the term of %s with token %d is over: %s holds it now with token %d", name, token, h.Member, h.Token)
	case token == 0 && h != nil:
		token = h.Token
	}
	if err := inv.adm.Resign(ctx, name, token, ""); err != nil {
		return inv.backendErr(ctx, "resigning "+name, err)
	}
	r := opResult{Op: "resign", Name: name, Token: token, Changed: true}
	who := "its holder"
	if h != nil {
		who = h.Member
	}
	r.Message = fmt.Sprintf("asked %s to hand %s off (token %s)", who, name, tokenString(token))
	if wait {
		msg, err := inv.waitFor(ctx, "no term with a higher token held it", func(s *snapshot) (string, bool) {
			e, ok := s.leases[name]
			nh := holder(e)
			if !ok || nh == nil || (token != 0 && nh.Token <= token) {
				return "", false
			}
			return fmt.Sprintf("%s resigned: %s holds it now with token %d", name, nh.Member, nh.Token), true
		})
		if err != nil {
			return err
		}
		r.Waited, r.Message = true, msg
	}
	return inv.report(r)
}

var drainCommand = &command{
	name: "drain", args: "MEMBER", minArgs: 1, maxArgs: 1,
	summary: "make a member hand off everything and stay out",
	doc: `The member hands off every lease it holds, leaves its groups, and contends
for nothing until simba undrain MEMBER: for maintenance of its host.`,
	setup: func(fs *flag.FlagSet) action {
		reason := fs.String("reason", "", "why, recorded with the operation")
		force := fs.Bool("force", false, "drain a member the backend does not show (yet)")
		wait := fs.Bool("wait", false, "wait until the member holds nothing")
		return func(ctx context.Context, inv *invocation, args []string) error {
			return runDrain(ctx, inv, args[0], *reason, *force, *wait)
		}
	},
}

// holdings lists what member holds: partitions and elections.
func (s *snapshot) holdings(member string) []string {
	var out []string
	for _, name := range sortedKeys(s.leases) {
		if h := holder(s.leases[name]); h != nil && h.Member == member {
			out = append(out, name)
		}
	}
	return out
}

func runDrain(ctx context.Context, inv *invocation, member, reason string, force, wait bool) error {
	if member == "" || len(member) > simba.MaxNameLen || strings.ContainsAny(member, "/ \t\n") {
		return usagef(nil, "invalid member id %q", member)
	}
	s, err := inv.readSnapshot(ctx)
	if err != nil {
		return err
	}
	members := s.members()
	if !slices.Contains(members, member) && !force {
		return &notFoundError{what: "member", name: member, known: members}
	}
	r := opResult{Op: "drain", Name: member}
	if s.ops.Drained[member] {
		r.Message = fmt.Sprintf("%s is already drained", member)
	} else {
		if err := inv.adm.Drain(ctx, member, reason); err != nil {
			return inv.backendErr(ctx, "draining "+member, err)
		}
		held := s.holdings(member)
		r.Changed = true
		r.Message = fmt.Sprintf("drained %s: it hands off %d lease%s and contends for nothing until 'simba undrain %s'", member, len(held), plural(len(held)), member)
	}
	if wait {
		msg, err := inv.waitFor(ctx, member+" still held leases or group memberships", func(s *snapshot) (string, bool) {
			if len(s.holdings(member)) > 0 {
				return "", false
			}
			for _, g := range s.groups {
				for _, m := range g.Members {
					if m.ID == member {
						return "", false
					}
				}
			}
			return fmt.Sprintf("drained %s: it holds nothing", member), true
		})
		if err != nil {
			return err
		}
		r.Waited, r.Message = true, msg
	}
	return inv.report(r)
}

var undrainCommand = &command{
	name: "undrain", args: "MEMBER", minArgs: 1, maxArgs: 1,
	summary: "undo drain",
	setup: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, inv *invocation, args []string) error {
			member := args[0]
			return runUndo(ctx, inv, undo{
				op: "undrain", name: member, notSet: "is not drained", doing: "undraining",
				done:  "undrained %s: it contends again",
				isSet: func(ops admin.Ops) bool { return ops.Drained[member] },
				clear: (*admin.Admin).Undrain,
			})
		}
	},
}

// undo is an operation that clears another (enable, undrain).
type undo struct {
	op, name string
	notSet   string // the message when there is nothing to clear, after the name
	doing    string // the step, for errors: "enabling"
	done     string // the message once cleared, a format of the name
	isSet    func(admin.Ops) bool
	clear    func(*admin.Admin, context.Context, string, string) error
}

// runUndo clears u's operation, reporting that nothing changed when it was
// not set.
func runUndo(ctx context.Context, inv *invocation, u undo) error {
	a, err := inv.admin(ctx)
	if err != nil {
		return err
	}
	ops, err := a.Ops(ctx)
	if err != nil {
		return inv.backendErr(ctx, "reading the operations", err)
	}
	inv.addProblems(ops.Problems)
	r := opResult{Op: u.op, Name: u.name}
	if !u.isSet(ops) {
		r.Message = u.name + " " + u.notSet
		return inv.report(r)
	}
	if err := u.clear(a, ctx, u.name, ""); err != nil {
		return inv.backendErr(ctx, u.doing+" "+u.name, err)
	}
	r.Changed, r.Message = true, fmt.Sprintf(u.done, u.name)
	return inv.report(r)
}
