package zookeeperbench_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	bounded "github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
	"github.com/simba-go/simba/tests/internal/handoffbench"
)

// benchEnv turns on TestBenchmarkZooKeeper; serverEnv and warmEnv choose
// the server of its hand-offs (see TestBenchmarkZooKeeper).
const (
	benchEnv  = "SIMBA_ZK_BENCH"
	serverEnv = "SIMBA_ZK_BENCH_SERVER"
	warmEnv   = "SIMBA_ZK_BENCH_WARM"
)

// TestBenchmarkZooKeeper measures, in one run on one server, the graceful
// hand-off of simba (status records on, as by default, and off) against
// two go-zookeeper recipes, a plain ephemeral-node election and the
// sequential-node recipe of Curator's LeaderLatch, with the breakdown of
// simba's hand-offs (see tests/internal/handoffbench); and, over blackhole
// rounds, the rounds in which the cut holder still believed it led after
// the new one started, with the fail-over times. It prints Markdown
// tables, and writes them to $SIMBA_ZK_BENCH_OUT if set. The default run
// (SIMBA_ZK_BENCH=1: sections handoff and blackhole) takes about five
// minutes:
//
//	cd tests && SIMBA_ZK_BENCH=1 ../scripts/with-zookeeper.sh go test -run '^TestBenchmarkZooKeeper$' -v -count=1 -timeout 30m ./bench/zookeeper/
//
// SIMBA_ZK_BENCH=all adds the hand-offs on a server that does not wait for
// its disk (forceSync=no), simba's fail-over after a SIGKILL, and the
// release alone as the server applies it (benchMulti); or name the
// sections, comma-separated: handoff, nosync, blackhole, crash, multi.
//
// The hand-offs (and the release alone) run on the server of
// scripts/with-zookeeper.sh, whose JVM is set for the tests' start-up
// time (C1 only, the serial collector), unless
// SIMBA_ZK_BENCH_SERVER=deployed: then on a server of their own whose JVM
// runs as deployed (zktest.DeployedJVM). SIMBA_ZK_BENCH_WARM=n
// first has the server run n rounds of the hand-offs' requests (see
// warmServer), as a server that has run for a while has.
func TestBenchmarkZooKeeper(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skipf("set %s=1 to run the benchmarks", benchEnv)
	}
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	var report strings.Builder
	fmt.Fprintf(&report, "ZooKeeper server (Debian's package, standalone), loopback, GOMAXPROCS %d, load average at the start %s. %s\n\n", runtime.GOMAXPROCS(0), handoffbench.LoadAverage(), handoffbench.Busy(t))
	if section("handoff", true) || section("multi", false) {
		haddr, hroot := addr, root
		if v := os.Getenv(serverEnv); v == "deployed" {
			srv := zktest.StartDeployedServer(t)
			haddr, hroot = srv.Addr, zktest.Root(t, srv.Addr)
			fmt.Fprintf(&report, "Hand-offs on a server of their own, its JVM as deployed (%s).\n\n", strings.Join(zktest.DeployedJVM, " "))
		} else if v != "" {
			t.Fatalf("%s=%q: want deployed, or nothing for the server of scripts/with-zookeeper.sh", serverEnv, v)
		}
		if v := os.Getenv(warmEnv); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				t.Fatalf("%s=%q: want a number of rounds", warmEnv, v)
			}
			took := warmServer(t, haddr, hroot, n)
			fmt.Fprintf(&report, "Server warmed up by %d rounds in %v.\n\n", n, took.Round(time.Millisecond))
		}
		if section("handoff", true) {
			benchHandOffs(t, haddr, hroot, "forceSync=yes", &report)
		}
		if section("multi", false) {
			benchMulti(t, haddr, hroot, &report)
		}
	}
	if section("nosync", false) {
		// A server that does not wait for its disk: what is left is the
		// clients' own cost.
		nosync := zktest.StartServer(t, "forceSync=no")
		benchHandOffs(t, nosync.Addr, zktest.Root(t, nosync.Addr), "forceSync=no", &report)
	}
	if section("blackhole", true) {
		benchBlackhole(t, addr, root, &report)
	}
	if section("crash", false) {
		benchCrash(t, addr, root, &report)
	}
	fmt.Fprintf(&report, "Load average at the end: %s.\n", handoffbench.LoadAverage())
	t.Log("\n" + report.String())
	if p := os.Getenv(benchEnv + "_OUT"); p != "" {
		if err := os.WriteFile(p, []byte(report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// section reports whether the benchmark section name is selected: the
// environment variable is "1" (the default sections), "all", or a
// comma-separated list of sections.
func section(name string, byDefault bool) bool {
	v := os.Getenv(benchEnv)
	return v == "all" || (v == "1" && byDefault) || slices.Contains(strings.Split(v, ","), name)
}

// Parameters of the report.
const (
	handOffRounds    = 200
	handOffWarmup    = 20
	blackholePairs   = 10
	blackholePerPair = 5 // rounds
	benchWait        = 10 * time.Second
)

// handOffSettles are the pauses between the waiter starting to wait and
// the hand-off.
var handOffSettles = []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 150 * time.Millisecond}

func benchHandOffs(t *testing.T, addr, root, server string, report *strings.Builder) {
	cfg := handoffbench.Sized(handoffbench.Config{Settles: handOffSettles, Warmup: handOffWarmup, Rounds: handOffRounds})
	fmt.Fprintf(report, "### Graceful hand-off, server %s (%d rounds after %d warm-up rounds, sides alternating)\n\n", server, cfg.Rounds, cfg.Warmup)
	fmt.Fprintln(report, "simba: `LeaderTask.Stop()` on the holder → the next holder's task running. "+
		"Plain recipe: the holder deletes its ephemeral znode → the waiter's create succeeds (it waited on an exists watch). "+
		"Sequential recipe (Curator's LeaderLatch): the holder deletes its ephemeral sequential znode → "+
		"the waiter, watching its predecessor, lists the children and finds itself lowest. "+
		"Settle: pause between the waiter starting to wait and the hand-off. "+
		"Breakdown: a wrapping backend times the release call and the waiter's Acquire; "+
		"the notification is when an exists watch of the test, on its own connection, fires for the holder's znode.")
	fmt.Fprintln(report)
	on, stopOn := simbaHandOffSide(t, addr, root, "simba (status on)", handoffbench.Reference, true)
	off, stopOff := simbaHandOffSide(t, addr, root, "simba (status off)", handoffbench.Simba, false)
	plain := newPeerHandOff(t, addr, root)
	seq := newSeqHandOff(t, addr, root)
	res, err := handoffbench.Run(cfg, []handoffbench.Side{on, off,
		{Name: "plain ephemeral-node recipe", Role: handoffbench.Peer, Once: plain.once},
		{Name: "sequential-node recipe (LeaderLatch)", Role: handoffbench.Peer, Once: seq.once},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, stop := range []func() error{stopOn, stopOff, plain.close, seq.close} {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}
	res.Markdown(report)
	fmt.Fprintln(report)
}

// simbaHandOffSide is simba's side of the hand-off: two clients on
// backends wrapped for the breakdown, with status records on or off.
func simbaHandOffSide(t *testing.T, addr, root, name string, role handoffbench.Role, status bool) (handoffbench.Side, func() error) {
	pair := handoffbench.SimbaPair{Election: fmt.Sprintf("handoff-%v", status), Timeout: benchWait, Notice: deleteWatcher(t, addr, root)}
	for i := range pair.Clients {
		pair.Probes[i] = new(handoffbench.Probe)
		c, err := simba.New(handoffbench.Wrap(newBackendAt(t, addr, root), pair.Probes[i]), simba.WithTTL(2*time.Second), simba.WithStatus(status))
		require.NoError(t, err)
		t.Cleanup(func() { closeWithin(t, c) })
		pair.Clients[i] = c
	}
	side, stop, err := handoffbench.SimbaSide(name, role, pair)
	require.NoError(t, err)
	return side, stop
}

// deleteWatcher returns the independent watcher of the breakdown, on a
// connection of its own: it finds the znode of the holding, the one under
// <root>/lease/<name> (itself or a child) whose czxid is the token, and
// sets an exists watch on it.
func deleteWatcher(t *testing.T, addr, root string) handoffbench.Notice {
	conn := zktest.Connect(t, addr)
	return func(ctx context.Context, name string, token uint64) (<-chan time.Time, error) {
		dir := root + "/lease/" + name
		candidates := []string{dir}
		kids, _, err := conn.Children(dir)
		if err != nil {
			return nil, fmt.Errorf("children of %s: %w", dir, err)
		}
		for _, k := range kids {
			candidates = append(candidates, dir+"/"+k)
		}
		for _, p := range candidates {
			ok, st, ev, err := conn.ExistsW(p)
			if err != nil {
				return nil, fmt.Errorf("exists %s: %w", p, err)
			}
			if !ok || st.Czxid != int64(token) {
				continue // its watch fires once, unused
			}
			ch := make(chan time.Time, 1)
			go func() {
				if e := <-ev; e.Type == zk.EventNodeDeleted {
					ch <- time.Now()
				}
			}()
			return ch, nil
		}
		return nil, fmt.Errorf("no znode with czxid %d under %s", token, dir)
	}
}

// mkdirs creates the persistent znode dir and its parents, those missing:
// the recipes' parents are their own, as the backend's directories are
// containers, which the server deletes once empty.
func mkdirs(c *zk.Conn, dir string) error {
	for i := 1; i <= len(dir); i++ {
		if i == len(dir) || dir[i] == '/' {
			_, err := c.Create(dir[:i], nil, 0, zk.WorldACL(zk.PermAll))
			if errors.Is(err, zk.ErrNoNode) { // a container deleted meanwhile
				i = 0
				continue
			}
			if err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return fmt.Errorf("creating %s: %w", dir[:i], err)
			}
		}
	}
	return nil
}

// seqHandOff hands over by the sequential-node recipe of Curator's
// LeaderLatch, on two *zk.Conns: each contender creates an ephemeral
// sequential znode under dir; the lowest holds; a waiter sets an exists
// watch on its predecessor and, when that is deleted, lists the children
// and checks again. The holder hands off by deleting its znode; the time
// from that delete to the waiter finding itself lowest is taken.
type seqHandOff struct {
	dir    string
	conns  [2]*zk.Conn
	mine   string // the holder's znode
	holder int
	won    chan seqWon
}

type seqWon struct {
	at   time.Time
	path string
	err  error
}

func newSeqHandOff(t *testing.T, addr, root string) *seqHandOff {
	h := &seqHandOff{dir: root + "/peer-seq", won: make(chan seqWon, 1)}
	h.conns = [2]*zk.Conn{zktest.Connect(t, addr), zktest.Connect(t, addr)}
	require.NoError(t, mkdirs(h.conns[0], h.dir))
	go h.campaign(h.conns[0])
	w := <-h.won
	require.NoError(t, w.err)
	h.mine = w.path
	return h
}

// seq is the sequence number at the end of a sequential znode's name.
func seq(name string) string { return name[max(0, len(name)-10):] }

func (h *seqHandOff) campaign(c *zk.Conn) {
	me, err := c.Create(h.dir+"/latch-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		h.won <- seqWon{err: fmt.Errorf("latch create: %w", err)}
		return
	}
	for {
		kids, _, err := c.Children(h.dir)
		if err != nil {
			h.won <- seqWon{err: fmt.Errorf("latch children: %w", err)}
			return
		}
		slices.SortFunc(kids, func(a, b string) int { return strings.Compare(seq(a), seq(b)) })
		i := slices.Index(kids, path.Base(me))
		switch {
		case i < 0:
			h.won <- seqWon{err: fmt.Errorf("latch: own znode %s gone", me)}
			return
		case i == 0:
			h.won <- seqWon{at: time.Now(), path: me}
			return
		}
		ok, _, ev, err := c.ExistsW(h.dir + "/" + kids[i-1])
		if err != nil {
			h.won <- seqWon{err: fmt.Errorf("latch exists: %w", err)}
			return
		}
		if ok {
			<-ev
		}
	}
}

func (h *seqHandOff) once(settle time.Duration) (handoffbench.Round, error) {
	go h.campaign(h.conns[1-h.holder])
	time.Sleep(settle)
	start := time.Now()
	if err := h.conns[h.holder].Delete(h.mine, -1); err != nil {
		return handoffbench.Round{}, fmt.Errorf("latch delete: %w", err)
	}
	var w seqWon
	select {
	case w = <-h.won:
	case <-time.After(benchWait):
		return handoffbench.Round{}, fmt.Errorf("no latch hand-off within %v", benchWait)
	}
	if w.err != nil {
		return handoffbench.Round{}, w.err
	}
	h.mine, h.holder = w.path, 1-h.holder
	return handoffbench.Round{Total: w.at.Sub(start)}, nil
}

func (h *seqHandOff) close() error { return h.conns[h.holder].Delete(h.mine, -1) }

// bhTerm is one term of the blackhole rounds as its task saw it.
type bhTerm struct {
	who     string
	term    *simba.Term
	ended   chan struct{} // closed when the task saw the revocation
	endedAt time.Time
}

// benchBlackhole plays the blackhole rounds of simba: pairs of clients,
// each through a proxy of its own, on 1s sessions; the holder's link is
// blackholed until the other has taken over and the holder's term ended.
func benchBlackhole(t *testing.T, addr, root string, report *strings.Builder) {
	fmt.Fprintf(report, "### Blackholed holder: overlap and fail-over (session timeout 1s, %d pairs × %d rounds)\n\n", blackholePairs, blackholePerPair)
	fmt.Fprintln(report, "The holder's link is blackholed (the server stops hearing it, as after a crash) at a random phase of its renewals. "+
		"A round overlaps when the old holder still believes it leads after the new one started: "+
		"simba: the old term's `Valid()` (its `Deadline`), and its task's ctx end, against the new term's `Start`; "+
		"plain recipe (go-zookeeper, 1s session timeout): the old leader stepping down on its connection's first `StateDisconnected` event "+
		"(as Curator's recipes do on SUSPENDED), against the new leader's create succeeding. "+
		"Fail-over: the cut → the new leader.")
	fmt.Fprintln(report)
	valid := &handoffbench.Overlap{Side: "simba, old term's Valid()"}
	ctxEnd := &handoffbench.Overlap{Side: "simba, old task's ctx end"}
	peer := &handoffbench.Overlap{Side: "plain ephemeral-node recipe, old leader's Disconnected event"}
	var wg sync.WaitGroup
	for p := range blackholePairs {
		wg.Go(func() {
			if err := simbaBlackhole(t, addr, root, p, valid, ctxEnd); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for p := range blackholePairs {
		wg.Go(func() {
			if err := peerBlackhole(t, addr, root, p, peer); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	handoffbench.OverlapMarkdown(report, valid, ctxEnd, peer)
	fmt.Fprintln(report)
	if _, over := valid.Rounds(); over > 0 {
		t.Errorf("simba: %d blackhole rounds overlapped", over)
	}
}

func simbaBlackhole(t *testing.T, addr, root string, p int, valid, ctxEnd *handoffbench.Overlap) error {
	election := fmt.Sprintf("blackhole-%d", p)
	proxies := map[string]*faultproxy.Proxy{}
	ch := make(chan *bhTerm, 4)
	var log termLog
	task := func(who string) func(context.Context, *simba.Term) error {
		inner := log.task(who, nil)
		return func(ctx context.Context, term *simba.Term) error {
			bt := &bhTerm{who: who, term: term, ended: make(chan struct{})}
			ch <- bt
			err := inner(ctx, term)
			bt.endedAt = time.Now()
			close(bt.ended)
			return err
		}
	}
	for _, who := range []string{"a", "b"} {
		px, err := faultproxy.New(addr)
		if err != nil {
			return fmt.Errorf("%s: proxy: %w", election, err)
		}
		t.Cleanup(func() { px.Close() })
		proxies[who] = px
		c, err := simba.New(newBackendAt(t, px.Addr(), root), simba.WithTTL(time.Second))
		if err != nil {
			return err
		}
		t.Cleanup(func() {
			px.Heal() // a round that failed left it cut off
			closeWithin(t, c)
		})
		if _, err := c.Election(election).RunWhileLeader(task(who)); err != nil {
			return err
		}
	}
	wait := func(what string, round int) (*bhTerm, error) {
		select {
		case bt := <-ch:
			return bt, nil
		case <-time.After(benchWait):
			return nil, fmt.Errorf("%s round %d: %s within %v", election, round, what, benchWait)
		}
	}
	cur, err := wait("no first term", 0)
	if err != nil {
		return err
	}
	for round := range blackholePerPair {
		// Cut at a random phase of the holder's renewals, once its last
		// request is a renewal rather than the Acquire that began its term.
		time.Sleep(400*time.Millisecond + rand.N(400*time.Millisecond))
		cut := time.Now()
		proxies[cur.who].Blackhole()
		nxt, err := wait("no take-over", round)
		if err != nil {
			return err
		}
		if nxt.who == cur.who {
			return fmt.Errorf("%s round %d: the blackholed client started a term", election, round)
		}
		select {
		case <-cur.ended:
		case <-time.After(benchWait):
			return fmt.Errorf("%s round %d: the cut holder's term %d never ended", election, round, cur.term.Token())
		}
		valid.Add(cut, nxt.term.Start(), cur.term.Deadline())
		ctxEnd.Add(cut, nxt.term.Start(), cur.endedAt)
		proxies[cur.who].Heal()
		cur = nxt
	}
	log.check(t)
	return nil
}

// peerBlackhole plays one pair's blackhole rounds of the plain recipe, on
// two connections through proxies, with 1s session timeouts.
func peerBlackhole(t *testing.T, addr, root string, p int, o *handoffbench.Overlap) error {
	dir := fmt.Sprintf("%s/peer-blackhole-%d", root, p)
	h := &peerHandOff{path: dir + "/leader", won: make(chan time.Time, 1), errs: make(chan error, 2)}
	var proxies [2]*faultproxy.Proxy
	var disconnected, session [2]chan time.Time
	for i := range h.conns {
		px, err := faultproxy.New(addr)
		if err != nil {
			return fmt.Errorf("pair %d: proxy: %w", p, err)
		}
		t.Cleanup(func() { px.Close() })
		proxies[i] = px
		c, events, err := zk.Connect([]string{px.Addr()}, time.Second, zk.WithLogger(log.New(io.Discard, "", 0)), zk.WithLogInfo(false))
		if err != nil {
			return fmt.Errorf("pair %d: connect: %w", p, err)
		}
		disconnected[i], session[i] = make(chan time.Time, 16), make(chan time.Time, 16)
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			for e := range events {
				ch := map[zk.State]chan time.Time{zk.StateDisconnected: disconnected[i], zk.StateHasSession: session[i]}[e.State]
				if e.Type == zk.EventSession && ch != nil {
					select {
					case ch <- time.Now():
					default:
					}
				}
			}
		}()
		t.Cleanup(func() { px.Heal(); c.Close(); <-drained })
		h.conns[i] = c
		if _, err := within(session[i], benchWait); err != nil {
			return fmt.Errorf("pair %d: no session: %w", p, err)
		}
	}
	if err := mkdirs(h.conns[0], dir); err != nil {
		return err
	}
	wonOrErr := func(what string) (time.Time, error) {
		select {
		case at := <-h.won:
			return at, nil
		case err := <-h.errs:
			return time.Time{}, fmt.Errorf("pair %d: %s: %w", p, what, err)
		case <-time.After(30 * time.Second):
			return time.Time{}, fmt.Errorf("pair %d: %s within 30s", p, what)
		}
	}
	go h.campaign(h.conns[0])
	if _, err := wonOrErr("no first leader"); err != nil {
		return err
	}
	go h.campaign(h.conns[1])
	holder := 0
	for round := range blackholePerPair {
		time.Sleep(400*time.Millisecond + rand.N(400*time.Millisecond))
		for range len(disconnected[holder]) {
			<-disconnected[holder] // none of this round's
		}
		cut := time.Now()
		proxies[holder].Blackhole()
		won, err := wonOrErr(fmt.Sprintf("round %d: no take-over", round))
		if err != nil {
			return err
		}
		gone, err := within(disconnected[holder], 30*time.Second)
		if err != nil {
			return fmt.Errorf("pair %d round %d: the cut leader saw no disconnection: %w", p, round, err)
		}
		o.Add(cut, won, gone)
		for range len(session[holder]) {
			<-session[holder]
		}
		proxies[holder].Heal()
		if _, err := within(session[holder], 30*time.Second); err != nil {
			return fmt.Errorf("pair %d round %d: the cut leader got no new session: %w", p, round, err)
		}
		go h.campaign(h.conns[holder])
		holder = 1 - holder
	}
	return h.conns[holder].Delete(h.path, -1)
}

// within waits up to d for a time on ch.
func within(ch <-chan time.Time, d time.Duration) (time.Time, error) {
	return bounded.Within(ch, d, "nothing")
}

// benchCrash measures simba's fail-over after the holder, a process of its
// own, is killed with SIGKILL.
func benchCrash(t *testing.T, addr, root string, report *strings.Builder) {
	fmt.Fprintln(report, "### Fail-over after SIGKILL of the holder's process")
	fmt.Fprintln(report)
	fmt.Fprintln(report, "| session timeout (granted) | rounds | p50 | p90 | p99 | max |")
	fmt.Fprintln(report, "|---|---:|---:|---:|---:|---:|")
	for _, c := range []struct {
		ttl    time.Duration
		rounds int
	}{{time.Second, 10}, {4 * time.Second, 5}} {
		cl := client(t, newBackendAt(t, addr, root), c.ttl)
		ch := make(chan started, 1)
		var d []time.Duration
		var granted time.Duration
		for range c.rounds {
			f, g := crashRound(t, addr, root, cl, c.ttl, ch)
			d, granted = append(d, f), g
		}
		fmt.Fprintf(report, "| %v (%v) | %d | %s |\n", c.ttl, granted, len(d), handoffbench.Summary(d))
		require.NoError(t, cl.Close())
	}
	fmt.Fprintln(report)
}

// peerHandOff hands over by the plain recipe, on two *zk.Conns: create an
// ephemeral znode; while another session's exists, wait on an exists watch
// and try again; hand off by deleting it. The time from the holder's
// delete to the other's successful create is taken.
type peerHandOff struct {
	path   string
	conns  [2]*zk.Conn
	holder int
	won    chan time.Time
	errs   chan error
}

func newPeerHandOff(t *testing.T, addr, root string) *peerHandOff {
	dir := root + "/peer-plain"
	h := &peerHandOff{path: dir + "/leader", won: make(chan time.Time, 1), errs: make(chan error, 1)}
	h.conns = [2]*zk.Conn{zktest.Connect(t, addr), zktest.Connect(t, addr)}
	require.NoError(t, mkdirs(h.conns[0], dir))
	go h.campaign(h.conns[0])
	h.wait(t)
	return h
}

func (h *peerHandOff) campaign(c *zk.Conn) {
	for {
		_, err := c.Create(h.path, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		if err == nil {
			h.won <- time.Now()
			return
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			h.errs <- fmt.Errorf("peer create: %w", err)
			return
		}
		ok, _, ev, err := c.ExistsW(h.path)
		if err != nil {
			h.errs <- fmt.Errorf("peer exists: %w", err)
			return
		}
		if ok {
			<-ev
		}
	}
}

func (h *peerHandOff) wait(t *testing.T) time.Time {
	select {
	case at := <-h.won:
		return at
	case err := <-h.errs:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("no peer hand-off within 10s")
	}
	return time.Time{}
}

func (h *peerHandOff) once(settle time.Duration) (handoffbench.Round, error) {
	go h.campaign(h.conns[1-h.holder])
	time.Sleep(settle)
	start := time.Now()
	if err := h.conns[h.holder].Delete(h.path, -1); err != nil {
		return handoffbench.Round{}, fmt.Errorf("peer delete: %w", err)
	}
	var at time.Time
	select {
	case at = <-h.won:
	case err := <-h.errs:
		return handoffbench.Round{}, err
	case <-time.After(benchWait):
		return handoffbench.Round{}, fmt.Errorf("no peer hand-off within %v", benchWait)
	}
	h.holder = 1 - h.holder
	return handoffbench.Round{Total: at.Sub(start)}, nil
}

func (h *peerHandOff) close() error { return h.conns[h.holder].Delete(h.path, -1) }
