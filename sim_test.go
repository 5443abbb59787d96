package simba_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/check"
)

var (
	simSeeds = flag.Int("simba.seeds", 0, "seeds the simulator runs (default 2000; 300 under the race detector)")
	simFirst = flag.Uint64("simba.seed", 0, "first seed: with -simba.seeds=1, replays that seed")
)

// Simulation parameters: sessions request 3s and are granted 2.5s.
const (
	simTTL     = 2500 * time.Millisecond
	simRenewal = simTTL / 3
)

// simShape sizes a simulation; the zero value picks the default shape from
// the seed: 3–5 nodes, 1–2 elections, half the time a group of 4–16
// partitions, 20 faults about 1.5s apart.
type simShape struct {
	nodes      int
	partitions int
	faults     int
	faultEvery time.Duration // mean gap between faults
	writeEvery time.Duration // writers' period
}

// simulation is one seeded run of the simulator: nodes of a cluster on the
// memory backend contending for elections and a partition group, under
// random faults, all writing to a fenced register. Everything it does
// derives from the seed, and its log says what happened when.
type simulation struct {
	t      *testing.T
	seed   uint64
	rng    *rand.Rand // the scenario's choices: only the driving goroutine uses it
	b      *memory.Backend
	h      *history
	reg    *check.Register
	obs    *check.Observer // what the tasks were told of their terms
	start  time.Time
	end    time.Time // when the faults ended
	logMu  sync.Mutex
	log    []string
	faults sync.WaitGroup // heals and delay resets in flight

	shape     simShape
	elections []string
	groupSize int // partitions of group "g", 0 for none
	nodes     []*simNode
	nextNode  int
	retired   []*simNode // crashed or closed, closing in the background
	closing   sync.WaitGroup
}

// simNode is one process of the simulated cluster.
type simNode struct {
	name   string
	client *simba.Client
	node   *memory.Node
	tasks  map[string]*simba.LeaderTask
	group  *simba.GroupTask
	cut    atomic.Bool // partitioned
}

func (s *simulation) logf(format string, args ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	s.log = append(s.log, fmt.Sprintf("%8.3fs ", time.Since(s.start).Seconds())+fmt.Sprintf(format, args...))
}

// simulate runs seed inside the caller's synctest bubble and returns every
// invariant violation found.
func simulate(t *testing.T, seed uint64, fenced bool) (*simulation, []error) {
	return simulateShape(t, seed, fenced, simShape{})
}

func simulateShape(t *testing.T, seed uint64, fenced bool, shape simShape) (*simulation, []error) {
	s := &simulation{
		t:     t,
		seed:  seed,
		rng:   rand.New(rand.NewPCG(seed, 0x51ba)),
		b:     memory.New(memory.WithTTLBounds(0, simTTL)),
		h:     newHistory(),
		reg:   check.NewRegister(fenced),
		obs:   &check.Observer{},
		start: time.Now(),
	}
	for i := range 1 + s.rng.IntN(2) {
		s.elections = append(s.elections, fmt.Sprintf("e%d", i))
	}
	if shape.partitions > 0 {
		s.groupSize = shape.partitions
	} else if s.rng.IntN(2) == 0 {
		s.groupSize = 4 + s.rng.IntN(13)
	}
	if shape.nodes == 0 {
		shape.nodes = 3 + s.rng.IntN(3)
	}
	if shape.faults == 0 {
		shape.faults = 20
	}
	if shape.faultEvery == 0 {
		shape.faultEvery = 1500 * time.Millisecond
	}
	if shape.writeEvery == 0 {
		shape.writeEvery = 200 * time.Millisecond
	}
	s.shape = shape
	for range shape.nodes {
		s.addNode()
	}
	s.logf("seed %d: %d nodes, elections %v, group of %d partitions", seed, len(s.nodes), s.elections, s.groupSize)

	for range shape.faults {
		time.Sleep(time.Duration(s.rng.Int64N(int64(2 * shape.faultEvery))))
		s.fault()
	}

	// Heal everything, then give the cluster the bound to recover.
	s.faults.Wait()
	for _, n := range s.nodes {
		n.cut.Store(false)
		n.node.Heal()
		n.node.SetDelay(0, 0)
	}
	healed := time.Now()
	s.end = healed
	bound := simTTL + simRenewal + 500*time.Millisecond
	time.Sleep(bound + 100*time.Millisecond) // terms checked at healed+bound end at Close
	s.logf("healed at %v; checking every lease is held %v later", healed.Sub(s.start), bound)
	var leases []string
	leases = append(leases, s.elections...)
	for p := range s.groupSize {
		leases = append(leases, fmt.Sprintf("g.%d", p))
	}

	// Close everything; nothing may be left behind.
	for _, n := range s.nodes {
		n.client.Close()
	}
	s.closing.Wait()
	events := len(s.h.Events())
	time.Sleep(time.Minute) // sessions of crashed nodes expire
	var errs []error
	if n := len(s.h.Events()); n != events {
		errs = append(errs, fmt.Errorf("I6: %d events delivered after Close", n-events))
	}
	if ss := s.b.Sessions(); len(ss) > 0 {
		errs = append(errs, fmt.Errorf("I6: sessions left after Close: %v", ss))
	}
	for _, l := range leases {
		if holder, _, ok := s.b.Holder(l); ok {
			errs = append(errs, fmt.Errorf("I6: lease %q still held by %s after Close", l, holder))
		}
	}
	if ms := s.b.Members("g"); len(ms) > 0 {
		errs = append(errs, fmt.Errorf("I6: members left after Close: %v", ms))
	}
	s.b.Close()

	terms, grants := s.terms(), s.grants()
	errs = append(errs, check.Terms(terms)...)
	_, e4 := check.AgainstGrants(terms, grants)
	errs = append(errs, e4...)
	errs = append(errs, check.Observed(s.obs.Observations(), grants)...)
	errs = append(errs, check.HandOffOrder(s.obs.Exits(), grants)...)
	errs = append(errs, check.StaleWrites(s.reg.Writes())...)
	errs = append(errs, check.Covered(terms, leases, healed.Add(bound))...)
	return s, errs
}

func (s *simulation) terms() []check.Term {
	var out []check.Term
	for _, term := range s.h.Terms() {
		out = append(out, check.Term{Name: term.Name(), Token: term.Token(), Start: term.Start(), End: term.Deadline()})
	}
	return out
}

func (s *simulation) grants() []check.Grant {
	var out []check.Grant
	for _, g := range s.b.History() {
		out = append(out, check.Grant{Name: g.Name, Token: g.Token, Start: g.Start, End: g.End, Ended: g.Ended, Expired: g.Reason == "expired", Evicted: g.Reason == "evicted"})
	}
	return out
}

// addNode starts a new process with every election and the group.
func (s *simulation) addNode() {
	s.nextNode++
	name := fmt.Sprintf("n%d", s.nextNode)
	mn := s.b.Node(name)
	c, err := simba.New(mn, simba.WithTTL(3*time.Second), simba.WithMemberID(name),
		simba.WithEventHandler(s.h.event), simba.WithLogger(testLogger(s.t, name)))
	if err != nil {
		s.t.Fatal(err)
	}
	n := &simNode{name: name, client: c, node: mn, tasks: map[string]*simba.LeaderTask{}}
	for _, e := range s.elections {
		s.startElection(n, e)
	}
	if s.groupSize > 0 {
		s.startGroup(n)
	}
	s.nodes = append(s.nodes, n)
}

// taskKinds are the behaviours of task functions. Every task asks about
// its term through the simulation's observer, so that the checkers see
// what it was told.
const (
	kindWriter    = iota // writes while valid; sometimes pauses before a write; takes a moment to exit
	kindScheduled        // a fixed-rate schedule; runs sometimes slow or panic
	kindStubborn         // writes while valid, ignoring cancellation, then ignores it a while longer
	numKinds
)

func (s *simulation) startElection(n *simNode, e string) {
	kind := s.rng.IntN(numKinds)
	var task *simba.LeaderTask
	var err error
	if kind == kindScheduled {
		task, err = n.client.Election(e).Schedule(simba.FixedRate(500*time.Millisecond), s.scheduledRun(n.name))
	} else {
		task, err = n.client.Election(e).RunWhileLeader(s.leaderRun(n.name, kind))
	}
	if err != nil {
		s.t.Fatalf("%s: starting %s: %v", n.name, e, err)
	}
	n.tasks[e] = task
}

func (s *simulation) startGroup(n *simNode) {
	run := s.leaderRun(n.name, kindWriter)
	task, err := n.client.Group("g", s.groupSize).RunWhileLeader(func(ctx context.Context, term *simba.Term, _ int) error {
		return run(ctx, term)
	})
	if err != nil {
		s.t.Fatalf("%s: starting the group: %v", n.name, err)
	}
	n.group = task
}

// taskRand returns the random source of one term's run: derived from the
// seed, the node and the token, so runs do not share the scenario's source.
func (s *simulation) taskRand(node string, term *simba.Term) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(node))
	h.Write([]byte(term.Name()))
	return rand.New(rand.NewPCG(s.seed^h.Sum64(), term.Token()))
}

// leaderRun is a RunWhileLeader task of the given kind.
func (s *simulation) leaderRun(node string, kind int) func(context.Context, *simba.Term) error {
	return func(ctx context.Context, term *simba.Term) error {
		defer s.obs.Exited(node, term)
		s.h.sawTerm(node, term)
		r := s.taskRand(node, term)
		if kind == kindStubborn {
			for s.obs.Valid(node, term) { // ignores ctx
				s.reg.Write(term.Name(), term.Token(), node)
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(time.Duration(r.Int64N(int64(2 * simTTL)))) // ignores ctx
			return nil
		}
		for s.obs.Valid(node, term) {
			if r.IntN(40) == 0 {
				// A pause between the check and the write (a GC pause, a
				// frozen VM): the write may come after the term ended,
				// unless (half the time) the task checks again.
				time.Sleep(time.Duration(r.Int64N(int64(3 * simTTL))))
				if r.IntN(2) == 0 && !s.obs.Valid(node, term) {
					return nil
				}
			}
			s.reg.Write(term.Name(), term.Token(), node)
			select {
			case <-ctx.Done():
				// Winding down (a flush, a close) takes a moment: the
				// lease must not be handed on before it is over.
				time.Sleep(time.Millisecond + time.Duration(r.Int64N(int64(50*time.Millisecond))))
				return nil
			case <-time.After(s.shape.writeEvery):
				s.obs.Live(node, term, ctx)
			}
		}
		return nil
	}
}

// scheduledRun is a scheduled run: a write, sometimes slow, sometimes a
// panic.
func (s *simulation) scheduledRun(node string) func(context.Context, *simba.Term) error {
	var calls atomic.Uint64
	return func(ctx context.Context, term *simba.Term) error {
		defer s.obs.Exited(node, term)
		s.h.sawTerm(node, term)
		r := rand.New(rand.NewPCG(s.seed, calls.Add(1)))
		if s.obs.EnsureValid(node, term, 100*time.Millisecond) != nil {
			return nil
		}
		s.reg.Write(term.Name(), term.Token(), node)
		switch r.IntN(10) {
		case 0:
			time.Sleep(1500 * time.Millisecond) // overruns starts
		case 1:
			panic("scheduled run failed")
		case 2:
			return errors.New("scheduled run returned an error")
		}
		return nil
	}
}

// fault injects one random fault.
func (s *simulation) fault() {
	n := s.nodes[s.rng.IntN(len(s.nodes))]
	switch s.rng.IntN(9) {
	case 0, 1: // partition for up to 3×TTL
		d := time.Duration(s.rng.Int64N(int64(3 * simTTL)))
		s.logf("%s partitioned for %v", n.name, d)
		n.cut.Store(true)
		n.node.Partition()
		s.faults.Go(func() { time.Sleep(d); n.cut.Store(false); n.node.Heal() })
	case 2: // slow replies for a while
		req, resp := time.Duration(s.rng.IntN(300))*time.Millisecond, time.Duration(s.rng.IntN(900))*time.Millisecond
		d := time.Duration(s.rng.Int64N(int64(3 * simTTL)))
		s.logf("%s delayed (request %v, response %v) for %v", n.name, req, resp, d)
		n.node.SetDelay(req, resp)
		s.faults.Go(func() { time.Sleep(d); n.node.SetDelay(0, 0) })
	case 3: // the server expires its sessions and tells it
		if !n.cut.Load() {
			s.logf("%s: sessions expired by the server", n.name)
			n.node.Expire()
		}
	case 4: // crash without release; a new node takes its place
		s.logf("%s crashed; n%d starts", n.name, s.nextNode+1)
		n.node.Crash()
		s.retire(n)
		s.addNode()
	case 5: // graceful shutdown; a new node takes its place
		s.logf("%s shut down; n%d starts", n.name, s.nextNode+1)
		s.retire(n)
		s.addNode()
	case 6: // stop an election's task mid-term, and start it again at once
		e := s.elections[s.rng.IntN(len(s.elections))]
		s.logf("%s: %s stopped and restarted", n.name, e)
		n.tasks[e].Stop()
		s.restartWhenDone(n, e)
	case 7: // leave the group in the middle of its hand-offs, and rejoin
		if n.group != nil {
			s.logf("%s: group stopped and restarted", n.name)
			<-n.group.Stop()
			s.startGroup(n)
		}
	}
}

// restartWhenDone starts election e on n again once its stopped task has
// handed off.
func (s *simulation) restartWhenDone(n *simNode, e string) {
	<-n.tasks[e].Done()
	s.startElection(n, e)
}

// retire removes n from the cluster and closes its client in the
// background (a crashed node's close only stops its goroutines).
func (s *simulation) retire(n *simNode) {
	for i, x := range s.nodes {
		if x == n {
			s.nodes = append(s.nodes[:i], s.nodes[i+1:]...)
			break
		}
	}
	s.closing.Go(func() { n.client.Close() })
}

// TestSimulationHour simulates one hour of 10 nodes sharing a group of 64
// partitions and the elections, a fault every 20s on average, and reports
// how long it took.
func TestSimulationHour(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("an hour of virtual time: a few seconds, ten times more under the race detector")
	}
	start := time.Now()
	var errs []error
	var sim *simulation
	synctest.Test(t, func(t *testing.T) {
		sim, errs = simulateShape(t, 1, true, simShape{nodes: 10, partitions: 64, faults: 180, faultEvery: 20 * time.Second, writeEvery: 5 * time.Second})
	})
	if len(errs) > 0 {
		t.Fatalf("%d violations:\n%s\nfaults:\n%s", len(errs), errors.Join(errs...), strings.Join(sim.log, "\n"))
	}
	t.Logf("one simulated hour (%v) of 10 nodes, 64 partitions, 180 faults: %d terms, %d writes, in %v",
		sim.end.Sub(sim.start).Round(time.Second), len(sim.h.Terms()), len(sim.reg.Writes()), time.Since(start).Round(time.Millisecond))
}

// seeds returns the seeds of this run.
func seeds() (first uint64, count int) {
	count = *simSeeds
	if count == 0 {
		count = 2000
		if raceEnabled {
			count = 300
		}
	}
	return *simFirst, count
}

// TestSimulation runs the simulator over many seeds and checks the
// invariants I1–I6 on each; a failure prints the seed and its fault log:
//
//	go test -run TestSimulation -simba.seeds=1 -simba.seed=SEED -v
func TestSimulation(t *testing.T) {
	first, count := seeds()
	var terms, writes, rejected, violations, failed int
	start := time.Now()
	for seed := first; seed < first+uint64(count); seed++ {
		var errs []error
		var sim *simulation
		synctest.Test(t, func(t *testing.T) { sim, errs = simulate(t, seed, true) })
		terms += len(sim.h.Terms())
		for _, w := range sim.reg.Writes() {
			writes++
			if !w.Accepted {
				rejected++
			}
		}
		if len(errs) > 0 {
			violations += len(errs)
			failed++
			t.Errorf("seed %d: %d violations; replay with -simba.seeds=1 -simba.seed=%d\n%s\nfaults:\n%s",
				seed, len(errs), seed, errors.Join(errs...), strings.Join(sim.log, "\n"))
			if !testing.Verbose() {
				return
			}
		}
	}
	t.Logf("%d seeds in %v: %d terms, %d writes, %d stale writes rejected by the fenced register, %d violations in %d seeds",
		count, time.Since(start).Round(time.Millisecond), terms, writes, rejected, violations, failed)
}

// TestSimulationNegativeControl runs the same workload with the register's
// fencing off: some writes must then be stale, or the workload does not
// exercise what fencing protects against.
func TestSimulationNegativeControl(t *testing.T) {
	for seed := range uint64(100) {
		var errs []error
		synctest.Test(t, func(t *testing.T) { _, errs = simulate(t, seed, false) })
		for _, err := range errs {
			if strings.HasPrefix(err.Error(), "I3:") {
				t.Logf("seed %d: without fencing: %v", seed, err)
				return
			}
		}
	}
	t.Fatal("no stale write got through an unfenced register in 100 seeds: the workload is too weak")
}

// TestSimulationCatchesPlantedBugs plants each known safety bug and requires
// the checkers to catch it within the seeds of one run.
func TestSimulationCatchesPlantedBugs(t *testing.T) {
	for _, bug := range []struct {
		name string
		want string // the invariant whose checker must catch it
	}{
		{"deadline-from-reply", "I1"},
		{"no-margin", "I4"},
		{"requested-ttl", "I1"},
		// These two leave the library's own account of its terms
		// consistent: only what the tasks were told, compared with the
		// backend's grants, shows them.
		{"valid-late", "I4"},
		{"release-before-exit", "I7"},
		{"deadline-timer-dead", "I4"}, // the run's ctx stays live after the backend expired the lease
	} {
		t.Run(bug.name, func(t *testing.T) {
			simba.PlantBug(t, bug.name)
			for seed := range uint64(200) {
				var errs []error
				synctest.Test(t, func(t *testing.T) { _, errs = simulate(t, seed, true) })
				for _, err := range errs {
					if strings.HasPrefix(err.Error(), bug.want+":") {
						t.Logf("caught at seed %d (%d violations): %v", seed, len(errs), err)
						return
					}
				}
				if len(errs) > 0 {
					t.Logf("seed %d: %d violations, none of %s: %v", seed, len(errs), bug.want, errs[0])
				}
			}
			t.Fatalf("planted bug %q went unnoticed by the %s checker in 200 seeds", bug.name, bug.want)
		})
	}
}
