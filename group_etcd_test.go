package simba_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/faultproxy"
)

// The group scenarios of group_test.go, on a real etcd server (embedded,
// internal/etcdtest) in real time: each node is a client with a backend of
// its own, reaching the server through a fault-injecting proxy of its own.
// They check what the memory tests check, except timings, and above all
// that no partition ever had two valid terms (internal/check, on the
// terms the tasks saw, with each term's end its deadline after revocation).
//
// A session lost to a slow machine (a keep-alive late past the deadline)
// moves partitions that the scenario did not move; the checks of exactly
// which partitions moved are then skipped, with a log line, and the safety
// checks still run.

const (
	// etcdGroupTTL is the session TTL: granted as asked (whole seconds,
	// above the test server's minimum of 1s). Renewals every 667ms, margin
	// 200ms.
	etcdGroupTTL = 2 * time.Second
	// etcdGroupWait bounds every wait for a group to converge: generous,
	// for a shared machine under the race detector.
	etcdGroupWait = 30 * time.Second
)

// etcdGroup is one scenario: a key prefix of its own on the shared server,
// the terms the tasks saw and the partitions they run.
type etcdGroup struct {
	t      *testing.T
	srv    *etcdtest.Server
	prefix string
	h      *history
	runs   *runTracker
	ttl    time.Duration
}

func newEtcdGroup(t *testing.T, srv *etcdtest.Server) *etcdGroup {
	return &etcdGroup{
		t: t, srv: srv, prefix: "/" + strings.ReplaceAll(t.Name(), "/", ".") + "/",
		h: newHistory(), runs: newRunTracker(), ttl: etcdGroupTTL,
	}
}

// etcdNode is one client of a scenario.
type etcdNode struct {
	name    string
	proxy   *faultproxy.Proxy
	backend *etcd.Backend
	client  *simba.Client
	task    *simba.GroupTask
}

// node starts a client called name (also its member id), through a proxy
// of its own, and waits for its session. Everything is closed when the
// test ends, the client first.
func (g *etcdGroup) node(name string, opts ...simba.Option) *etcdNode {
	t := g.t
	t.Helper()
	px, err := faultproxy.New(g.srv.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return g.nodeOn(name, px, []string{px.Addr()}, opts...)
}

// nodeOn starts a client called name on endpoints. If the test fails
// early, the link is healed before the client is closed, and Close is given
// etcdGroupWait: a client cut off from the server by a fault left in place
// would otherwise wait for its session's deadline, for ever if that never
// ends it.
func (g *etcdGroup) nodeOn(name string, px *faultproxy.Proxy, endpoints []string, opts ...simba.Option) *etcdNode {
	t := g.t
	t.Helper()
	b, err := etcd.New(endpoints, etcd.WithPrefix(g.prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("backend of %s: Close: %v", name, err)
		}
	})
	opts = append([]simba.Option{
		simba.WithTTL(g.ttl), simba.WithMemberID(name),
		simba.WithEventHandler(g.h.event), simba.WithLogger(testLogger(t, name)),
	}, opts...)
	c, err := simba.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if px != nil {
			px.Heal()
			px.Accept()
		}
		if err, late := await.Within(await.Returned(c.Close), etcdGroupWait, "%s: Close did not return", name); late != nil {
			t.Error(late)
		} else if err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), etcdGroupWait)
	defer cancel()
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("%s: no session: %v", name, err)
	}
	return &etcdNode{name: name, proxy: px, backend: b, client: c}
}

// join starts node n's group task with the given partition count, running
// every partition it is assigned until its term ends.
func (g *etcdGroup) join(n *etcdNode, partitions int, opts ...simba.GroupOption) *etcdNode {
	g.t.Helper()
	task, err := n.client.Group(billing, partitions, opts...).RunWhileLeader(g.runs.task(n.name, g.h, nil))
	if err != nil {
		g.t.Fatal(err)
	}
	n.task = task
	return n
}

// member starts a node and joins it.
func (g *etcdGroup) member(name string, partitions int) *etcdNode {
	g.t.Helper()
	return g.join(g.node(name), partitions)
}

// await waits until every partition runs on the owner want gives it, and
// nowhere else; it returns how long that took.
func (g *etcdGroup) await(want []string, what string) time.Duration {
	g.t.Helper()
	return g.runs.await(g.t, func(owners []string) bool { return slices.Equal(owners[:len(want)], want) }, what, etcdGroupWait)
}

// sessionsLost returns the sessions lost so far, by any node.
func (g *etcdGroup) sessionsLost() []simba.SessionLost { return eventsOf[simba.SessionLost](g.h) }

// steady reports whether no session was lost: only then do partitions move
// exactly as the scenario moves them.
func (g *etcdGroup) steady() bool {
	if lost := g.sessionsLost(); len(lost) > 0 {
		g.t.Logf("%d sessions lost on a slow machine (first: %s, %v, %v): which partitions moved is not checked", len(lost), lost[0].Session, lost[0].Reason, lost[0].Err)
		return false
	}
	return true
}

// checkTerms closes the nodes and runs the invariant checkers over every
// term the tasks saw: at most one valid term per partition at any instant,
// tokens increasing.
func (g *etcdGroup) checkTerms(nodes ...*etcdNode) {
	t := g.t
	t.Helper()
	for _, n := range nodes {
		if err := await.For(t, await.Returned(n.client.Close), etcdGroupWait, "%s: Close did not return", n.name); err != nil {
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

// runTracker records which nodes run each partition.
type runTracker struct {
	mu      sync.Mutex
	running map[int]map[string]int // partition → node → runs
	changed chan struct{}          // a hint: something changed
}

func newRunTracker() *runTracker {
	return &runTracker{running: map[int]map[string]int{}, changed: make(chan struct{}, 1)}
}

// task returns a group task for node that records its term and runs until
// the term ends; then, if hold is not nil, it also waits for hold to be
// closed (a task that ignores cancellation).
func (r *runTracker) task(node string, h *history, hold <-chan struct{}) func(context.Context, *simba.Term, int) error {
	return func(ctx context.Context, term *simba.Term, p int) error {
		h.sawTerm(node, term)
		r.add(p, node, 1)
		defer r.add(p, node, -1)
		<-ctx.Done()
		if hold != nil {
			<-hold
		}
		return nil
	}
}

func (r *runTracker) add(p int, node string, d int) {
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

// owners returns, per partition up to the highest seen, the node running
// it: "" if none, "*" if several.
func (r *runTracker) owners(partitions int) []string {
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

// await waits until ok holds for the owners of the first 1,024 partitions
// and returns how long that took.
func (r *runTracker) await(t testing.TB, ok func([]string) bool, what string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		owners := r.owners(1024)
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

// assignment is PartitionAssignment for the members named.
func assignment(partitions int, members ...string) []string {
	return simba.PartitionAssignment(billing, members, partitions, simba.Rendezvous)
}

// moved returns the partitions whose owner differs between before and
// after.
func moved(before, after []string) []int {
	var out []int
	for p := range after {
		if before[p] != after[p] {
			out = append(out, p)
		}
	}
	return out
}

func TestEtcdGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("real time on a real etcd server: skipped with -short")
	}
	srv := etcdtest.Start(t)
	t.Run("JoinAndGracefulLeave", func(t *testing.T) { t.Parallel(); testEtcdJoinAndLeave(t, srv) })
	t.Run("Crash", func(t *testing.T) { t.Parallel(); testEtcdCrash(t, srv) })
	t.Run("DuplicateMemberID", func(t *testing.T) { t.Parallel(); testEtcdDuplicateMemberID(t, srv) })
	t.Run("MismatchedCounts", func(t *testing.T) { t.Parallel(); testEtcdMismatchedCounts(t, srv) })
	t.Run("StopDuringHandOff", func(t *testing.T) { t.Parallel(); testEtcdStopDuringHandOff(t, srv) })
}

// testEtcdJoinAndLeave: a join moves exactly the partitions the new member
// gains, one new term each; a graceful leave moves exactly the partitions
// the member had.
func testEtcdJoinAndLeave(t *testing.T, srv *etcdtest.Server) {
	g := newEtcdGroup(t, srv)
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
	await.For(t, c.task.Stop(), etcdGroupWait, "c's group Stop did not complete")
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

// testEtcdCrash: a member whose link is cut loses its partitions: its
// terms end by its own clock, the others take over once etcd expires its
// session, never while its terms are valid. When the link heals, it
// comes back with a new session and gets its partitions back.
func testEtcdCrash(t *testing.T, srv *etcdtest.Server) {
	g := newEtcdGroup(t, srv)
	const P = 12
	a, b, c := g.member("a", P), g.member("b", P), g.member("c", P)
	g.await(assignment(P, "a", "b", "c"), "a, b and c run their partitions")

	b.proxy.Blackhole()
	took := g.await(assignment(P, "a", "c"), "after b's link was cut")
	t.Logf("b cut off: its %d partitions ran on a and c again after %v (TTL %v)", len(indexes(assignment(P, "a", "b", "c"), "b")), took, g.ttl)
	for _, term := range g.h.Terms() {
		if g.h.Owner(term) == "b" && term.Valid() {
			t.Errorf("b's term %d of %q still valid after a and c took over", term.Token(), term.Name())
		}
	}

	b.proxy.Heal()
	took = g.await(assignment(P, "a", "b", "c"), "after b's link healed")
	t.Logf("b healed: back to the full assignment after %v", took)
	if lost := eventsOf[simba.SessionLost](g.h); len(lost) == 0 {
		t.Error("b never reported its session lost")
	}
	g.checkTerms(a, b, c)
}

// testEtcdDuplicateMemberID: two live sessions with one member id are
// reported, and every partition is still held by one of them at a time.
func testEtcdDuplicateMemberID(t *testing.T, srv *etcdtest.Server) {
	g := newEtcdGroup(t, srv)
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
	}, "every partition runs on x or x2", etcdGroupWait)
	awaitEvent(t, g.h, "a duplicate member id reported", func(m simba.GroupMismatch) bool {
		return strings.Contains(m.Detail, "used by 2 live sessions")
	})
	g.checkTerms(x, x2)
}

// testEtcdMismatchedCounts: members with different partition counts
// report each other, and the vacancy net fills the partitions nobody's
// view gives them to.
func testEtcdMismatchedCounts(t *testing.T, srv *etcdtest.Server) {
	g := newEtcdGroup(t, srv)
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
	},
		"every partition runs somewhere", etcdGroupWait)
	t.Logf("every partition ran after %v", took)
	g.checkTerms(a, z)
}

// testEtcdStopDuringHandOff: a's tasks ignore cancellation; b joins, so a
// hands partitions off, slowly (until each term's capped deadline). A
// Stop meanwhile completes only when those hand-offs are done, and then
// none of a's terms is valid, though its tasks still run.
func testEtcdStopDuringHandOff(t *testing.T, srv *etcdtest.Server) {
	g := newEtcdGroup(t, srv)
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
	deadline := time.Now().Add(etcdGroupWait)
	for len(a.task.Partitions()) == P {
		if time.Now().After(deadline) {
			t.Fatal("a never saw b join")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-a.task.Stop():
	case <-time.After(etcdGroupWait):
		t.Fatal("a's Stop did not complete")
	}
	t.Logf("a's Stop completed %v after b joined (TTL %v)", time.Since(joined), g.ttl)
	for _, term := range g.h.Terms() {
		if g.h.Owner(term) == "a" && term.Valid() {
			t.Errorf("a's term %d of %q valid after Stop completed", term.Token(), term.Name())
		}
	}
	close(hold)
	g.await(assignment(P, "b"), "b runs every partition")
	g.checkTerms(a, b)
}

// awaitEvent waits until an event of type E satisfying ok was published.
func awaitEvent[E simba.Event](t *testing.T, h *history, what string, ok func(E) bool) {
	t.Helper()
	deadline := time.Now().Add(etcdGroupWait)
	for {
		if slices.ContainsFunc(eventsOf[E](h), ok) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, etcdGroupWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// groupBenchEnv turns on TestEtcdGroupBenchmark:
//
//	SIMBA_GROUP_BENCH=1 go test -run '^TestEtcdGroupBenchmark$' -v -count=1 .
const groupBenchEnv = "SIMBA_GROUP_BENCH"

// Parameters of the group benchmark.
const (
	benchPartitions = 256
	benchNodes      = 8
	benchRounds     = 5
	benchTTL        = 3 * time.Second
)

// TestEtcdGroupBenchmark: 256 partitions over 8 nodes on etcd. Seven nodes
// run the group; in each round an eighth joins, then leaves gracefully.
// It measures the time from the join (the group started on a client whose
// session is ready) or the leave (Stop) until every partition runs on its
// assigned owner and nowhere else, and counts the partitions moved against
// the minimal set of plain rendezvous hashing. It runs twice: on a server
// that does not fsync (like the tests'), and on one that does (like
// production).
func TestEtcdGroupBenchmark(t *testing.T) {
	if os.Getenv(groupBenchEnv) == "" {
		t.Skipf("set %s=1 to run the group benchmark", groupBenchEnv)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d partitions over %d nodes (7, and an 8th joining and leaving), TTL %v, embedded etcd on loopback, GOMAXPROCS %d.\n",
		benchPartitions, benchNodes, benchTTL, runtimeProcs())
	for _, fsync := range []bool{false, true} {
		t.Run(fmt.Sprintf("fsync=%v", fsync), func(t *testing.T) { benchGroup(t, fsync, &out) })
	}
	t.Logf("report:\n\n%s", out.String())
}

func benchGroup(t *testing.T, fsync bool, out *strings.Builder) {
	var opts []etcdtest.Option
	if fsync {
		opts = append(opts, etcdtest.WithFsync())
	}
	srv := etcdtest.Start(t, opts...)
	g := newEtcdGroup(t, srv)
	g.ttl = benchTTL
	var nodes []*etcdNode
	var ids []string
	for i := range benchNodes - 1 {
		name := fmt.Sprintf("n%d", i)
		nodes = append(nodes, g.join(g.nodeOn(name, nil, srv.DirectEndpoints()), benchPartitions))
		ids = append(ids, name)
	}
	cold := g.await(assignment(benchPartitions, ids...), "the first seven nodes")

	type row struct {
		round          int
		event          string
		moved, minimal int
		took           time.Duration
		steady         bool
	}
	var rows []row
	for round := 1; round <= benchRounds; round++ {
		name := fmt.Sprintf("j%d", round)
		before := assignment(benchPartitions, ids...)
		with := assignment(benchPartitions, append(slices.Clone(ids), name)...)
		lost := len(g.sessionsLost())

		n := g.nodeOn(name, nil, srv.DirectEndpoints())
		ownersBefore := g.runs.owners(benchPartitions)
		start := time.Now()
		g.join(n, benchPartitions)
		g.runs.await(t, func(o []string) bool { return slices.Equal(o[:benchPartitions], with) }, "after "+name+" joined", etcdGroupWait)
		took := time.Since(start)
		rows = append(rows, row{round, "join " + name, len(moved(ownersBefore, g.runs.owners(benchPartitions))), len(moved(before, with)), took, len(g.sessionsLost()) == lost})

		ownersBefore = g.runs.owners(benchPartitions)
		start = time.Now()
		done := n.task.Stop()
		g.runs.await(t, func(o []string) bool { return slices.Equal(o[:benchPartitions], before) }, "after "+name+" left", etcdGroupWait)
		took = time.Since(start)
		rows = append(rows, row{round, "leave " + name, len(moved(ownersBefore, g.runs.owners(benchPartitions))), len(moved(with, before)), took, len(g.sessionsLost()) == lost})
		await.For(t, done, etcdGroupWait, "%s's group Stop did not complete", name)
		if err := n.client.Close(); err != nil {
			t.Error(err)
		}
	}

	fmt.Fprintf(out, "\nfsync %v; cold start of the first 7 nodes: %.0f ms\n\n", map[bool]string{false: "off", true: "on"}[fsync], float64(cold)/float64(time.Millisecond))
	fmt.Fprintln(out, "| round | event | partitions moved | minimal set | converged after |")
	fmt.Fprintln(out, "|---:|---|---:|---:|---:|")
	var joins, leaves []time.Duration
	for _, r := range rows {
		note := ""
		if !r.steady {
			note = " (a session was lost meanwhile)"
		}
		fmt.Fprintf(out, "| %d | %s | %d | %d | %.0f ms%s |\n", r.round, r.event, r.moved, r.minimal, float64(r.took)/float64(time.Millisecond), note)
		if strings.HasPrefix(r.event, "join") {
			joins = append(joins, r.took)
		} else {
			leaves = append(leaves, r.took)
		}
		if r.steady && r.moved != r.minimal {
			t.Errorf("round %d, %s: %d partitions moved, the minimal set is %d", r.round, r.event, r.moved, r.minimal)
		}
	}
	fmt.Fprintf(out, "\njoin: median %v, max %v; leave: median %v, max %v (target ≤ 1s)\n",
		median(joins), slices.Max(joins).Round(time.Millisecond), median(leaves), slices.Max(leaves).Round(time.Millisecond))
	g.checkTerms(nodes...)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(time.Millisecond)
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
