package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/assign"
	"github.com/simba-go/simba/internal/records"
)

// ErrNotFound is returned for an election, job or group of which the
// backend knows nothing.
var ErrNotFound = errors.New("simba/admin: not found")

// Admin reads the status simba's nodes keep in a backend and writes the
// operations they obey. It reads through the backend's read-only View
// (backend.Viewer) when the backend has one, so that reading opens no
// session and writes nothing; it opens a backend session of its own, renewed
// in the background, at its first operation, and another one when that one
// has ended (it expired during an outage, say). A backend without a View
// is read through that session, opened by Open. It is safe for concurrent
// use.
type Admin struct {
	*conn
	by string // who asks, recorded with operations
}

// As returns an Admin that shares a's connection to the backend and
// records operator as who performs its operations (a console serving
// several operators, each with a token of their own). Closing either
// closes both.
func (a *Admin) As(operator string) *Admin { return &Admin{conn: a.conn, by: operator} }

// Option configures Open. Options refuse bad values: Open returns their
// error.
type Option func(*config) error

type config struct {
	ttl time.Duration
	by  string
}

// WithTTL sets the TTL of the admin's own session (default 10s), the one
// its operations write with. It must be positive.
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("simba/admin: WithTTL(%v): the TTL must be positive", d)
		}
		c.ttl = d
		return nil
	}
}

// WithOperator names who performs operations, recorded with them (default
// "simba admin"). The name must not be empty.
func WithOperator(name string) Option {
	return func(c *config) error {
		if strings.TrimSpace(name) == "" {
			return fmt.Errorf("simba/admin: WithOperator(%q): the operator needs a name", name)
		}
		c.by = name
		return nil
	}
}

// Open returns an Admin of b. It does not own b.
//
// When b implements backend.Viewer, Open opens a View (which, on
// ZooKeeper, connects) and no session: the reads need nothing but read
// permission, and the first operation opens the session. Otherwise Open
// opens the session now, and returns an error matching
// backend.ErrRecordsUnsupported when the backend keeps no records.
func Open(ctx context.Context, b backend.Backend, opts ...Option) (*Admin, error) {
	cfg := config{ttl: 10 * time.Second, by: "simba admin"}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("simba/admin: nil Option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	c := &conn{b: b, ttl: cfg.ttl, lock: make(chan struct{}, 1)}
	if vr, ok := b.(backend.Viewer); ok {
		v, err := vr.View(ctx)
		if err != nil {
			return nil, fmt.Errorf("simba/admin: opening a view: %w", err)
		}
		c.view = v
	} else if _, err := c.session(ctx); errors.Is(err, errNoRecords) {
		return nil, err
	} else if err != nil {
		return nil, fmt.Errorf("simba/admin: %w", err)
	}
	return &Admin{conn: c, by: cfg.by}, nil
}

// Close ends the admin's session, if it opened one, and its view, waiting
// at most a few seconds for each: a session the backend could not be told
// to end expires by itself within its TTL. It closes the Admins of As
// too. Close is idempotent.
func (a *Admin) Close() error { return a.conn.close() }

// Election is what the backend shows of one election or partition.
type Election struct {
	Name string // the lease name: an election, or "{group}.{p}"
	// Held reports whether the lease is held now (known only where the
	// backend can list leases; otherwise from the status).
	Held bool
	// Status is the last status its holders wrote (zero if none).
	Status Status
	// Disabled reports an operator's disable of the election or its group.
	Disabled bool
	// Disable is that disable, who asked, since when and why (of the
	// election itself if both are disabled); nil when not disabled.
	Disable *Op
}

// Snapshot is what one read of the backend shows: the elections, the
// groups, the operations in force, and the records skipped because they
// could not be used.
type Snapshot struct {
	Elections []Election // as Elections returns them
	Groups    []Group    // as Groups returns them
	Ops       Ops        // as Ops returns them
	// Health are the clients' health records (their recent renewals),
	// sorted by member, as Health returns them.
	Health []Health
	// Problems lists every record skipped, sorted by key: the status
	// records, the operation records (Ops.Problems), the members' records
	// (in their Group's Problems too) and the lease names that could not be
	// used.
	Problems []Problem
}

// Snapshot reads the elections, groups and operations in force at once:
// the status records, the operations and the leases held are read once for
// all, then the members of each group. A record that cannot be used is
// skipped and reported in Problems; an error is returned only when the
// backend could not be read.
func (a *Admin) Snapshot(ctx context.Context) (Snapshot, error) {
	statuses, problems, err := a.statuses(ctx, "")
	if err != nil {
		return Snapshot{}, err
	}
	held, heldProblems, err := a.held(ctx, "")
	if err != nil {
		return Snapshot{}, err
	}
	ops, err := a.Ops(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	groups, err := a.groups(ctx, statuses, problems, held, ops)
	if err != nil {
		return Snapshot{}, err
	}
	health, healthProblems, err := a.health(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	problems = append(problems, healthProblems...)
	problems = append(problems, heldProblems...)
	problems = append(problems, ops.Problems...)
	for _, g := range groups {
		problems = append(problems, g.Problems...)
	}
	return Snapshot{
		Elections: elections(statuses, held, ops),
		Groups:    groups,
		Ops:       ops,
		Health:    health,
		Problems:  sortProblems(problems),
	}, nil
}

// Health returns the health records of the clients, sorted by member:
// each client's recent session renewals, and how much of its term it had
// left at each. A record is written every few seconds by its client while
// it renews; one whose Updated is old is of a client gone without closing
// (a crash), and is deleted by the next client to start. Records that
// cannot be used are skipped: Snapshot reports them.
func (a *Admin) Health(ctx context.Context) ([]Health, error) {
	h, _, err := a.health(ctx)
	return h, err
}

// health reads the health records, and the problems of the others.
func (a *Admin) health(ctx context.Context) ([]Health, []Problem, error) {
	list, problems, err := a.list(ctx, records.HealthPrefix)
	if err != nil {
		return nil, nil, err
	}
	out := make([]Health, 0, len(list))
	for _, r := range list {
		h, p := parseHealth(r)
		if p != nil {
			problems = append(problems, *p)
			continue
		}
		out = append(out, h)
	}
	return out, problems, nil
}

// Elections lists the elections and partitions the backend has status
// for, or holds leases of, sorted by name. Partitions are included; see
// Groups for them by group. Records that cannot be used are skipped:
// Snapshot reports them.
func (a *Admin) Elections(ctx context.Context) ([]Election, error) {
	statuses, _, err := a.statuses(ctx, "")
	if err != nil {
		return nil, err
	}
	held, _, err := a.held(ctx, "")
	if err != nil {
		return nil, err
	}
	ops, err := a.Ops(ctx)
	if err != nil {
		return nil, err
	}
	return elections(statuses, held, ops), nil
}

// elections joins the statuses and the leases held (nil: unknown) into
// elections, sorted by name.
func elections(statuses []Status, held map[string]bool, ops Ops) []Election {
	byName := map[string]*Election{}
	for _, st := range statuses {
		byName[st.Lease] = &Election{Name: st.Lease, Status: st, Held: held == nil && st.Holder != nil}
	}
	for name := range held {
		if _, ok := byName[name]; !ok {
			byName[name] = &Election{Name: name}
		}
		byName[name].Held = true
	}
	out := make([]Election, 0, len(byName))
	for _, e := range byName {
		e.Disabled = ops.Disabled[e.Name] || (e.Status.Group != "" && ops.Disabled[e.Status.Group])
		e.Disable = disableOf(ops, e.Name, e.Status.Group)
		out = append(out, *e)
	}
	slices.SortFunc(out, func(x, y Election) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// disableOf returns the disable in force of name, or else of its group,
// or nil.
func disableOf(ops Ops, name, group string) *Op {
	for _, n := range []string{name, group} {
		if op, ok := ops.Disables[n]; ok && n != "" {
			return &op
		}
	}
	return nil
}

// Status returns the status of one election or partition. A status record
// that cannot be used is an error of type *RecordError.
func (a *Admin) Status(ctx context.Context, lease string) (Status, error) {
	if err := checkName(lease); err != nil {
		return Status{}, err
	}
	var r, lr backend.Record
	var logErr error
	err := a.read(ctx, func(rd reader) (err error) {
		// The status before the term log (see records.Status.Terms).
		if r, err = rd.GetRecord(ctx, records.StatusKey(lease)); err != nil {
			return err
		}
		lr, logErr = rd.GetRecord(ctx, records.TermsKey(lease))
		if logErr != nil && !errors.Is(logErr, backend.ErrNoRecord) && !errors.As(logErr, new(*backend.MalformedError)) {
			return logErr
		}
		return nil
	})
	var bad *backend.MalformedError
	switch {
	case errors.Is(err, backend.ErrNoRecord):
		return Status{}, fmt.Errorf("%w: no status for %q", ErrNotFound, lease)
	case errors.As(err, &bad):
		return Status{}, &RecordError{Problem: *malformedRecord(records.StatusKey(lease), bad.Reason)}
	case err != nil:
		return Status{}, err
	}
	// A term log that cannot be used leaves the status's own terms
	// (Snapshot reports it).
	var log []records.Term
	if logErr == nil {
		if _, terms, p := parseTermLog(lr); p == nil {
			log = terms
		}
	}
	st, p := parseStatusWith(r, log)
	if p != nil {
		return Status{}, &RecordError{Problem: *p}
	}
	return st, nil
}

// History returns the execution history of one election or partition,
// oldest first. Records that cannot be used are skipped:
// HistoryWithProblems reports them.
func (a *Admin) History(ctx context.Context, lease string) ([]Run, error) {
	runs, _, err := a.HistoryWithProblems(ctx, lease)
	return runs, err
}

// HistoryWithProblems returns the execution history of one election or
// partition, oldest first, and the records skipped because they could not
// be used: runs, and the lease's status record, which says which runs are
// of the current history (without it, every run kept is). It returns
// ErrNotFound when the lease has neither status nor history.
func (a *Admin) HistoryWithProblems(ctx context.Context, lease string) ([]Run, []Problem, error) {
	if err := checkName(lease); err != nil {
		return nil, nil, err
	}
	list, problems, err := a.list(ctx, records.HistoryKeys(lease))
	if err != nil {
		return nil, nil, err
	}
	st, err := a.Status(ctx, lease)
	var re *RecordError
	switch {
	case errors.As(err, &re):
		problems = append(problems, re.Problem)
		st.HistorySeq = math.MaxUint64 // which runs are current is not known: keep them all
	case err != nil && (len(list) == 0 || !errors.Is(err, ErrNotFound)):
		return nil, nil, err
	case err != nil:
		st.HistorySeq = math.MaxUint64 // history without status: keep it all
	}
	runs := make([]Run, 0, len(list))
	for _, r := range list {
		run, p := parseRun(r, lease)
		switch {
		case p != nil:
			problems = append(problems, *p)
		// A slot holding a run newer than the status knows of is left from
		// before the status was lost: the run is not of this history.
		case run.Seq <= st.HistorySeq:
			runs = append(runs, run)
		}
	}
	slices.SortFunc(runs, func(x, y Run) int { return cmp.Compare(x.Seq, y.Seq) })
	return runs, sortProblems(problems), nil
}

// list reads the records under prefix, and the problems of the stored
// values under it that the backend skipped because they are not records
// at all (see backend.MalformedError), where it can say which
// (backend.SkipReporter).
func (a *Admin) list(ctx context.Context, prefix string) ([]backend.Record, []Problem, error) {
	var list []backend.Record
	var skipped []backend.MalformedError
	err := a.read(ctx, func(rd reader) (err error) {
		list, skipped, err = rd.ListRecordsWithSkipped(ctx, prefix)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	var problems []Problem
	for _, bad := range skipped {
		problems = append(problems, *malformedRecord(bad.Key, bad.Reason))
	}
	return list, problems, nil
}

// members reads the live members of group, and the problems of the member
// entries that the backend skipped because they are not member records at
// all, where it can say which.
func (a *Admin) members(ctx context.Context, group string) ([]backend.Member, []Problem, error) {
	var members []backend.Member
	var skipped []backend.MalformedError
	err := a.read(ctx, func(rd reader) (err error) {
		members, skipped, err = rd.MembersWithSkipped(ctx, group)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	var problems []Problem
	for _, bad := range skipped {
		problems = append(problems, *malformedMember(group, bad.Key, bad.Reason))
	}
	return members, problems, nil
}

// statuses reads the status records under prefix: those that can be used,
// and the problems of the others.
func (a *Admin) statuses(ctx context.Context, prefix string) ([]Status, []Problem, error) {
	list, problems, err := a.list(ctx, records.StatusPrefix+prefix)
	if err != nil {
		return nil, nil, err
	}
	// The term logs after the statuses (see records.Status.Terms).
	logList, logProblems, err := a.list(ctx, records.TermsPrefix+prefix)
	if err != nil {
		return nil, nil, err
	}
	problems = append(problems, logProblems...)
	logs := make(map[string][]records.Term, len(logList))
	for _, r := range logList {
		lease, terms, p := parseTermLog(r)
		if p != nil {
			problems = append(problems, *p)
			continue
		}
		logs[lease] = terms
	}
	out := make([]Status, 0, len(list))
	for _, r := range list {
		st, p := parseStatusWith(r, logs[strings.TrimPrefix(r.Key, records.StatusPrefix)])
		if p != nil {
			problems = append(problems, *p)
			continue
		}
		out = append(out, st)
	}
	return out, problems, nil
}

// held returns the leases held now under prefix, or nil when the backend
// cannot list them, and the problems of lease names that are not names.
func (a *Admin) held(ctx context.Context, prefix string) (map[string]bool, []Problem, error) {
	var names []string
	err := a.read(ctx, func(rd reader) (err error) {
		names, err = rd.HeldLeases(ctx, prefix)
		return err
	})
	if errors.Is(err, errNoLister) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]bool, len(names))
	var problems []Problem
	for _, n := range names {
		if !backend.ValidName(n) {
			problems = append(problems, *newProblem("lease/"+n, "the lease key does not name a lease (%s)", nameRule))
			continue
		}
		out[n] = true
	}
	return out, problems, nil
}

// Member is one live member of a group.
type Member struct {
	ID      string // the member id
	Session string // the session holding the membership
	// Partitions and Assignment are what the member uses; members that
	// disagree are reported as mismatches. Both are zero when its record
	// could not be used (see Group.Problems).
	Partitions int
	Assignment string // "rendezvous" or "balanced"
	Drained    bool   // an operator drained it
	Drain      *Op    // that drain: who, since when, why; nil if not drained
}

// Partition is one partition of a group as the backend shows it.
type Partition struct {
	Index int // the partition number
	// Owner is the member the group's assignment gives it to.
	Owner string
	// Holder is the member holding its lease now ("" when vacant or
	// unknown).
	Holder string
	Token  uint64 // the holder's fencing token
	// Held reports whether its lease is held; a held partition whose
	// holder is not its owner is in hand-off.
	Held bool
}

// Vacant reports a partition whose lease nobody holds.
func (p Partition) Vacant() bool { return !p.Held }

// InHandOff reports a partition held by a member other than its owner.
func (p Partition) InHandOff() bool { return p.Held && p.Holder != "" && p.Holder != p.Owner }

// Group is what the backend shows of one partition group.
type Group struct {
	Name       string      // the group's name
	Members    []Member    // the live members
	Partitions []Partition // every partition, in order
	// Mismatches describes members that disagree on the partition count or
	// assignment, or share a member id.
	Mismatches []string
	Disabled   bool // an operator disabled the group
	Disable    *Op  // that disable: who, since when, why; nil if not disabled
	// Problems lists the records of the group skipped because they could
	// not be used: the status records of its partitions, and its members'
	// records (such a member is listed, but does not count in the
	// partition count or the mismatches; a member entry that the backend
	// cannot read at all is not listed).
	Problems []Problem
}

// Groups lists the groups known from status records, sorted by name.
// Records that cannot be used are skipped; each group's Problems lists
// its own, and Snapshot all.
func (a *Admin) Groups(ctx context.Context) ([]Group, error) {
	statuses, problems, err := a.statuses(ctx, "")
	if err != nil {
		return nil, err
	}
	held, _, err := a.held(ctx, "")
	if err != nil {
		return nil, err
	}
	ops, err := a.Ops(ctx)
	if err != nil {
		return nil, err
	}
	return a.groups(ctx, statuses, problems, held, ops)
}

// groups reads the members of each group that statuses name and returns
// the groups, sorted by name; problems are those of the status records.
func (a *Admin) groups(ctx context.Context, statuses []Status, problems []Problem, held map[string]bool, ops Ops) ([]Group, error) {
	byGroup := map[string][]Status{}
	for _, st := range statuses {
		if st.Group != "" {
			byGroup[st.Group] = append(byGroup[st.Group], st)
		}
	}
	out := make([]Group, 0, len(byGroup))
	for _, name := range slices.Sorted(mapsKeys(byGroup)) {
		members, memberProblems, err := a.members(ctx, name)
		if err != nil {
			return nil, err
		}
		out = append(out, buildGroup(name, members, byGroup[name], append(partitionProblems(name, problems), memberProblems...), held, ops))
	}
	return out, nil
}

// partitionProblems returns the problems of status and term log records
// whose key names a partition of group.
func partitionProblems(group string, problems []Problem) []Problem {
	var out []Problem
	for _, p := range problems {
		for _, prefix := range []string{records.StatusPrefix, records.TermsPrefix} {
			rest, ok := strings.CutPrefix(p.Key, prefix+group+".")
			if ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// Group returns one group: its members, the assignment they compute, who
// holds each partition, mismatches, and the records skipped.
func (a *Admin) Group(ctx context.Context, name string) (Group, error) {
	if err := checkName(name); err != nil {
		return Group{}, err
	}
	members, memberProblems, err := a.members(ctx, name)
	if err != nil {
		return Group{}, err
	}
	// The prefix also matches other groups' statuses ("billing.eu.0" for
	// "billing"): only those of this group are its partitions.
	all, problems, err := a.statuses(ctx, name+".")
	if err != nil {
		return Group{}, err
	}
	statuses := slices.DeleteFunc(all, func(st Status) bool { return st.Group != name })
	held, _, err := a.held(ctx, name+".")
	if err != nil {
		return Group{}, err
	}
	ops, err := a.Ops(ctx)
	if err != nil {
		return Group{}, err
	}
	if len(members) == 0 && len(statuses) == 0 {
		return Group{}, fmt.Errorf("%w: group %q", ErrNotFound, name)
	}
	return buildGroup(name, members, statuses, append(partitionProblems(name, problems), memberProblems...), held, ops), nil
}

// buildGroup builds group name from its members, the statuses of its
// partitions, the leases held (nil: unknown) and the operations in force;
// problems are those of its partitions' status records and of the member
// entries the backend skipped.
func buildGroup(name string, members []backend.Member, statuses []Status, problems []Problem, held map[string]bool, ops Ops) Group {
	g := Group{Name: name, Disabled: ops.Disabled[name], Disable: disableOf(ops, name, ""), Problems: slices.Clone(problems)}
	counts := map[string]bool{}
	ids := map[string][]string{}
	partitions, variant := 0, simba.AssignRendezvous
	for _, m := range members {
		ids[m.ID] = append(ids[m.ID], m.Session)
		d, p := parseMember(name, m)
		if p != nil {
			g.Problems = append(g.Problems, *p)
			g.Members = append(g.Members, Member{ID: m.ID, Session: m.Session, Drained: ops.Drained[m.ID], Drain: drainOf(ops, m.ID)})
			continue
		}
		g.Members = append(g.Members, Member{ID: m.ID, Session: m.Session, Partitions: d.P, Assignment: d.A, Drained: ops.Drained[m.ID], Drain: drainOf(ops, m.ID)})
		counts[fmt.Sprintf("%d partitions, %s", d.P, d.A)] = true
		if d.P > partitions {
			partitions = d.P
			if d.A == simba.AssignBalanced.String() {
				variant = simba.AssignBalanced
			}
		}
	}
	g.Problems = sortProblems(g.Problems)
	if len(counts) > 1 {
		g.Mismatches = append(g.Mismatches, "members disagree: "+strings.Join(slices.Sorted(mapsKeys(counts)), " / "))
	}
	var live []string
	for id, ss := range ids {
		if !ops.Drained[id] {
			live = append(live, id)
		}
		if len(ss) > 1 {
			g.Mismatches = append(g.Mismatches, fmt.Sprintf("member id %q used by %d sessions", id, len(ss)))
		}
	}
	slices.Sort(g.Mismatches)
	for _, st := range statuses {
		if st.Partition+1 > partitions {
			partitions = st.Partition + 1
		}
	}
	owners := assign.Owners(name, live, partitions, assign.Variant(variant))
	byPartition := map[int]Status{}
	for _, st := range statuses {
		byPartition[st.Partition] = st
	}
	for p := range partitions {
		part := Partition{Index: p}
		if owners != nil {
			part.Owner = owners[p]
		}
		st, ok := byPartition[p]
		if ok && st.Holder != nil {
			part.Holder, part.Token = st.Holder.Member, st.Holder.Token
		}
		if held != nil {
			part.Held = held[name+"."+strconv.Itoa(p)]
			if !part.Held {
				part.Holder, part.Token = "", 0
			}
		} else {
			part.Held = ok && st.Holder != nil
		}
		g.Partitions = append(g.Partitions, part)
	}
	return g
}

// drainOf returns the drain in force of member, or nil.
func drainOf(ops Ops, member string) *Op {
	if op, ok := ops.Drains[member]; ok {
		return &op
	}
	return nil
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Ops is the set of operations in force.
type Ops struct {
	Disabled map[string]bool // election, job or group names
	Drained  map[string]bool // member ids
	// Disables and Drains are the disables and drains in force, with who
	// asked, when and why (Op.By, Op.At, Op.Reason; see DescribeOp): the
	// same names as Disabled and Drained.
	Disables map[string]Op
	Drains   map[string]Op
	Triggers map[string]Op // by lease, until carried out
	Resigns  map[string]Op // by lease, until carried out
	// Problems lists the operation records skipped because they could not
	// be used, sorted by key; they are not in the maps above.
	Problems []Problem
}

// Ops reads the operations in force. Records that cannot be used are
// skipped and listed in Ops.Problems.
func (a *Admin) Ops(ctx context.Context) (Ops, error) {
	list, problems, err := a.list(ctx, records.OpsPrefix)
	if err != nil {
		return Ops{}, err
	}
	ops := Ops{
		Disabled: map[string]bool{}, Drained: map[string]bool{},
		Disables: map[string]Op{}, Drains: map[string]Op{},
		Triggers: map[string]Op{}, Resigns: map[string]Op{}, Problems: problems,
	}
	for _, r := range list {
		prefix, name, op, p := parseOp(r)
		if p != nil {
			ops.Problems = append(ops.Problems, *p)
			continue
		}
		switch prefix {
		case records.DisabledPrefix:
			ops.Disabled[name] = true
			ops.Disables[name] = op
		case records.DrainPrefix:
			ops.Drained[name] = true
			ops.Drains[name] = op
		case records.TriggerPrefix:
			ops.Triggers[name] = op
		case records.ResignPrefix:
			ops.Resigns[name] = op
		}
	}
	ops.Problems = sortProblems(ops.Problems)
	return ops, nil
}

// opKind is one kind of operation: what it is called in the audit trail,
// where its record is, and which names it takes.
type opKind struct {
	name   string             // records.OpDisable, …
	prefix string             // of the key of its operation record, before the target
	del    bool               // it deletes the record (Enable, Undrain) rather than writes it
	check  func(string) error // checks the target: a name or a member id
}

var (
	opDisable = opKind{records.OpDisable, records.DisabledPrefix, false, checkName}
	opEnable  = opKind{records.OpEnable, records.DisabledPrefix, true, checkName}
	opTrigger = opKind{records.OpTrigger, records.TriggerPrefix, false, checkName}
	opResign  = opKind{records.OpResign, records.ResignPrefix, false, checkName}
	opDrain   = opKind{records.OpDrain, records.DrainPrefix, false, checkMember}
	opUndrain = opKind{records.OpUndrain, records.DrainPrefix, true, checkMember}
)

// Disable stops an election, job or group everywhere: its holder hands off
// and no node contends for it until Enable. Disabling what is disabled
// already replaces who, why and since when. reason says why, for the
// operation record and the audit trail. It returns once the disable is
// recorded, not once the holder has handed off (see "Operations" in the
// package documentation for what is guaranteed when).
//
// name may be a partition's lease, "{group}.{p}": that partition alone
// stops, as a partition that paused itself after failures does (see
// Op.Paused); Enable of the same name resumes it.
func (a *Admin) Disable(ctx context.Context, name, reason string) error {
	return a.writeOp(ctx, opDisable, name, records.Op{Reason: reason}, func(_ context.Context, _ *session, prev Op, had bool) (bool, string) {
		switch {
		case had && prev.Paused:
			return true, "disabled by an operator; was " + DescribeOp(prev)
		case had:
			return false, "disabled again; was disabled " + DescribeOp(prev)
		}
		return true, "disabled; was enabled"
	})
}

// Enable undoes Disable, and resumes a job that paused itself after
// failures (Op.Paused); reason says why, for the audit trail. Like
// Disable, it takes an election, job or group name, or a partition's
// lease; it clears the disable of that name only (a partition whose group
// is disabled stays disabled with its group).
func (a *Admin) Enable(ctx context.Context, name, reason string) error {
	return a.writeOp(ctx, opEnable, name, records.Op{Reason: reason}, func(_ context.Context, _ *session, prev Op, had bool) (bool, string) {
		switch {
		case had && prev.Paused:
			return true, "enabled: resumed; was " + DescribeOp(prev)
		case had:
			return true, "enabled; was disabled " + DescribeOp(prev)
		}
		return false, "enable of what was not disabled: nothing changed"
	})
}

// Trigger asks the holder of a scheduled election or partition to run it
// once as soon as it can; it is TriggerWith without arguments. reason
// says why.
func (a *Admin) Trigger(ctx context.Context, lease, reason string) error {
	return a.TriggerWith(ctx, lease, reason, nil)
}

// TriggerWith asks the holder of a scheduled election or partition to run
// it once as soon as it can, with args: the run finds them in its
// simba.RunInfo (Args), and its history entry keeps them (Run.Args). The
// request stays until a holder carries it out; a request pending still is
// replaced, with its arguments. args must pass CheckArgs (the error wraps
// ErrInvalidArgs, and nothing is written); nil or empty args are none.
// reason says why. The audit entry's Change names the arguments.
func (a *Admin) TriggerWith(ctx context.Context, lease, reason string, args map[string]string) error {
	if err := CheckArgs(args); err != nil {
		return err
	}
	if len(args) == 0 {
		args = nil
	}
	return a.writeOp(ctx, opTrigger, lease, records.Op{Reason: reason, Args: maps.Clone(args)}, func(_ context.Context, _ *session, prev Op, had bool) (bool, string) {
		change := "trigger requested" + argsSuffix(args)
		if had {
			return !maps.Equal(prev.Args, args), change + "; one requested " + DescribeOp(prev) + " was pending still"
		}
		return true, change
	})
}

// argsSuffix names a trigger's arguments after what it says: " with
// arguments day=2025-03-04", or "" for none.
func argsSuffix(args map[string]string) string {
	if len(args) == 0 {
		return ""
	}
	return " with arguments " + FormatArgs(args)
}

// Resign asks the holder of lease to hand off gracefully and sit out one
// lease term, so that another member takes over with a higher token. With
// token 0 it applies to whichever term holds the lease when a node sees
// it; otherwise only to the term with that token. The lease key is never
// deleted: that would break the one-valid-term guarantee. reason says why.
func (a *Admin) Resign(ctx context.Context, lease string, token uint64, reason string) error {
	return a.writeOp(ctx, opResign, lease, records.Op{Token: token, Reason: reason}, func(ctx context.Context, w *session, prev Op, had bool) (bool, string) {
		holder := a.holderOf(ctx, w, lease)
		var change string
		switch {
		case token != 0 && holder != nil && holder.Token == token:
			change = fmt.Sprintf("resign of token %d held by %s", token, holder.Member)
		case token != 0:
			change = fmt.Sprintf("resign of token %d", token)
		case holder != nil:
			change = fmt.Sprintf("resign of whichever term holds it (token %d held by %s when asked)", holder.Token, holder.Member)
		default:
			change = "resign of whichever term holds it (no holder in the status when asked)"
		}
		if had && prev.Token == token {
			return false, change + "; the same request was pending still"
		}
		return true, change
	})
}

// Drain makes a member hand off everything it holds and stop contending,
// until Undrain. reason says why.
func (a *Admin) Drain(ctx context.Context, member, reason string) error {
	return a.writeOp(ctx, opDrain, member, records.Op{Reason: reason}, func(ctx context.Context, w *session, prev Op, had bool) (bool, string) {
		change := fmt.Sprintf("drain of %s, who held %s", member, a.heldBy(ctx, w, member))
		if had {
			return false, change + "; was drained " + DescribeOp(prev) + " already"
		}
		return true, change
	})
}

// Undrain undoes Drain; reason says why, for the audit trail.
func (a *Admin) Undrain(ctx context.Context, member, reason string) error {
	return a.writeOp(ctx, opUndrain, member, records.Op{Reason: reason}, func(_ context.Context, _ *session, prev Op, had bool) (bool, string) {
		if had {
			return true, "undrained; was drained " + DescribeOp(prev)
		}
		return false, "undrain of a member that was not drained: nothing changed"
	})
}

// writeOp checks target and performs the operation of kind on it (see
// operate): it writes the operation record op (its token, reason and
// arguments; By and At are the admin's), or deletes the record (kind.del:
// op's reason is that of the audit entry). Before the write, describe
// says, from the record the write replaces (had: there was one) and what
// else it reads through w, whether the write changes what is in force and
// how, for the audit trail.
func (a *Admin) writeOp(ctx context.Context, kind opKind, target string, op records.Op,
	describe func(ctx context.Context, w *session, prev Op, had bool) (changed bool, change string)) error {
	if err := kind.check(target); err != nil {
		return err
	}
	key := kind.prefix + target
	return a.operate(ctx, kind.name, target, op.Token, op.Reason, func(ctx context.Context, w *session, at time.Time) (bool, string, error) {
		prev, had := a.prevOp(ctx, w, key)
		changed, change := describe(ctx, w, prev, had)
		var err error
		if kind.del {
			err = a.del(ctx, w, key)
		} else {
			err = a.put(ctx, w, key, op, at)
		}
		if err != nil {
			return false, "", err
		}
		return changed, change, nil
	})
}

// DescribeOp says who asked for op, since when and why, for a line of
// text: "by alice@h1 since 2025-03-04 16:02:00 UTC: maintenance". A
// disable that a job wrote when it paused itself (Op.Paused) begins with
// "paused after failures, " ("paused after failures, by node-1 since
// ...: 5 failed runs in a row"); a trigger with arguments ends with them
// (" with arguments day=2025-03-04", as FormatArgs writes them).
func DescribeOp(op Op) string {
	by := op.By
	if by == "" {
		by = "someone unnamed"
	}
	out := "by " + by
	if op.Paused {
		out = "paused after failures, " + out
	}
	if !op.At.IsZero() {
		out += " since " + op.At.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	if op.Reason != "" {
		out += ": " + op.Reason
	}
	return out + argsSuffix(op.Args)
}

// put writes an operation record at key, by the admin's operator at at.
func (a *Admin) put(ctx context.Context, w *session, key string, op records.Op, at time.Time) error {
	op.By, op.At = a.by, at
	_, err := w.rec.PutRecord(ctx, key, records.Encode(op), backend.Condition{})
	return err
}

// del deletes the operation record at key.
func (a *Admin) del(ctx context.Context, w *session, key string) error {
	return w.rec.DeleteRecord(ctx, key, backend.Condition{})
}

// prevOp reads the operation record at key before an operation replaces
// or deletes it, for the audit trail: had is false when there is none.
// A record that cannot be read as an operation counts as one, unnamed.
func (a *Admin) prevOp(ctx context.Context, w *session, key string) (op Op, had bool) {
	r, err := w.rec.GetRecord(ctx, key)
	switch {
	case errors.Is(err, backend.ErrNoRecord):
		return Op{}, false
	case err != nil:
		return Op{By: "(unreadable record)"}, true
	}
	var rec records.Op
	if records.Decode(r.Value, &rec) != nil {
		return Op{By: "(unreadable record)"}, true
	}
	return opOf(rec), true
}

// holderOf returns the holder of lease as its status record names it, or
// nil.
func (a *Admin) holderOf(ctx context.Context, w *session, lease string) *Holder {
	r, err := w.rec.GetRecord(ctx, records.StatusKey(lease))
	if err != nil {
		return nil
	}
	st, p := parseStatus(r)
	if p != nil {
		return nil
	}
	return st.Holder
}

// heldBy says how many leases member holds by the status records, for the
// audit trail of a drain.
func (a *Admin) heldBy(ctx context.Context, w *session, member string) string {
	list, err := w.rec.ListRecords(ctx, records.StatusPrefix)
	if err != nil {
		return "an unknown number of leases (the status records could not be read)"
	}
	n := 0
	for _, r := range list {
		if st, p := parseStatus(r); p == nil && st.Holder != nil && st.Holder.Member == member {
			n++
		}
	}
	if n == 1 {
		return "1 lease"
	}
	return fmt.Sprintf("%d leases", n)
}

// checkMember checks a member id.
func checkMember(member string) error {
	if !validMemberID(member) {
		return fmt.Errorf("simba/admin: invalid member id %q", member)
	}
	return nil
}

// checkName checks an election, job or group name.
func checkName(name string) error {
	if err := backend.CheckName(name); err != nil {
		return fmt.Errorf("simba/admin: %w", err)
	}
	return nil
}
