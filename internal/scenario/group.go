package scenario

import (
	"context"
	"errors"
	"fmt"
	"github.com/simba-go/simba/internal/assign"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/records"
)

// The group scenarios of the root package's group_test.go, written once
// and run in real time on every backend: memory (the root package's
// group_memory_test.go), etcd, PostgreSQL and ZooKeeper (tests/core's
// group_etcd_test.go, group_postgres_test.go, group_zk_test.go). Each node is a
// client with a backend of its own, reaching the server through a link of
// its own that a scenario can cut and heal. They check what the memory
// tests of group_test.go check, except timings, and above all that no
// partition ever had two valid terms (internal/check, on the terms the
// tasks saw, with each term's end its deadline after revocation; and, on a
// backend that records its grants, against those).
//
// A backend added later plugs in with a [GroupBackend] and a Test function
// of its own calling [RunGroupScenarios]. The backend-specific parts (a
// server, its nodes, their links) stay with that test: this package
// imports no real server's helper.
//
// A session lost to a slow machine (a renewal late past the deadline)
// moves partitions that the scenario did not move; the checks of exactly
// which partitions moved are then skipped, with a log line, and the safety
// checks still run.

// GroupWait bounds every wait for a group to converge: generous, for a
// shared machine under the race detector.
const GroupWait = 30 * time.Second

// GroupBackend is what the scenarios need of a backend.
type GroupBackend struct {
	// TTL is the session TTL the clients ask for; the backend must grant it
	// as asked.
	TTL time.Duration
	// Cluster prepares one scenario: a server (or a prefix or root of its
	// own on a shared one) that every node of the scenario reaches. It is
	// called once per scenario, before any node is started, so that the
	// clean-ups it registers run after the nodes' have closed them.
	Cluster func(t *testing.T) GroupCluster
}

// GroupCluster makes the nodes of one scenario.
type GroupCluster struct {
	// Node returns the backend node name uses and the link it reaches the
	// server through (nil if it has none a scenario can cut). Both are
	// closed when the test ends, after the node's client: the clean-ups
	// are registered before Node returns.
	Node func(t *testing.T, name string) (backend.Backend, GroupLink)
	// Grants, if not nil, returns the server's record of every grant, for
	// check.AgainstGrants once every node is closed.
	Grants func() []check.Grant
}

// GroupLink is a node's link to the server, which a scenario cuts (every
// byte or request held, as a partition or a frozen host would) and heals.
type GroupLink interface {
	// Cut holds every byte or request from now on.
	Cut()
	// Heal delivers what was held and lets everything through again.
	Heal()
}

// ProxyLink is a link through an internal/faultproxy proxy: a node that
// reaches its server at the proxy's Addr has a link a scenario can cut.
type ProxyLink struct{ *faultproxy.Proxy }

// Cut blackholes the proxy.
func (l ProxyLink) Cut() { l.Blackhole() }

// Heal heals the proxy.
func (l ProxyLink) Heal() { l.Proxy.Heal() }

// NewProxyLink starts a proxy to target, closed when the test ends.
func NewProxyLink(t *testing.T, target string) ProxyLink {
	t.Helper()
	px, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return ProxyLink{px}
}

// RunGroupScenarios runs every group scenario on gb, in parallel, each as
// a subtest of t; it skips them with -short.
func RunGroupScenarios(t *testing.T, gb GroupBackend) {
	if testing.Short() {
		t.Skip("real time on a real server: skipped with -short")
	}
	for _, sc := range []struct {
		name string
		run  func(*testing.T, GroupBackend)
	}{
		{"JoinAndGracefulLeave", testGroupJoinAndLeave},
		{"CrashCutOff", testGroupCrashCutOff},
		{"CrashWithoutRelease", testGroupCrashWithoutRelease},
		{"DuplicateMemberID", testGroupDuplicateMemberID},
		{"MismatchedCounts", testGroupMismatchedCounts},
		{"StopDuringHandOff", testGroupStopDuringHandOff},
	} {
		t.Run(sc.name, func(t *testing.T) { t.Parallel(); sc.run(t, gb) })
	}
}

// GroupScenario is one scenario: its cluster, the terms the tasks saw and
// the partitions they run.
type GroupScenario struct {
	t       *testing.T
	cluster GroupCluster
	h       *History
	// Runs records which nodes run each partition.
	Runs *RunTracker
	ttl  time.Duration
	// logs are the partitions' term logs, as checkTerms read them.
	logs map[string][]records.Term
}

// NewGroupScenario prepares a scenario of t on gb: it calls gb.Cluster
// once, before any node is started.
func NewGroupScenario(t *testing.T, gb GroupBackend) *GroupScenario {
	return &GroupScenario{t: t, cluster: gb.Cluster(t), h: NewHistory(), Runs: newRunTracker(), ttl: gb.TTL}
}

// GroupNode is one client of a scenario.
type GroupNode struct {
	Name    string           // its name, which its logs are tagged with
	Link    GroupLink        // its link to the server; nil if it has none
	Backend backend.Backend  // its own backend
	Client  *simba.Client    // its client, on Backend
	Task    *simba.GroupTask // its group task, once it joined
	// abandoned: its backend was closed under it.
	abandoned bool
	member    string // its member id: name unless given
}

// Node starts a client called name (also its member id) on a backend and
// a link of its own, and waits for its session. Everything is closed when
// the test ends, the client first. If the test fails early, the link is
// healed before the client is closed, and Close is given GroupWait: a
// client cut off from the server by a fault left in place would otherwise
// wait for its session's deadline, for ever if that never ends it.
func (g *GroupScenario) Node(name string, opts ...simba.Option) *GroupNode {
	t := g.t
	t.Helper()
	b, link := g.cluster.Node(t, name)
	opts = append([]simba.Option{
		simba.WithTTL(g.ttl), simba.WithMemberID(name),
		simba.WithEventHandler(g.h.Event), simba.WithLogger(Logger(t, name)),
	}, opts...)
	c, err := simba.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if link != nil {
			link.Heal()
		}
		if err, late := await.Within(await.Returned(c.Close), GroupWait, "%s: Close did not return", name); late != nil {
			t.Error(late)
		} else if err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), GroupWait)
	defer cancel()
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("%s: no session: %v", name, err)
	}
	return &GroupNode{Name: name, member: name, Link: link, Backend: b, Client: c}
}

// Join starts node n's group task with the given partition count, running
// every partition it is assigned until its term ends.
func (g *GroupScenario) Join(n *GroupNode, partitions int, opts ...simba.GroupOption) *GroupNode {
	g.t.Helper()
	task, err := n.Client.Group(Group, partitions, opts...).RunWhileLeader(g.Runs.task(n.Name, g.h, nil))
	if err != nil {
		g.t.Fatal(err)
	}
	n.Task = task
	return n
}

// Member starts a node and joins it.
func (g *GroupScenario) Member(name string, partitions int) *GroupNode {
	g.t.Helper()
	return g.Join(g.Node(name), partitions)
}

// Cut cuts n's link; n must have one.
func (g *GroupScenario) Cut(n *GroupNode) {
	g.t.Helper()
	if n.Link == nil {
		g.t.Fatalf("%s has no link to cut", n.Name)
	}
	n.Link.Cut()
}

// Await waits until every partition runs on the owner want gives it, and
// nowhere else; it returns how long that took.
func (g *GroupScenario) Await(want []string, what string) time.Duration {
	g.t.Helper()
	return g.Runs.Await(g.t, func(owners []string) bool { return slices.Equal(owners[:len(want)], want) }, what, GroupWait)
}

// AwaitViews waits until each of nodes acts on the view that gives it its
// share of want (its task's Partitions), not only runs it: a member whose
// view is behind still contends for partitions it no longer owns, and, its
// candidacies queued behind their holders, takes one for a moment when its
// holder hands it to a third member.
func (g *GroupScenario) AwaitViews(want []string, what string, nodes ...*GroupNode) {
	g.t.Helper()
	deadline := time.Now().Add(GroupWait)
	for {
		var behind []string
		for _, n := range nodes {
			if got, share := n.Task.Partitions(), Indexes(want, n.Name); !slices.Equal(got, share) {
				behind = append(behind, fmt.Sprintf("%s assigned %v, want %v", n.Name, got, share))
			}
		}
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%s: not within %v: %s", what, GroupWait, strings.Join(behind, "; "))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SessionsLost returns the sessions lost so far, by any node.
func (g *GroupScenario) SessionsLost() []simba.SessionLost { return EventsOf[simba.SessionLost](g.h) }

// Steady reports whether no session was lost: only then do partitions move
// exactly as the scenario moves them.
func (g *GroupScenario) Steady() bool {
	if lost := g.SessionsLost(); len(lost) > 0 {
		g.t.Logf("%d sessions lost on a slow machine (first: %s, %v, %v): which partitions moved is not checked", len(lost), lost[0].Session, lost[0].Reason, lost[0].Err)
		return false
	}
	return true
}

// CheckTerms closes the nodes and runs the invariant checkers over every
// term the tasks saw: at most one valid term per partition at any instant,
// tokens increasing; and, if the backend records its grants, no term valid
// past its grant.
func (g *GroupScenario) CheckTerms(nodes ...*GroupNode) {
	t := g.t
	t.Helper()
	for _, n := range nodes {
		if err := await.For(t, await.Returned(n.Client.Close), GroupWait, "%s: Close did not return", n.Name); err != nil {
			t.Errorf("%s: Close: %v", n.Name, err)
		}
	}
	var terms []check.Term
	for _, term := range g.h.Terms() {
		select {
		case <-term.Revoked():
		default:
			t.Errorf("term %d of %q not revoked after Close", term.Token(), term.Name())
		}
		terms = append(terms, check.Term{Name: term.Name(), Token: term.Token(), Start: term.Start(), End: term.Deadline()})
	}
	if len(terms) == 0 {
		t.Error("no term seen")
	}
	g.checkTermLogs(nodes)
	for _, err := range check.Terms(terms) {
		t.Error(err)
	}
	if g.cluster.Grants != nil {
		_, errs := check.AgainstGrants(terms, g.cluster.Grants())
		for _, err := range errs {
			t.Error(err)
		}
	}
}

// testGroupJoinAndLeave: a join moves exactly the partitions the new
// member gains, one new term each; a graceful leave moves exactly the
// partitions the member had.
func testGroupJoinAndLeave(t *testing.T, gb GroupBackend) {
	g := NewGroupScenario(t, gb)
	const P = 16
	a, c := g.Member("a", P), g.Member("c", P)
	g.Await(Assignment(P, "a", "c"), "a and c run their partitions")
	g.AwaitViews(Assignment(P, "a", "c"), "a and c act on the view of both", a, c)
	before := g.Runs.Owners(P)
	terms := len(g.h.Terms())

	joined := time.Now()
	d := g.Member("d", P)
	took := g.Await(Assignment(P, "a", "c", "d"), "after d joined")
	after := g.Runs.Owners(P)
	gained := Indexes(after, "d")
	t.Logf("join: %d partitions moved to d in %v", len(gained), took)
	if g.Steady() {
		for _, p := range Moved(before, after) {
			if after[p] != "d" {
				t.Errorf("partition %d moved from %s to %s, not to the new member", p, before[p], after[p])
			}
		}
		if n := len(g.h.Terms()) - terms; n != len(gained) {
			t.Errorf("%d new terms for %d partitions moved", n, len(gained))
		}
	}
	if got := d.Task.Partitions(); !slices.Equal(got, gained) {
		t.Errorf("d.Partitions() = %v, want %v", got, gained)
	}

	joinBefore := before
	before = after
	left := time.Now()
	c.Task.Stop()
	await.For(t, c.Task.Done(), GroupWait, "c's group Stop did not complete")
	took = g.Await(Assignment(P, "a", "d"), "after c left")
	after = g.Runs.Owners(P)
	leaveBefore, leaveAfter := before, after
	t.Logf("leave: %d partitions moved from c in %v", len(Moved(before, after)), took)
	if g.Steady() {
		for _, p := range Moved(before, after) {
			if before[p] != "c" {
				t.Errorf("partition %d moved from %s, a remaining member", p, before[p])
			}
		}
	}
	if views := EventsOf[simba.ViewChanged](g.h); len(views) == 0 {
		t.Error("no ViewChanged event")
	}
	g.CheckTerms(a, c, d)
	if g.Steady() {
		// The term log says how each move ended the term before it.
		for _, p := range gained {
			g.checkEnded(p, joinBefore[p], joined, records.EndedMoved)
		}
		for _, p := range Moved(leaveBefore, leaveAfter) {
			g.checkEnded(p, "c", left, simba.RevokeStopped.String())
		}
	}
}

// testGroupCrashCutOff: a member whose link is cut (every byte or request
// held, as a partition or a frozen host would) loses its partitions: its
// terms end by its own clock, the others take over once the server expires
// its session, never while its terms are valid. When the link heals, it
// learns that its session is gone, opens a new one, and gets its
// partitions back.
func testGroupCrashCutOff(t *testing.T, gb GroupBackend) {
	g := NewGroupScenario(t, gb)
	const P = 12
	a, b, c := g.Member("a", P), g.Member("b", P), g.Member("c", P)
	g.Await(Assignment(P, "a", "b", "c"), "a, b and c run their partitions")

	old := b.Client.SessionID()
	cut := time.Now()
	g.Cut(b)
	took := g.Await(Assignment(P, "a", "c"), "after b's link was cut")
	t.Logf("b cut off: its %d partitions ran on a and c again after %v (TTL %v)", len(Indexes(Assignment(P, "a", "b", "c"), "b")), took, g.ttl)
	for _, term := range g.h.Terms() {
		if g.h.Owner(term) == "b" && term.Valid() {
			t.Errorf("b's term %d of %q still valid after a and c took over", term.Token(), term.Name())
		}
	}

	b.Link.Heal()
	took = g.Await(Assignment(P, "a", "b", "c"), "after b's link healed")
	t.Logf("b healed: back to the full assignment after %v", took)
	if !slices.ContainsFunc(g.SessionsLost(), func(e simba.SessionLost) bool { return e.Session == old }) {
		t.Errorf("b never reported its session %s lost", old)
	}
	if b.Client.SessionID() == old {
		t.Errorf("b still on session %s", old)
	}
	g.CheckTerms(a, b, c)
	for _, p := range Indexes(Assignment(P, "a", "b", "c"), "b") {
		g.checkEnded(p, "b", cut, records.EndedFailOver)
	}
}

// testGroupCrashWithoutRelease: a member whose backend goes away without
// ending its session (Backend.Close abandons it, as a killed process
// would: nothing is released on the server, and the client cannot open
// another) loses its partitions once the server expires the session.
func testGroupCrashWithoutRelease(t *testing.T, gb GroupBackend) {
	g := NewGroupScenario(t, gb)
	const P = 12
	a, b, c := g.Member("a", P), g.Member("b", P), g.Member("c", P)
	g.Await(Assignment(P, "a", "b", "c"), "a, b and c run their partitions")

	crashed := time.Now()
	b.abandoned = true
	if err := b.Backend.Close(); err != nil {
		t.Fatal(err)
	}
	took := g.Await(Assignment(P, "a", "c"), "after b's backend was closed")
	t.Logf("b abandoned its session: its partitions ran on a and c again after %v (TTL %v)", took, g.ttl)
	for _, term := range g.h.Terms() {
		if g.h.Owner(term) == "b" && term.Valid() {
			t.Errorf("b's term %d of %q still valid after a and c took over", term.Token(), term.Name())
		}
	}
	g.CheckTerms(a, b, c)
	for _, p := range Indexes(Assignment(P, "a", "b", "c"), "b") {
		g.checkEnded(p, "b", crashed, records.EndedFailOver)
	}
}

// testGroupDuplicateMemberID: two live sessions with one member id are
// reported, and every partition is still held by one of them at a time.
func testGroupDuplicateMemberID(t *testing.T, gb GroupBackend) {
	g := NewGroupScenario(t, gb)
	const P = 8
	x := g.Member("x", P)
	x2 := g.Node("x2", simba.WithMemberID("x"))
	x2.member = "x"
	g.Join(x2, P)
	g.Runs.Await(t, func(owners []string) bool {
		for _, o := range owners[:P] {
			if o != "x" && o != "x2" {
				return false
			}
		}
		return true
	}, "every partition runs on x or x2", GroupWait)
	awaitEvent(t, g.h, "a duplicate member id reported", func(m simba.GroupMismatch) bool {
		return strings.Contains(m.Detail, "used by 2 live sessions")
	})
	g.CheckTerms(x, x2)
}

// testGroupMismatchedCounts: members with different partition counts
// report each other, and the vacancy net fills the partitions nobody's
// view gives them to.
func testGroupMismatchedCounts(t *testing.T, gb GroupBackend) {
	g := NewGroupScenario(t, gb)
	a := g.Member("a", 16)
	z := g.Member("z", 8) // misconfigured
	for _, who := range []string{"a", "z"} {
		awaitEvent(t, g.h, "the mismatch of "+who+" reported", func(m simba.GroupMismatch) bool {
			return m.Member == who && strings.Contains(m.Detail, "partitions")
		})
	}
	// a's view gives some of 8..15 to z, which never contends for them;
	// after the grace (2×TTL) a stands in.
	took := g.Runs.Await(t, func(owners []string) bool {
		return !slices.Contains(owners[:16], "") && !slices.Contains(owners[:16], "*")
	}, "every partition runs somewhere", GroupWait)
	t.Logf("every partition ran after %v", took)
	g.CheckTerms(a, z)
}

// testGroupStopDuringHandOff: a's tasks ignore cancellation; b joins, so a
// hands partitions off, slowly (until each term's capped deadline). A
// Stop meanwhile completes only when those hand-offs are done, and then
// none of a's terms is valid, though its tasks still run.
func testGroupStopDuringHandOff(t *testing.T, gb GroupBackend) {
	g := NewGroupScenario(t, gb)
	const P = 8
	hold := make(chan struct{})
	defer func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
	}()
	a := g.Node("a")
	task, err := a.Client.Group(Group, P).RunWhileLeader(g.Runs.task("a", g.h, hold))
	if err != nil {
		t.Fatal(err)
	}
	a.Task = task
	g.Await(Assignment(P, "a"), "a runs every partition")

	joined := time.Now()
	b := g.Member("b", P)
	deadline := time.Now().Add(GroupWait)
	for len(a.Task.Partitions()) == P {
		if time.Now().After(deadline) {
			t.Fatal("a never saw b join")
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.Task.Stop()
	for _, term := range g.h.Terms() {
		if g.h.Owner(term) != "a" {
			continue
		}
		select {
		case <-g.h.HandedOff(term):
		case <-time.After(GroupWait):
			t.Fatalf("a's %v not handed off within %v of the Stop", term, GroupWait)
		}
	}
	t.Logf("a's hand-offs completed %v after b joined (TTL %v)", time.Since(joined), g.ttl)
	select {
	case <-a.Task.Done():
		t.Error("a's Done closed while its tasks still run: Done waits for every function")
	default:
	}
	for _, term := range g.h.Terms() {
		if g.h.Owner(term) == "a" && term.Valid() {
			t.Errorf("a's term %d of %q valid after Stop completed", term.Token(), term.Name())
		}
	}
	close(hold)
	select {
	case <-a.Task.Done():
	case <-time.After(GroupWait):
		t.Fatal("a's Done not closed after its tasks returned")
	}
	g.Await(Assignment(P, "b"), "b runs every partition")
	g.CheckTerms(a, b)
}

// awaitEvent waits until an event of type E satisfying ok was published.
func awaitEvent[E simba.Event](t *testing.T, h *History, what string, ok func(E) bool) {
	t.Helper()
	deadline := time.Now().Add(GroupWait)
	for {
		if slices.ContainsFunc(EventsOf[E](h), ok) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, GroupWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RunTracker records which nodes run each partition.
type RunTracker struct {
	mu      sync.Mutex
	running map[int]map[string]int // partition → node → runs
	changed chan struct{}          // a hint: something changed
}

func newRunTracker() *RunTracker {
	return &RunTracker{running: map[int]map[string]int{}, changed: make(chan struct{}, 1)}
}

// task returns a group task for node that records its term and runs until
// the term ends; then, if hold is not nil, it also waits for hold to be
// closed (a task that ignores cancellation).
func (r *RunTracker) task(node string, h *History, hold <-chan struct{}) func(context.Context, *simba.Term, int) error {
	return func(ctx context.Context, term *simba.Term, p int) error {
		h.SawTerm(node, term)
		r.add(p, node, 1)
		defer r.add(p, node, -1)
		<-ctx.Done()
		if hold != nil {
			<-hold
		}
		return nil
	}
}

func (r *RunTracker) add(p int, node string, d int) {
	r.mu.Lock()
	if r.running[p] == nil {
		r.running[p] = map[string]int{}
	}
	r.running[p][node] += d
	if r.running[p][node] == 0 {
		delete(r.running[p], node)
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// Owners returns, for each of the first partitions partitions, the node
// running it: "" if none, "*" if several.
func (r *RunTracker) Owners(partitions int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, partitions)
	for p := range out {
		switch nodes := r.running[p]; len(nodes) {
		case 0:
		case 1:
			for n := range nodes {
				out[p] = n
			}
		default:
			out[p] = "*"
		}
	}
	return out
}

// Await waits until ok holds for the owners of the first 1,024 partitions
// and returns how long that took.
func (r *RunTracker) Await(t testing.TB, ok func([]string) bool, what string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		owners := r.Owners(1024)
		if ok(owners) {
			return time.Since(start)
		}
		select {
		case <-r.changed:
		case <-timer.C:
			t.Fatalf("%s: not within %v; running: %q", what, timeout, trimOwners(owners))
			return 0
		}
	}
}

// trimOwners drops the trailing partitions nobody runs.
func trimOwners(owners []string) []string {
	for len(owners) > 0 && owners[len(owners)-1] == "" {
		owners = owners[:len(owners)-1]
	}
	return owners
}

// Group is the name of the scenarios' group.
const Group = "billing"

// Assignment is the Rendezvous assignment of [Group] for the members named.
func Assignment(partitions int, members ...string) []string {
	return assign.Owners(Group, members, partitions, assign.Rendezvous)
}

// Moved returns the partitions whose owner differs between before and
// after.
func Moved(before, after []string) []int {
	var out []int
	for p := range after {
		if before[p] != after[p] {
			out = append(out, p)
		}
	}
	return out
}

// Indexes returns the partitions owners gives to who.
func Indexes(owners []string, who string) []int {
	var out []int
	for p, o := range owners {
		if o == who {
			out = append(out, p)
		}
	}
	return out
}

// termLogs reads the term log of every partition the tasks saw a term of,
// through a session of its own on the backend of one of nodes still open.
func (g *GroupScenario) termLogs(n *GroupNode) map[string][]records.Term {
	t := g.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), GroupWait)
	defer cancel()
	sess, err := n.Backend.Open(ctx, backend.SessionOptions{TTL: g.ttl})
	if err != nil {
		t.Fatalf("a session to read the status records: %v", err)
	}
	defer sess.Close(ctx)
	logs := map[string][]records.Term{}
	for _, term := range g.h.Terms() {
		if _, ok := logs[term.Name()]; ok {
			continue
		}
		r, err := sess.(backend.Records).GetRecord(ctx, records.StatusKey(term.Name()))
		if err != nil {
			t.Fatalf("status of %s: %v", term.Name(), err)
		}
		var st records.Status
		if err := records.Decode(r.Value, &st); err != nil {
			t.Fatalf("status of %s: %v", term.Name(), err)
		}
		// The term log after the status (see records.Status.Terms).
		var log records.TermLog
		switch r, err := sess.(backend.Records).GetRecord(ctx, records.TermsKey(term.Name())); {
		case errors.Is(err, backend.ErrNoRecord):
		case err != nil:
			t.Fatalf("term log of %s: %v", term.Name(), err)
		default:
			if err := records.Decode(r.Value, &log); err != nil {
				t.Fatalf("term log of %s: %v", term.Name(), err)
			}
		}
		logs[term.Name()] = records.MergeTerms(log.Terms, st.Terms)
	}
	return logs
}

// checkTermLogs checks the partitions' term logs (the console's timeline)
// against the terms the tasks saw, once every node has closed: each entry
// is of one of nodes' members (a term can begin and end before its task
// runs, unseen by the tasks); an entry of a term seen is of the member
// that saw it; tokens increase; every term but the last has ended (by its
// hand-off, or its successor's fail-over), at or after its start; and, in
// a steady run, every term seen is in the log and the last has ended with
// its client's closing.
func (g *GroupScenario) checkTermLogs(nodes []*GroupNode) {
	t := g.t
	t.Helper()
	var reader *GroupNode
	members := map[string]string{} // node name: member id
	for _, n := range nodes {
		members[n.Name] = n.member
		if reader == nil && !n.abandoned {
			reader = n
		}
	}
	if reader == nil {
		t.Fatal("no node to read the status records through")
	}
	seen := map[string]map[uint64]string{} // lease, token: member
	for _, term := range g.h.Terms() {
		if seen[term.Name()] == nil {
			seen[term.Name()] = map[uint64]string{}
		}
		seen[term.Name()][term.Token()] = members[g.h.Owner(term)]
	}
	steady := g.Steady()
	g.logs = g.termLogs(reader)
	for lease, log := range g.logs {
		logged := map[uint64]bool{}
		for i, e := range log {
			logged[e.Token] = true
			if member, ok := seen[lease][e.Token]; ok && member != e.Member {
				t.Errorf("%s: term log entry %d (token %d) is of member %s, the term was %s's", lease, i, e.Token, e.Member, member)
			}
			if !slices.Contains(slices.Collect(maps.Values(members)), e.Member) {
				t.Errorf("%s: term log entry %d (token %d) is of member %s, none of the scenario's", lease, i, e.Token, e.Member)
			}
			if i > 0 && e.Token <= log[i-1].Token {
				t.Errorf("%s: term log tokens not increasing: %d after %d", lease, e.Token, log[i-1].Token)
			}
			if e.Ended == "" && (i < len(log)-1 || steady) {
				t.Errorf("%s: term %d of %s never ended in the log (entry %d of %d)", lease, e.Token, e.Member, i, len(log))
			}
			if e.Ended != "" && e.End.Before(e.Start) {
				t.Errorf("%s: term %d ended at %v, before its start %v", lease, e.Token, e.End, e.Start)
			}
		}
		if steady && len(log) < records.TermsLen {
			for token, member := range seen[lease] {
				if !logged[token] && token > log[0].Token {
					t.Errorf("%s: term %d of %s, seen, is not in the log %+v", lease, token, member, log)
				}
			}
		}
	}
}

// endedAfter returns the term of lease that ended by since: the one before
// the first term of the log that began after since.
func (g *GroupScenario) endedAfter(lease string, since time.Time) (records.Term, bool) {
	log := g.logs[lease]
	for i := 1; i < len(log); i++ {
		if log[i].Start.After(since) {
			return log[i-1], true
		}
	}
	return records.Term{}, false
}

// checkEnded checks that the term of partition p that member held until
// since ended for the reason want, in the log checkTerms read. A term
// missing from the log (its first status write not done when it ended: a
// backend closed under it a few milliseconds into its term, say) is
// logged, not failed.
func (g *GroupScenario) checkEnded(p int, member string, since time.Time, want string) {
	g.t.Helper()
	lease := fmt.Sprintf("%s.%d", Group, p)
	prev, ok := g.endedAfter(lease, since)
	switch {
	case !ok && len(g.logs[lease]) <= 1:
		// Every term before was too short to write its first status.
		g.t.Logf("%s: no term in the log before %+v: %s's is missing from the log", lease, g.logs[lease], member)
	case !ok:
		g.t.Errorf("%s: no term in the log began after %v: %+v", lease, since, g.logs[lease])
	case prev.Member != member:
		g.t.Logf("%s: the term before the move is of %s, not %s: %s's is missing from the log", lease, prev.Member, member, member)
	case prev.Ended != want:
		g.t.Errorf("%s: %s's term %d ended %q in the log, want %q", lease, member, prev.Token, prev.Ended, want)
	}
}
