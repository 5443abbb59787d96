package simba_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/tcpfault"
	"github.com/simba-go/simba/internal/zktest"
)

// The group scenarios of group_test.go on a real ZooKeeper server (the one
// scripts/with-zookeeper.sh starts; see internal/zktest) in real time,
// with sessions of one second: each node is a client with a backend of
// its own, reaching the server through a TCP proxy of its own
// (internal/tcpfault), under a root of the scenario's own. They check what
// the memory tests check, except timings, and above all that no partition
// ever had two valid terms (internal/check, on the terms the tasks saw,
// with each term's end its deadline after revocation). The helpers shared
// with the etcd scenarios (runTracker, assignment, moved, awaitEvent) are
// in group_etcd_test.go.
//
// A session lost to a slow machine (a renewal late past the deadline)
// moves partitions that the scenario did not move; the checks of exactly
// which partitions moved are then skipped, with a log line, and the safety
// checks still run.

const (
	// zkGroupTTL is the session timeout asked for: the test server grants
	// it as asked (between 400ms and 4s). Renewals every 333ms, margin
	// 100ms.
	zkGroupTTL = time.Second
	// zkGroupWait bounds every wait for a group to converge: generous,
	// for a shared machine under the race detector.
	zkGroupWait = 30 * time.Second
)

// zkGroup is one scenario: a root of its own on the shared server, the
// terms the tasks saw and the partitions they run.
type zkGroup struct {
	t    *testing.T
	addr string
	root string
	h    *history
	runs *runTracker
}

func newZKGroup(t *testing.T) *zkGroup {
	addr := zktest.Addr(t)
	// Root's clean-up, registered first, runs after the nodes' have closed
	// them, and finds nothing left but directories and records.
	return &zkGroup{t: t, addr: addr, root: zktest.Root(t, addr), h: newHistory(), runs: newRunTracker()}
}

// zkNode is one client of a scenario.
type zkNode struct {
	name    string
	proxy   *tcpfault.Proxy
	backend *zookeeper.Backend
	client  *simba.Client
	task    *simba.GroupTask
}

// node starts a client called name (also its member id), through a proxy
// of its own, and waits for its session. Everything is closed when the
// test ends, the client first; if the test failed early, its link is
// healed first, and Close is given zkGroupWait.
func (g *zkGroup) node(name string, opts ...simba.Option) *zkNode {
	t := g.t
	t.Helper()
	px, err := tcpfault.Start(g.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	b, err := zookeeper.New([]string{px.Addr()}, zookeeper.WithRoot(g.root))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	opts = append([]simba.Option{
		simba.WithTTL(zkGroupTTL), simba.WithMemberID(name),
		simba.WithEventHandler(g.h.event), simba.WithLogger(testLogger(t, name)),
	}, opts...)
	c, err := simba.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		px.Unblackhole()
		px.Resume()
		if err, late := await.Within(await.Returned(c.Close), zkGroupWait, "%s: Close did not return", name); late != nil {
			t.Error(late)
		} else if err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), zkGroupWait)
	defer cancel()
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("%s: no session: %v", name, err)
	}
	return &zkNode{name: name, proxy: px, backend: b, client: c}
}

// join starts node n's group task with the given partition count, running
// every partition it is assigned until its term ends.
func (g *zkGroup) join(n *zkNode, partitions int, opts ...simba.GroupOption) *zkNode {
	g.t.Helper()
	task, err := n.client.Group(billing, partitions, opts...).RunWhileLeader(g.runs.task(n.name, g.h, nil))
	if err != nil {
		g.t.Fatal(err)
	}
	n.task = task
	return n
}

// member starts a node and joins it.
func (g *zkGroup) member(name string, partitions int) *zkNode {
	g.t.Helper()
	return g.join(g.node(name), partitions)
}

// await waits until every partition runs on the owner want gives it, and
// nowhere else; it returns how long that took.
func (g *zkGroup) await(want []string, what string) time.Duration {
	g.t.Helper()
	return g.runs.await(g.t, func(owners []string) bool { return slices.Equal(owners[:len(want)], want) }, what, zkGroupWait)
}

// steady reports whether no session was lost: only then do partitions move
// exactly as the scenario moves them.
func (g *zkGroup) steady() bool {
	if lost := eventsOf[simba.SessionLost](g.h); len(lost) > 0 {
		g.t.Logf("%d sessions lost on a slow machine (first: %s, %v, %v): which partitions moved is not checked", len(lost), lost[0].Session, lost[0].Reason, lost[0].Err)
		return false
	}
	return true
}

// checkTerms closes the nodes and runs the invariant checkers over every
// term the tasks saw: at most one valid term per partition at any instant,
// tokens increasing.
func (g *zkGroup) checkTerms(nodes ...*zkNode) {
	t := g.t
	t.Helper()
	for _, n := range nodes {
		if err := await.For(t, await.Returned(n.client.Close), zkGroupWait, "%s: Close did not return", n.name); err != nil {
			t.Errorf("%s: Close: %v", n.name, err)
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
	for _, err := range check.Terms(terms) {
		t.Error(err)
	}
}

// TestZKGroups runs the group scenarios on ZooKeeper, in parallel.
func TestZKGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("real time on a real ZooKeeper server: skipped with -short")
	}
	zktest.Addr(t) // skip (or fail under SIMBA_REQUIRE_SERVERS=1) without a server
	t.Run("JoinAndGracefulLeave", func(t *testing.T) { t.Parallel(); testZKJoinAndLeave(t) })
	t.Run("CrashCutOff", func(t *testing.T) { t.Parallel(); testZKCrashCutOff(t) })
	t.Run("CrashWithoutRelease", func(t *testing.T) { t.Parallel(); testZKCrashWithoutRelease(t) })
	t.Run("DuplicateMemberID", func(t *testing.T) { t.Parallel(); testZKDuplicateMemberID(t) })
	t.Run("MismatchedCounts", func(t *testing.T) { t.Parallel(); testZKMismatchedCounts(t) })
	t.Run("StopDuringHandOff", func(t *testing.T) { t.Parallel(); testZKStopDuringHandOff(t) })
}

// testZKJoinAndLeave: a join moves exactly the partitions the new member
// gains, one new term each; a graceful leave moves exactly the partitions
// the member had.
func testZKJoinAndLeave(t *testing.T) {
	g := newZKGroup(t)
	const P = 16
	a, c := g.member("a", P), g.member("c", P)
	g.await(assignment(P, "a", "c"), "a and c run their partitions")
	before := g.runs.owners(P)
	terms := len(g.h.Terms())

	d := g.member("d", P)
	took := g.await(assignment(P, "a", "c", "d"), "after d joined")
	after := g.runs.owners(P)
	gained := indexes(after, "d")
	t.Logf("join: %d partitions moved to d in %v", len(gained), took)
	if g.steady() {
		for _, p := range moved(before, after) {
			if after[p] != "d" {
				t.Errorf("partition %d moved from %s to %s, not to the new member", p, before[p], after[p])
			}
		}
		if n := len(g.h.Terms()) - terms; n != len(gained) {
			t.Errorf("%d new terms for %d partitions moved", n, len(gained))
		}
	}
	if got := d.task.Partitions(); !slices.Equal(got, gained) {
		t.Errorf("d.Partitions() = %v, want %v", got, gained)
	}

	before = after
	await.For(t, c.task.Stop(), zkGroupWait, "c's group Stop did not complete")
	took = g.await(assignment(P, "a", "d"), "after c left")
	after = g.runs.owners(P)
	t.Logf("leave: %d partitions moved from c in %v", len(moved(before, after)), took)
	if g.steady() {
		for _, p := range moved(before, after) {
			if before[p] != "c" {
				t.Errorf("partition %d moved from %s, a remaining member", p, before[p])
			}
		}
	}
	if views := eventsOf[simba.ViewChanged](g.h); len(views) == 0 {
		t.Error("no ViewChanged event")
	}
	g.checkTerms(a, c, d)
}

// testZKCrashCutOff: a member whose link is cut (its proxy drops every
// byte, as a partition or a frozen host would) loses its partitions: its
// terms end by its own clock, the others take over once the server
// expires its session, never while its terms are valid. When the link
// heals, it learns that its session is gone, opens a new one, and gets its
// partitions back.
func testZKCrashCutOff(t *testing.T) {
	g := newZKGroup(t)
	const P = 12
	a, b, c := g.member("a", P), g.member("b", P), g.member("c", P)
	g.await(assignment(P, "a", "b", "c"), "a, b and c run their partitions")

	old := b.client.SessionID()
	b.proxy.Blackhole()
	took := g.await(assignment(P, "a", "c"), "after b's link was cut")
	t.Logf("b cut off: its %d partitions ran on a and c again after %v (session timeout %v)", len(indexes(assignment(P, "a", "b", "c"), "b")), took, zkGroupTTL)
	for _, term := range g.h.Terms() {
		if g.h.Owner(term) == "b" && term.Valid() {
			t.Errorf("b's term %d of %q still valid after a and c took over", term.Token(), term.Name())
		}
	}

	b.proxy.Unblackhole()
	took = g.await(assignment(P, "a", "b", "c"), "after b's link healed")
	t.Logf("b healed: back to the full assignment after %v", took)
	if !slices.ContainsFunc(eventsOf[simba.SessionLost](g.h), func(e simba.SessionLost) bool { return e.Session == old }) {
		t.Errorf("b never reported its session %s lost", old)
	}
	if b.client.SessionID() == old {
		t.Errorf("b still on session %s", old)
	}
	g.checkTerms(a, b, c)
}

// testZKCrashWithoutRelease: a member whose backend goes away without
// ending its session (Backend.Close abandons it, as a killed process
// would: nothing is released on the server, and the client cannot open
// another) loses its partitions once the server expires the session.
func testZKCrashWithoutRelease(t *testing.T) {
	g := newZKGroup(t)
	const P = 12
	a, b, c := g.member("a", P), g.member("b", P), g.member("c", P)
	g.await(assignment(P, "a", "b", "c"), "a, b and c run their partitions")

	if err := b.backend.Close(); err != nil {
		t.Fatal(err)
	}
	took := g.await(assignment(P, "a", "c"), "after b's backend was closed")
	t.Logf("b abandoned its session: its partitions ran on a and c again after %v (session timeout %v)", took, zkGroupTTL)
	for _, term := range g.h.Terms() {
		if g.h.Owner(term) == "b" && term.Valid() {
			t.Errorf("b's term %d of %q still valid after a and c took over", term.Token(), term.Name())
		}
	}
	g.checkTerms(a, b, c)
}

// testZKDuplicateMemberID: two live sessions with one member id are
// reported, and every partition is still held by one of them at a time.
func testZKDuplicateMemberID(t *testing.T) {
	g := newZKGroup(t)
	const P = 8
	x := g.member("x", P)
	x2 := g.join(g.node("x2", simba.WithMemberID("x")), P)
	g.runs.await(t, func(owners []string) bool {
		for _, o := range owners[:P] {
			if o != "x" && o != "x2" {
				return false
			}
		}
		return true
	}, "every partition runs on x or x2", zkGroupWait)
	awaitEvent(t, g.h, "a duplicate member id reported", func(m simba.GroupMismatch) bool {
		return strings.Contains(m.Detail, "used by 2 live sessions")
	})
	g.checkTerms(x, x2)
}

// testZKMismatchedCounts: members with different partition counts report
// each other, and the vacancy net fills the partitions nobody's view gives
// them to.
func testZKMismatchedCounts(t *testing.T) {
	g := newZKGroup(t)
	a := g.member("a", 16)
	z := g.member("z", 8) // misconfigured
	for _, who := range []string{"a", "z"} {
		awaitEvent(t, g.h, "the mismatch of "+who+" reported", func(m simba.GroupMismatch) bool {
			return m.Member == who && strings.Contains(m.Detail, "partitions")
		})
	}
	// a's view gives some of 8..15 to z, which never contends for them;
	// after the grace (2×TTL) a stands in.
	took := g.runs.await(t, func(owners []string) bool {
		return !slices.Contains(owners[:16], "") && !slices.Contains(owners[:16], "*")
	}, "every partition runs somewhere", zkGroupWait)
	t.Logf("every partition ran after %v", took)
	g.checkTerms(a, z)
}

// testZKStopDuringHandOff: a's tasks ignore cancellation; b joins, so a
// hands partitions off, slowly (until each term's capped deadline). A Stop
// meanwhile completes only when those hand-offs are done, and then none of
// a's terms is valid, though its tasks still run.
func testZKStopDuringHandOff(t *testing.T) {
	g := newZKGroup(t)
	const P = 8
	hold := make(chan struct{})
	defer func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
	}()
	a := g.node("a")
	task, err := a.client.Group(billing, P).RunWhileLeader(g.runs.task("a", g.h, hold))
	if err != nil {
		t.Fatal(err)
	}
	a.task = task
	g.await(assignment(P, "a"), "a runs every partition")

	joined := time.Now()
	b := g.member("b", P)
	deadline := time.Now().Add(zkGroupWait)
	for len(a.task.Partitions()) == P {
		if time.Now().After(deadline) {
			t.Fatal("a never saw b join")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-a.task.Stop():
	case <-time.After(zkGroupWait):
		t.Fatal("a's Stop did not complete")
	}
	t.Logf("a's Stop completed %v after b joined (session timeout %v)", time.Since(joined), zkGroupTTL)
	for _, term := range g.h.Terms() {
		if g.h.Owner(term) == "a" && term.Valid() {
			t.Errorf("a's term %d of %q valid after Stop completed", term.Token(), term.Name())
		}
	}
	close(hold)
	g.await(assignment(P, "b"), "b runs every partition")
	g.checkTerms(a, b)
}
