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
	"github.com/simba-go/simba/backend"
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
	// Reason is the operator's --reason, recorded with the operation.
	Reason string `json:"reason,omitempty"`
	// Args are a trigger's --arg arguments, which the run receives.
	Args map[string]string `json:"args,omitempty"`
}

// report prints the result of an operation.
func (inv *invocation) report(r opResult) error {
	return inv.show(r, func(w io.Writer, _ printer) { fmt.Fprintln(w, r.Message) })
}

// reasonFlag registers --reason, which every operation takes.
func reasonFlag(fs *flag.FlagSet) *string {
	return fs.String("reason", "", "why, in a few words: recorded with the operation, shown with it")
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
NAME until simba enable NAME. A group name disables all its partitions; a
partition's lease (group.p) that partition alone.

It waits, within --timeout, until nothing of NAME is held: every holder has
handed off, after its runs ended. Once it has returned, no run of NAME starts
on any node until simba enable NAME (a node that wins its lease later reads
the disable before its first run). --wait=false returns as soon as the
disable is recorded: a run may still be going, or start on a holder that has
not seen it yet.`,
	setup: func(fs *flag.FlagSet) action {
		reason := reasonFlag(fs)
		force := fs.Bool("force", false, "disable a name the backend does not show (yet): before any node runs it")
		wait := fs.Bool("wait", true, "wait until nothing of it is held (--wait=false: return once recorded)")
		return func(ctx context.Context, inv *invocation, args []string) error {
			return runDisable(ctx, inv, args[0], *reason, *force, *wait)
		}
	},
}

func runDisable(ctx context.Context, inv *invocation, name, reason string, force, wait bool) error {
	if err := backend.CheckName(name); err != nil {
		return usagef(nil, "%v", err)
	}
	s, err := inv.readSnapshot(ctx)
	if err != nil {
		return err
	}
	r := opResult{Op: "disable", Name: name, Reason: reason}
	if _, ok := s.find(name); !ok && !force && !s.ops.Disabled[name] {
		return &notFoundError{what: "election, job or group", name: name, known: s.names(), hint: "pass --force to disable it before any node runs it"}
	}
	switch {
	case s.ops.Disabled[name] && s.ops.Disables[name].Paused:
		r.Message = fmt.Sprintf("%s is already disabled: it paused itself after failures", name)
	case s.ops.Disabled[name]:
		r.Message = fmt.Sprintf("%s is already disabled", name)
	default:
		if err := inv.adm.Disable(ctx, name, reason); err != nil {
			return inv.backendErr(ctx, "disabling "+name, err)
		}
		r.Changed = true
		r.Message = fmt.Sprintf("disabled %s: recorded; its holder hands off (not waited for) and no node runs it until 'simba enable %s'", name, name)
	}
	if wait {
		msg, err := inv.waitFor(ctx, "its leases were still held", func(s *snapshot) (string, bool) {
			return fmt.Sprintf("disabled %s: nothing of it is held, and no node runs it until 'simba enable %s'", name, name), len(s.heldLeases(name)) == 0
		})
		if err != nil {
			return err
		}
		r.Waited = true
		if r.Changed {
			r.Message = msg
		}
	}
	return inv.report(r)
}

var enableCommand = &command{
	name: "enable", args: "NAME", minArgs: 1, maxArgs: 1,
	summary: "undo disable; resume a job that paused itself",
	doc: `Nodes contend for NAME again. A name that is not disabled is left as it
is; a name the backend does not show at all is refused, as disable refuses
it, unless --force.

It also resumes a job that paused itself after failed runs in a row (a
schedule's pause-after policy writes the same disable, shown as "paused
after failures"): of a partition, by its lease name, as in
'simba enable billing.3'. A partition whose group is disabled too stays
disabled until 'simba enable GROUP'.`,
	setup: func(fs *flag.FlagSet) action {
		reason := reasonFlag(fs)
		force := fs.Bool("force", false, "say that a name the backend does not show is not disabled, rather than refuse it")
		return func(ctx context.Context, inv *invocation, args []string) error {
			name := args[0]
			if err := backend.CheckName(name); err != nil {
				return usagef(nil, "%v", err)
			}
			return runUndo(ctx, inv, undo{
				op: "enable", name: name, reason: *reason, force: *force,
				notSet: "is not disabled", doing: "enabling",
				done:  "enabled %s: nodes contend for it again",
				isSet: func(ops admin.Ops) bool { return ops.Disabled[name] },
				known: func(s *snapshot) ([]string, bool) {
					_, ok := s.find(name)
					return s.names(), ok
				},
				what:    "election, job or group",
				clear:   (*admin.Admin).Enable,
				cleared: func(s *snapshot) string { return enabledMessage(s, name) },
			})
		}
	},
}

var triggerCommand = &command{
	name: "trigger", args: "JOB", minArgs: 1, maxArgs: 1,
	summary: "run a scheduled job once, as soon as its holder can",
	doc: fmt.Sprintf(`The holder of the job (of each partition, for a group) runs it once as soon
as it can, besides its schedule. The request waits for a holder when there
is none; a request pending still is replaced. A disabled job is refused:
nothing would run it until simba enable; --force records the request
anyway, and it runs once the job is enabled.

--arg key=value (repeatable) gives the run arguments: the function finds
them in its simba.RunInfo, every partition of a group gets the same, and
the history and the audit trail show them. The key is what comes before
the first '=', the value all after it (it may be empty, or hold '='). A
key is a letter or _, then at most 63 letters, digits, _, . or -. At most
%d arguments, a value at most %d bytes, %d bytes of keys and values
in all.`,
		admin.MaxArgs, admin.MaxArgValue, admin.MaxArgsBytes),
	setup: func(fs *flag.FlagSet) action {
		reason := reasonFlag(fs)
		force := fs.Bool("force", false, "trigger a disabled job: the request waits until it is enabled")
		wait := fs.Bool("wait", false, "wait until the holders have taken the request up")
		var pairs argFlag
		fs.Var(&pairs, "arg", "an argument of the run, `key=value` (repeatable)")
		return func(ctx context.Context, inv *invocation, args []string) error {
			targs, err := admin.ParseArgs(pairs)
			if err != nil {
				return usagef(nil, "--arg: %s", strings.TrimPrefix(err.Error(), "simba/admin: "))
			}
			return runTrigger(ctx, inv, args[0], *reason, targs, *force, *wait)
		}
	},
}

// argFlag is --arg, repeatable: the key=value pairs as given, checked by
// admin.ParseArgs once all are read.
type argFlag []string

func (f *argFlag) String() string { return strings.Join(*f, " ") }

func (f *argFlag) Set(s string) error {
	*f = append(*f, s)
	return nil
}

// disabledLeases lists the leases of f that are disabled, by their own
// name or their group's.
func (s *snapshot) disabledLeases(f found) []string {
	if f.kind != kindGroup {
		if f.election.Disabled {
			return []string{f.election.Name}
		}
		return nil
	}
	var out []string
	for _, e := range s.partitions(f.group) {
		if f.group.Disabled || e.Disabled {
			out = append(out, e.Name)
		}
	}
	return out
}

func runTrigger(ctx context.Context, inv *invocation, name, reason string, args map[string]string, force, wait bool) error {
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
	disabled := s.disabledLeases(f)
	if len(disabled) > 0 && !force {
		what, enable := name+" is disabled", name
		switch {
		case f.kind == kindGroup && !f.group.Disabled:
			what = fmt.Sprintf("partition%s %s of %s %s disabled", plural(len(disabled)), strings.Join(disabled, ", "), name, map[bool]string{true: "is", false: "are"}[len(disabled) == 1])
			enable = strings.Join(disabled, "', 'simba enable ")
		case f.kind == kindPartition && !s.ops.Disabled[name]:
			what, enable = fmt.Sprintf("%s is disabled with its group %s", name, f.election.Status.Group), f.election.Status.Group
		}
		return failf("%s: nothing runs it until 'simba enable %s'; pass --force to record the trigger anyway (it runs once enabled)", what, enable)
	}
	for _, lease := range leases {
		if err := inv.adm.TriggerWith(ctx, lease, reason, args); err != nil {
			return inv.backendErr(ctx, "triggering "+lease, err)
		}
	}
	r := opResult{Op: "trigger", Name: name, Changed: true, Reason: reason, Args: args}
	held := s.heldLeases(name)
	what := name
	if len(args) > 0 {
		what += " with " + admin.FormatArgs(args)
	}
	switch {
	case len(disabled) == len(leases):
		r.Message = fmt.Sprintf("triggered %s; it is disabled: the request waits until 'simba enable %s'", what, name)
	case len(disabled) > 0:
		r.Message = fmt.Sprintf("triggered %s: %d partitions, %d held now; %d disabled wait until enabled", what, len(leases), len(held), len(disabled))
	case len(held) == 0:
		r.Message = fmt.Sprintf("triggered %s; nobody holds it now: the request waits for the next holder", what)
	case f.kind == kindGroup:
		r.Message = fmt.Sprintf("triggered %s: %d partitions, %d held now", what, len(leases), len(held))
	case holder(f.election) == nil: // held, but its holder has not written its status yet
		r.Message = fmt.Sprintf("triggered %s: its holder runs it as soon as it can", what)
	default:
		r.Message = fmt.Sprintf("triggered %s: %s runs it as soon as it can", what, holder(f.election).Member)
	}
	if wait {
		msg, err := inv.waitFor(ctx, "the holders had not taken the request up", func(s *snapshot) (string, bool) {
			for _, l := range leases {
				if _, ok := s.ops.Triggers[l]; ok {
					return "", false
				}
			}
			return fmt.Sprintf("triggered %s: the run has started", what), true
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
		reason := reasonFlag(fs)
		token := fs.Uint64("token", 0, "resign only the term with this `token` (default: the term holding it now)")
		wait := fs.Bool("wait", false, "wait until a term with a higher token holds it")
		return func(ctx context.Context, inv *invocation, args []string) error {
			return runResign(ctx, inv, args[0], *reason, *token, *wait)
		}
	},
}

func runResign(ctx context.Context, inv *invocation, name, reason string, token uint64, wait bool) error {
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
	if err := inv.adm.Resign(ctx, name, token, reason); err != nil {
		return inv.backendErr(ctx, "resigning "+name, err)
	}
	r := opResult{Op: "resign", Name: name, Token: token, Changed: true, Reason: reason}
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
for nothing until simba undrain MEMBER: for maintenance of its host.

It waits, within --timeout, until the member holds nothing and is in no
group; --wait=false returns as soon as the drain is recorded.`,
	setup: func(fs *flag.FlagSet) action {
		reason := reasonFlag(fs)
		force := fs.Bool("force", false, "drain a member the backend does not show (yet)")
		wait := fs.Bool("wait", true, "wait until the member holds nothing (--wait=false: return once recorded)")
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
	if member == "" || len(member) > backend.MaxNameLen || strings.ContainsAny(member, "/ \t\n") {
		return usagef(nil, "invalid member id %q", member)
	}
	s, err := inv.readSnapshot(ctx)
	if err != nil {
		return err
	}
	members := s.members()
	if !slices.Contains(members, member) && !force && !s.ops.Drained[member] {
		return &notFoundError{what: "member", name: member, known: members, hint: "pass --force to drain it before it starts"}
	}
	r := opResult{Op: "drain", Name: member, Reason: reason}
	if s.ops.Drained[member] {
		r.Message = fmt.Sprintf("%s is already drained", member)
	} else {
		if err := inv.adm.Drain(ctx, member, reason); err != nil {
			return inv.backendErr(ctx, "draining "+member, err)
		}
		held := s.holdings(member)
		r.Changed = true
		r.Message = fmt.Sprintf("drained %s: recorded; it hands off %d lease%s (not waited for) and contends for nothing until 'simba undrain %s'", member, len(held), plural(len(held)), member)
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
		r.Waited = true
		if r.Changed {
			r.Message = msg
		}
	}
	return inv.report(r)
}

var undrainCommand = &command{
	name: "undrain", args: "MEMBER", minArgs: 1, maxArgs: 1,
	summary: "undo drain",
	doc: `The member contends again. A member that is not drained is left as it is;
a member the backend does not show at all is refused, as drain refuses it,
unless --force.`,
	setup: func(fs *flag.FlagSet) action {
		reason := reasonFlag(fs)
		force := fs.Bool("force", false, "say that a member the backend does not show is not drained, rather than refuse it")
		return func(ctx context.Context, inv *invocation, args []string) error {
			member := args[0]
			return runUndo(ctx, inv, undo{
				op: "undrain", name: member, reason: *reason, force: *force,
				notSet: "is not drained", doing: "undraining",
				done:  "undrained %s: it contends again",
				isSet: func(ops admin.Ops) bool { return ops.Drained[member] },
				known: func(s *snapshot) ([]string, bool) {
					members := s.members()
					return members, slices.Contains(members, member)
				},
				what:  "member",
				clear: (*admin.Admin).Undrain,
			})
		}
	},
}

// undo is an operation that clears another (enable, undrain).
type undo struct {
	op, name string
	reason   string
	force    bool   // report an unknown name as not set, rather than refuse it
	notSet   string // the message when there is nothing to clear, after the name
	doing    string // the step, for errors: "enabling"
	done     string // the message once cleared, a format of the name
	isSet    func(admin.Ops) bool
	// known lists the names of the kind the backend shows, and whether
	// the name is one of them.
	known func(*snapshot) ([]string, bool)
	what  string // the kind of name, for errors: "member"
	clear func(*admin.Admin, context.Context, string, string) error
	// cleared, when set, is the message once cleared, from the snapshot
	// read before (rather than done).
	cleared func(*snapshot) string
}

// enabledMessage says what enable NAME did, from the snapshot read before:
// it resumed a job that had paused itself, and what stays disabled with a
// partition's group.
func enabledMessage(s *snapshot, name string) string {
	msg := fmt.Sprintf("enabled %s: nodes contend for it again", name)
	if s.ops.Disables[name].Paused {
		msg = fmt.Sprintf("resumed %s, which had paused itself after failures: nodes contend for it again", name)
	}
	if f, ok := s.find(name); ok && f.kind == kindPartition && f.group != nil && s.ops.Disabled[f.group.Name] {
		g := f.group.Name
		msg = strings.Replace(msg, ": nodes contend for it again", fmt.Sprintf("; its group %s is disabled still: nothing runs it until 'simba enable %s'", g, g), 1)
	}
	return msg
}

// runUndo clears u's operation, reporting that nothing changed when it was
// not set. Like the operation it undoes, it refuses a name the backend
// shows nothing of (unless force), but it clears an operation in force
// whatever the name: so that disable NAME --force can always be undone.
func runUndo(ctx context.Context, inv *invocation, u undo) error {
	s, err := inv.readSnapshot(ctx)
	if err != nil {
		return err
	}
	r := opResult{Op: u.op, Name: u.name, Reason: u.reason}
	if !u.isSet(s.ops) {
		if names, ok := u.known(s); !ok && !u.force {
			return &notFoundError{what: u.what, name: u.name, known: names}
		}
		r.Message = u.name + " " + u.notSet
		return inv.report(r)
	}
	if err := u.clear(inv.adm, ctx, u.name, u.reason); err != nil {
		return inv.backendErr(ctx, u.doing+" "+u.name, err)
	}
	r.Changed, r.Message = true, fmt.Sprintf(u.done, u.name)
	if u.cleared != nil {
		r.Message = u.cleared(s)
	}
	return inv.report(r)
}
