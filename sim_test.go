package simba_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/simtest"
)

// The simulator is simtest's, the package users test their own tasks with:
// its cluster, faults, fenced resources and term checks (I1–I6), run here
// with the library's own workload and the checks only the library's tests
// can make (what the tasks were told of their terms, I4 and I7).

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

// simulation is the library's workload of one seed: every node contends for
// the elections and the partition group, with tasks of several behaviours
// (taskKinds), all writing with their tokens to one fenced register per
// lease.
type simulation struct {
	seed      uint64
	shape     simShape
	elections []string
	groupSize int             // partitions of group "g", 0 for none
	obs       *check.Observer // what the tasks were told of their terms

	mu    sync.Mutex
	tasks map[*simtest.Node]*simTasks
}

// simTasks are one node's tasks, which custom faults stop and start.
type simTasks struct {
	elections map[string]*simba.LeaderTask
	group     *simba.GroupTask
}

// simConfig returns the simtest Config and setup of the library's
// simulator; fenced false turns the register's fences off (the negative
// control).
func simConfig(shape simShape, fenced bool) (simtest.Config, func(c *simtest.Cluster)) {
	var s *simulation // the seed's, made by Vary, which runs first
	cfg := simtest.Config{
		TTL:     3 * time.Second,
		Backend: []memory.Option{memory.WithTTLBounds(0, simTTL)},
		// Faults of the backend's link and processes; the tasks make
		// their own pauses, between a check and a write.
		Kinds:    []simtest.Kind{simtest.KindPartition, simtest.KindPartition, simtest.KindSlow, simtest.KindExpire, simtest.KindCrash, simtest.KindRestart},
		Recovery: simTTL + simRenewal + 500*time.Millisecond,
		// Stubborn tasks and paused writers write late on purpose: the
		// fence is what must stop them.
		LateGrace:       -1,
		ResourceLatency: time.Millisecond,
		Unfenced:        !fenced,
		Seeds:           2000,
	}
	if raceEnabled {
		cfg.Seeds = 300
	}
	cfg.Vary = func(seed uint64, cfg *simtest.Config) {
		s = newSimulation(seed, shape)
		cfg.Nodes = s.shape.nodes
		cfg.FaultEvery = s.shape.faultEvery
		cfg.Duration = time.Duration(s.shape.faults) * s.shape.faultEvery
		cfg.Random = s.fault
	}
	return cfg, func(c *simtest.Cluster) {
		c.Logf("seed %d: %d nodes, elections %v, group of %d partitions", c.Seed(), s.shape.nodes, s.elections, s.groupSize)
		c.Start(s.startNode)
		c.Finally("what the tasks were told", func() error { return s.finalChecks(c) })
	}
}

func newSimulation(seed uint64, shape simShape) *simulation {
	rng := rand.New(rand.NewPCG(seed, 0x51ba))
	s := &simulation{seed: seed, obs: &check.Observer{}, tasks: map[*simtest.Node]*simTasks{}}
	for i := range 1 + rng.IntN(2) {
		s.elections = append(s.elections, fmt.Sprintf("e%d", i))
	}
	if shape.partitions > 0 {
		s.groupSize = shape.partitions
	} else if rng.IntN(2) == 0 {
		s.groupSize = 4 + rng.IntN(13)
	}
	if shape.nodes == 0 {
		shape.nodes = 3 + rng.IntN(3)
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
	return s
}

// startNode starts every election and the group on a new process.
func (s *simulation) startNode(n *simtest.Node) error {
	ts := &simTasks{elections: map[string]*simba.LeaderTask{}}
	s.mu.Lock()
	s.tasks[n] = ts
	s.mu.Unlock()
	for _, e := range s.elections {
		if err := s.startElection(n, ts, e); err != nil {
			return err
		}
	}
	if s.groupSize > 0 {
		return s.startGroup(n, ts)
	}
	return nil
}

// finalChecks compares what the tasks were told with the backend's grants
// (I4, I7), and looks for group members left behind (I6).
func (s *simulation) finalChecks(c *simtest.Cluster) error {
	grants := check.MemoryGrants(c.Backend().History())
	errs := check.Observed(s.obs.Observations(), grants)
	errs = append(errs, check.HandOffOrder(s.obs.Exits(), grants)...)
	if ms := c.Backend().Members("g"); len(ms) > 0 {
		errs = append(errs, fmt.Errorf("I6: members left after Close: %v", ms))
	}
	return errors.Join(errs...)
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

func (s *simulation) startElection(n *simtest.Node, ts *simTasks, e string) error {
	kind := n.Rand().IntN(numKinds)
	var task *simba.LeaderTask
	var err error
	if kind == kindScheduled {
		task, err = n.Client().Election(e).Schedule(simba.FixedRate(500*time.Millisecond), s.scheduledRun(n))
	} else {
		task, err = n.Client().Election(e).RunWhileLeader(s.leaderRun(n, kind))
	}
	if err != nil {
		return fmt.Errorf("starting %s: %w", e, err)
	}
	s.mu.Lock()
	ts.elections[e] = task
	s.mu.Unlock()
	return nil
}

func (s *simulation) startGroup(n *simtest.Node, ts *simTasks) error {
	run := s.leaderRun(n, kindWriter)
	task, err := n.Client().Group("g", s.groupSize).RunWhileLeader(func(ctx context.Context, term *simba.Term, _ int) error {
		return run(ctx, term)
	})
	if err != nil {
		return fmt.Errorf("starting the group: %w", err)
	}
	s.mu.Lock()
	ts.group = task
	s.mu.Unlock()
	return nil
}

// write writes the term's token to the lease's register. It is sent
// whatever the run's ctx says, as a write already decided on is: the
// register's fence decides.
func write(n *simtest.Node, term *simba.Term) {
	_ = n.Register(term.Name()).Write(context.Background(), term.Token(), n.Name())
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
func (s *simulation) leaderRun(n *simtest.Node, kind int) func(context.Context, *simba.Term) error {
	node := n.Name()
	return func(ctx context.Context, term *simba.Term) error {
		defer s.obs.Exited(node, term)
		r := s.taskRand(node, term)
		if kind == kindStubborn {
			for s.obs.Valid(node, term) { // ignores ctx
				write(n, term)
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
			write(n, term)
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
func (s *simulation) scheduledRun(n *simtest.Node) func(context.Context, *simba.Term) error {
	node := n.Name()
	var calls atomic.Uint64
	return func(ctx context.Context, term *simba.Term) error {
		defer s.obs.Exited(node, term)
		r := rand.New(rand.NewPCG(s.seed, calls.Add(1)))
		if s.obs.EnsureValid(node, term, 100*time.Millisecond) != nil {
			return nil
		}
		write(n, term)
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

// fault draws one random fault: simtest's, or one of the library's own,
// which stop a task in the middle of its term.
func (s *simulation) fault(r *rand.Rand, cfg *simtest.Config) simtest.Fault {
	slot := 1 + r.IntN(cfg.Nodes)
	switch r.IntN(8) {
	case 6: // stop an election's task mid-term, and start it again once it has handed off
		e := s.elections[r.IntN(len(s.elections))]
		return simtest.Custom(fmt.Sprintf("slot %d: %s stopped and restarted", slot, e), 0, func(c *simtest.Cluster) {
			n, ts := s.node(c, slot)
			ts.elections[e].Stop()
			<-ts.elections[e].Done()
			if err := s.startElection(n, ts, e); err != nil {
				c.Logf("%s: restarting %s: %v", n.Name(), e, err)
			}
		})
	case 7: // leave the group in the middle of its hand-offs, and rejoin
		if s.groupSize == 0 {
			return simtest.RandomFault(r, cfg)
		}
		return simtest.Custom(fmt.Sprintf("slot %d: group stopped and restarted", slot), 0, func(c *simtest.Cluster) {
			n, ts := s.node(c, slot)
			ts.group.Stop()
			<-ts.group.Done()
			if err := s.startGroup(n, ts); err != nil {
				c.Logf("%s: restarting the group: %v", n.Name(), err)
			}
		})
	}
	return simtest.RandomFault(r, cfg)
}

// node returns the process of slot and its tasks.
func (s *simulation) node(c *simtest.Cluster, slot int) (*simtest.Node, *simTasks) {
	n := c.Node(slot)
	s.mu.Lock()
	defer s.mu.Unlock()
	return n, s.tasks[n]
}

// TestSimulationHour simulates one hour of 10 nodes sharing a group of 64
// partitions and the elections, a fault every 20s on average, and reports
// how long it took.
func TestSimulationHour(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("an hour of virtual time: a few seconds, ten times more under the race detector")
	}
	start := time.Now()
	cfg, setup := simConfig(simShape{nodes: 10, partitions: 64, faults: 180, faultEvery: 20 * time.Second, writeEvery: 5 * time.Second}, true)
	r := simtest.Simulate(t, cfg, 1, setup)
	if r.Failed() {
		t.Fatal(r.Report())
	}
	t.Logf("one simulated hour of 10 nodes, 64 partitions, %d faults: %d terms, %d writes, in %v",
		len(r.Schedule), len(r.Terms), len(r.Ops), time.Since(start).Round(time.Millisecond))
}

// TestSimulation runs the simulator over many seeds (2,000; 300 under the
// race detector) and checks the invariants I1–I7 on each; a failure prints
// the seed, its schedule and its timeline, and the command that replays it:
//
//	go test -run '^TestSimulation$' -simtest.seeds=1 -simtest.seed=SEED -v
func TestSimulation(t *testing.T) {
	cfg, setup := simConfig(simShape{}, true)
	simtest.Run(t, cfg, setup)
}

// firstCaught runs seeds from 0 until one breaks the invariant named want
// ("I3"), and returns it, or nil after seeds.
func firstCaught(t *testing.T, cfg simtest.Config, setup func(*simtest.Cluster), seeds int, want string) *simtest.Result {
	t.Helper()
	for seed := range uint64(seeds) {
		r := simtest.Simulate(t, cfg, seed, setup)
		for _, err := range r.Violations {
			if strings.HasPrefix(err.Error(), want+":") || strings.Contains(err.Error(), "\n"+want+":") || strings.Contains(err.Error(), ": "+want+":") {
				t.Logf("caught at seed %d (%d violations): %v", seed, len(r.Violations), err)
				return r
			}
		}
		if r.Failed() {
			t.Logf("seed %d: %d violations, none of %s: %v", seed, len(r.Violations), want, r.Violations[0])
		}
	}
	return nil
}

// TestSimulationNegativeControl runs the same workload with the registers'
// fences off: some writes must then be stale, or the workload does not
// exercise what fencing protects against.
func TestSimulationNegativeControl(t *testing.T) {
	cfg, setup := simConfig(simShape{}, false)
	if firstCaught(t, cfg, setup, 100, "I3") == nil {
		t.Fatal("no stale write got through an unfenced register in 100 seeds: the workload is too weak")
	}
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
			cfg, setup := simConfig(simShape{}, true)
			if firstCaught(t, cfg, setup, 200, bug.want) == nil {
				t.Fatalf("planted bug %q went unnoticed by the %s checker in 200 seeds", bug.name, bug.want)
			}
		})
	}
}
