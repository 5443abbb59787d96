package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/backend/zookeeper"
)

// snapshot is everything the backend shows, read once for a command.
type snapshot struct {
	now       time.Time
	elections []admin.Election          // plain elections, sorted by name
	leases    map[string]admin.Election // every election and partition, by lease name
	groups    []admin.Group             // sorted by name
	ops       admin.Ops
}

// readSnapshot reads the elections, groups and operations in force, in
// one admin.Snapshot; the records it skipped are added to the
// invocation's problems.
func (inv *invocation) readSnapshot(ctx context.Context) (*snapshot, error) {
	a, err := inv.admin(ctx)
	if err != nil {
		return nil, err
	}
	snap, err := a.Snapshot(ctx)
	if err != nil {
		return nil, inv.backendErr(ctx, "reading the elections, groups and operations", err)
	}
	inv.addProblems(snap.Problems)
	if emptySnapshot(snap) {
		inv.hintDefaultPrefix(ctx)
	}
	s := &snapshot{now: time.Now(), leases: map[string]admin.Election{}, groups: snap.Groups, ops: snap.Ops}
	for _, e := range snap.Elections {
		s.leases[e.Name] = e
		if !s.isPartition(e) {
			s.elections = append(s.elections, e)
		}
	}
	return s, nil
}

// isPartition reports whether e is a partition of a group: its status says
// so, or its name is "{group}.{p}" of a known group.
func (s *snapshot) isPartition(e admin.Election) bool {
	if e.Status.Group != "" {
		return true
	}
	i := strings.LastIndexByte(e.Name, '.')
	if i < 0 {
		return false
	}
	if _, err := strconv.Atoi(e.Name[i+1:]); err != nil {
		return false
	}
	return s.group(e.Name[:i]) != nil
}

func (s *snapshot) group(name string) *admin.Group {
	for i := range s.groups {
		if s.groups[i].Name == name {
			return &s.groups[i]
		}
	}
	return nil
}

// partitionLease is the lease name of partition p of group g.
func partitionLease(g string, p int) string { return g + "." + strconv.Itoa(p) }

// partitions returns the leases of g's partitions that the backend shows.
func (s *snapshot) partitions(g *admin.Group) []admin.Election {
	var out []admin.Election
	for _, p := range g.Partitions {
		if e, ok := s.leases[partitionLease(g.Name, p.Index)]; ok {
			out = append(out, e)
		}
	}
	return out
}

// Kinds of names.
const (
	kindElection  = "election"
	kindPartition = "partition"
	kindGroup     = "group"
)

// found is what a name resolves to.
type found struct {
	kind     string
	election admin.Election // for an election or a partition
	group    *admin.Group   // for a group, or a partition's group
}

// scheduled reports whether a found election or group runs on a schedule:
// whether it is a job.
func (s *snapshot) scheduled(f found) bool {
	if f.kind != kindGroup {
		return f.election.Status.Schedule != ""
	}
	for _, e := range s.partitions(f.group) {
		if e.Status.Schedule != "" {
			return true
		}
	}
	return false
}

// find resolves an election, partition or group name.
func (s *snapshot) find(name string) (found, bool) {
	if g := s.group(name); g != nil {
		return found{kind: kindGroup, group: g}, true
	}
	e, ok := s.leases[name]
	if !ok {
		return found{}, false
	}
	if s.isPartition(e) {
		g := e.Status.Group
		if g == "" {
			g = name[:strings.LastIndexByte(name, '.')]
		}
		return found{kind: kindPartition, election: e, group: s.group(g)}, true
	}
	return found{kind: kindElection, election: e}, true
}

// notFoundError is a name the backend knows nothing of: exit status 1.
type notFoundError struct {
	what  string // "job", "election, job or group", "member"
	name  string
	known []string
	hint  string // what to do instead, if anything: "pass --force to ..."
}

func (e *notFoundError) Error() string {
	msg := fmt.Sprintf("no such %s %q", e.what, e.name)
	if len(e.known) == 0 {
		msg += " (the backend shows none: are the nodes running against this backend and prefix?)"
	} else {
		const most = 12
		known := e.known
		if len(known) > most {
			known = append(slices.Clip(known[:most]), "…")
		}
		msg += " (known: " + strings.Join(known, ", ") + ")"
	}
	if e.hint != "" {
		msg += "; " + e.hint
	}
	return msg
}

// names lists the elections and groups, for error messages.
func (s *snapshot) names() []string {
	var out []string
	for _, e := range s.elections {
		out = append(out, e.Name)
	}
	for _, g := range s.groups {
		out = append(out, g.Name)
	}
	slices.Sort(out)
	return out
}

// jobNames lists the scheduled elections and groups.
func (s *snapshot) jobNames() []string {
	var out []string
	for _, j := range s.jobs() {
		out = append(out, j.Name)
	}
	return out
}

// members lists the member ids the backend shows: group members and the
// holders of elections.
func (s *snapshot) members() []string {
	ids, _ := s.presence()
	return slices.Sorted(maps.Keys(ids))
}

// sessions counts the distinct sessions seen holding a lease or a
// membership.
func (s *snapshot) sessions() int {
	_, sessions := s.presence()
	return len(sessions)
}

// presence returns the member ids and the sessions seen holding a lease or
// a group membership.
func (s *snapshot) presence() (ids, sessions map[string]bool) {
	ids, sessions = map[string]bool{}, map[string]bool{}
	for _, g := range s.groups {
		for _, m := range g.Members {
			ids[m.ID], sessions[m.Session] = true, true
		}
	}
	for _, e := range s.leases {
		if h := e.Status.Holder; e.Held && h != nil {
			ids[h.Member], sessions[h.Session] = true, true
		}
	}
	return ids, sessions
}

// holder returns the holder of e as far as the backend shows it: nil when
// the lease is not held, or held by a holder that has not written its
// status yet.
func holder(e admin.Election) *admin.Holder {
	if !e.Held {
		return nil
	}
	return e.Status.Holder
}

// emptySnapshot reports a snapshot that shows nothing at all: no
// election, group or operation, nor a record skipped.
func emptySnapshot(s admin.Snapshot) bool {
	o := s.Ops
	return len(s.Elections) == 0 && len(s.Groups) == 0 && len(s.Problems) == 0 &&
		len(o.Disabled) == 0 && len(o.Drained) == 0 && len(o.Triggers) == 0 && len(o.Resigns) == 0
}

// hintDefaultPrefix, for a --prefix (or $SIMBA_PREFIX) under which the
// backend shows nothing, reads the backend's default prefix once and, when
// that holds something, says so on standard error: a prefix mistyped, or
// given to a command when the nodes use the default, is the likeliest
// reason for an empty result. It costs one more read, and only when the
// result is empty; any failure of that read is ignored.
func (inv *invocation) hintDefaultPrefix(ctx context.Context) {
	if inv.cli.hinted || inv.t.prefix == "" {
		return
	}
	inv.cli.hinted = true
	def := defaultPrefix(inv.t.kind)
	if def == "" || sameKeyPrefix(inv.t.prefix, def) || inv.t.kind == "mysql" && tablePrefixOf(inv.t.prefix) == def {
		return
	}
	t := inv.t
	t.prefix = ""
	b, err := inv.open(t)
	if err != nil {
		return
	}
	defer b.Close()
	a, err := admin.Open(ctx, b, admin.WithOperator(operator()))
	if err != nil {
		return
	}
	defer a.Close()
	snap, err := a.Snapshot(ctx)
	if err != nil || emptySnapshot(snap) {
		return
	}
	var elections, groups int
	for _, e := range snap.Elections {
		if e.Status.Group == "" {
			elections++
		}
	}
	groups = len(snap.Groups)
	var parts []string
	if elections > 0 {
		parts = append(parts, fmt.Sprintf("%d election%s", elections, plural(elections)))
	}
	if groups > 0 {
		parts = append(parts, fmt.Sprintf("%d group%s", groups, plural(groups)))
	}
	if len(parts) == 0 {
		parts = append(parts, "operation records")
	}
	flag := "--prefix"
	if !inv.explicit["prefix"] {
		flag = "$" + envPrefix
	}
	fmt.Fprintf(inv.stderr, "simba: hint: nothing under %s; the default prefix %s holds %s: drop %s?\n",
		inv.t.prefix, def, strings.Join(parts, " and "), flag)
}

// defaultPrefix is the key prefix, ZooKeeper root, PostgreSQL schema or
// MySQL table prefix that a backend of kind uses when none is given.
func defaultPrefix(kind string) string {
	switch kind {
	case "etcd":
		return etcd.DefaultPrefix
	case "zookeeper":
		return zookeeper.DefaultRoot
	case "postgres":
		return defaultSchema
	case "mysql":
		return defaultTablePrefix
	}
	return ""
}

// sameKeyPrefix reports whether two prefixes name the same place, with or
// without their slashes at either end.
func sameKeyPrefix(a, b string) bool {
	return strings.Trim(a, "/") == strings.Trim(b, "/")
}
