package simtest

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/check"
)

var (
	flagSeeds = flag.Int("simtest.seeds", 0, "seeds each simtest.Run runs (0: the Config's)")
	flagSeed  = flag.Uint64("simtest.seed", 0, "first seed of each simtest.Run: with -simtest.seeds=1, replays that seed")
	flagLogs  = flag.Bool("simtest.logs", false, "log what every node's client does, through t.Log")
)

// Config shapes a simulation. The zero Config is ready to use.
type Config struct {
	// Nodes is how many processes the cluster runs (default 3). A crashed
	// or restarted node is replaced at once by a new process in its slot.
	Nodes int
	// TTL is the session TTL the nodes' clients ask for (default 3s).
	TTL time.Duration
	// Options are more options for every node's simba.New, after the
	// package's own (WithTTL, WithMemberID and a logger).
	Options []simba.Option
	// Backend are options for the memory backend, such as
	// memory.WithTTLBounds to grant a TTL other than the one requested.
	Backend []memory.Option
	// Seeds is how many seeds Run runs (default 100; the -simtest.seeds
	// flag overrides it), from FirstSeed (or -simtest.seed).
	Seeds     int
	FirstSeed uint64
	// Duration is how long the faults go on (default 1 minute of virtual
	// time); then the faults heal, the cluster has Recovery (default
	// 2×TTL) to hold every lease again, and the nodes close.
	Duration time.Duration
	Recovery time.Duration
	// Script, when not nil, is the fault schedule of every seed, instead
	// of a random one drawn from the seed (an empty Script: no faults).
	Script []Fault
	// FaultEvery is the mean gap between random faults (default TTL), and
	// Kinds the kinds they are drawn from (default DefaultKinds); a kind
	// listed twice is drawn twice as often.
	FaultEvery time.Duration
	Kinds      []Kind
	// Random, when set, draws each random fault instead of the package,
	// for faults of the test's own (Custom); it may return the package's
	// RandomFault.
	Random func(r *rand.Rand, cfg *Config) Fault
	// ResourceLatency is the round trip of an operation on the package's
	// resources (default 2ms).
	ResourceLatency time.Duration
	// LateGrace is how long after its term ended a task may still send a
	// write or claim with the term's token before it counts as ignoring
	// its ctx (default TTL/10; negative: never checked). The time a
	// paused process spends frozen does not count: what is checked is
	// when the task called.
	LateGrace time.Duration
	// Vary, when set, adjusts the Config of each seed before the seed
	// runs: a cluster size or a fault mix drawn from the seed, so that one
	// Run covers many shapes. Vary must be deterministic in the seed.
	Vary func(seed uint64, cfg *Config)
	// Unfenced turns the fences of every resource off: they accept any
	// token, and the checks then show what the tokens were protecting
	// against (the negative control). Token checks still run.
	Unfenced bool
}

// DefaultKinds are the kinds random faults are drawn from by default: every
// kind but Custom, pauses three times as often and partitions twice, as
// they are the faults that break leader tasks.
var DefaultKinds = []Kind{KindPause, KindPause, KindPause, KindPartition, KindPartition, KindSlow, KindExpire, KindCrash, KindRestart, KindHandOff}

func (cfg Config) withDefaults() Config {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 3
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 3 * time.Second
	}
	if cfg.Seeds <= 0 {
		cfg.Seeds = 100
	}
	if cfg.Duration <= 0 {
		cfg.Duration = time.Minute
	}
	if cfg.Recovery <= 0 {
		cfg.Recovery = 2 * cfg.TTL
	}
	if cfg.FaultEvery <= 0 {
		cfg.FaultEvery = cfg.TTL
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = DefaultKinds
	}
	if cfg.ResourceLatency <= 0 {
		cfg.ResourceLatency = 2 * time.Millisecond
	}
	if cfg.LateGrace == 0 {
		cfg.LateGrace = cfg.TTL / 10
	}
	return cfg
}

// Run simulates each seed of cfg in its own synctest bubble, calling setup
// in the bubble to build the seed's resources and start its nodes, and
// fails t with the seed's report ([Result.Report]) at the first seed that
// breaks an invariant. It must be called from the test's goroutine, not
// from inside a bubble.
func Run(t *testing.T, cfg Config, setup func(c *Cluster)) {
	t.Helper()
	cfg = cfg.withDefaults()
	first, count := cfg.FirstSeed, cfg.Seeds
	if *flagSeeds > 0 {
		count = *flagSeeds
	}
	flag.Visit(func(f *flag.Flag) { // -simtest.seed=0 replays seed 0 too
		if f.Name == "simtest.seed" {
			first = *flagSeed
		}
	})
	start := time.Now()
	var terms, ops, refused int
	for seed := first; seed < first+uint64(count); seed++ {
		r := Simulate(t, cfg, seed, setup)
		terms += len(r.Terms)
		ops += len(r.Ops)
		for _, op := range r.Ops {
			if !op.Accepted {
				refused++
			}
		}
		if r.Failed() {
			t.Fatalf("%s\nreplay: go test -run '^%s$' -simtest.seeds=1 -simtest.seed=%d", r.Report(), t.Name(), seed)
		}
	}
	t.Logf("simtest: %d seeds in %v: %d terms, %d resource operations (%d refused by the fences), no violation",
		count, time.Since(start).Round(time.Millisecond), terms, ops, refused)
}

// Simulate runs one seed in a synctest bubble of its own and returns what
// happened, failing t only when the simulation cannot run (setup's errors,
// a node that cannot start). Run calls it for each seed.
func Simulate(t *testing.T, cfg Config, seed uint64, setup func(c *Cluster)) *Result {
	t.Helper()
	cfg = cfg.withDefaults()
	if cfg.Vary != nil {
		cfg.Vary(seed, &cfg)
		cfg = cfg.withDefaults()
	}
	var r *Result
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, cfg, seed)
		setup(c)
		if c.startNode == nil {
			c.fatalf("simtest: setup did not call Cluster.Start: no node would run anything")
		}
		r = c.run()
	})
	return r
}

// Cluster is one seed's world: the memory backend, the nodes, the
// resources, the schedule and the record of what happened. Its methods
// are safe for concurrent use.
type Cluster struct {
	t     *testing.T
	cfg   Config
	seed  uint64
	rng   *rand.Rand // the schedule's: used by the driving goroutine only
	b     *memory.Backend
	adm   *admin.Admin
	start time.Time

	startNode func(n *Node) error

	mu         sync.Mutex
	stores     map[string]*store
	storeOrder []*store
	invariants []invariant
	slots      []*Node // the live process of each slot
	gen        []int   // incarnations of each slot
	all        []*Node
	terms      map[uint64]*Term // by token
	termOrder  []*Term
	notes      []entry
	broken     []violation
	events     int // events delivered to the subscriptions

	closing sync.WaitGroup // clients of crashed and replaced nodes
	faults  sync.WaitGroup // ends of faults with a duration
}

type invariant struct {
	name  string
	f     func() error
	final bool // checked once, at the end
}

// violation is one broken invariant, and when it was found.
type violation struct {
	inv string
	at  time.Time
	err error
}

func newCluster(t *testing.T, cfg Config, seed uint64) *Cluster {
	b, err := memory.NewWithOptions(cfg.Backend...)
	if err != nil {
		t.Fatalf("simtest: Config.Backend: %v", err)
	}
	return &Cluster{
		t: t, cfg: cfg, seed: seed,
		rng:    rand.New(rand.NewPCG(seed, 0x5117e57)),
		b:      b,
		start:  time.Now(),
		stores: map[string]*store{},
		terms:  map[uint64]*Term{},
	}
}

// Seed returns the seed being simulated.
func (c *Cluster) Seed() uint64 { return c.seed }

// Config returns the simulation's Config, with its defaults filled in.
func (c *Cluster) Config() Config { return c.cfg }

// Backend returns the memory backend the nodes share, to read its history
// (memory.Backend.History) in an invariant.
func (c *Cluster) Backend() *memory.Backend { return c.b }

// Elapsed returns the virtual time since the simulation began.
func (c *Cluster) Elapsed() time.Duration { return time.Since(c.start) }

// Start sets the function every node runs when its process starts: the
// first nodes, and each one that replaces a crashed or restarted one. It
// starts the node's work on n.Client (elections, groups, schedules, stream
// tasks) and returns; an error fails the test. Call it once, from setup.
func (c *Cluster) Start(f func(n *Node) error) { c.startNode = f }

// Invariant adds a check of the test's own over its resources, run after
// every fault and once everything has closed; an error it returns is a
// violation, reported with the seed and the timeline. It runs on the
// driving goroutine while the nodes go on: read resources through the
// Cluster's handles (Cluster.Counter, …), which take no time.
func (c *Cluster) Invariant(name string, f func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.invariants = append(c.invariants, invariant{name: name, f: f})
}

// Finally adds a check of the test's own run once, after every node has
// closed and the faults have long healed: what must hold at the end (every
// message processed, a total reached). An error it returns is a violation.
func (c *Cluster) Finally(name string, f func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.invariants = append(c.invariants, invariant{name: name, f: f, final: true})
}

// Node returns the process that runs in slot (1 to Config.Nodes) now, or
// nil for a slot the cluster does not have: for a custom fault (Fault.Do)
// to act on.
func (c *Cluster) Node(slot int) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if slot < 1 || slot > len(c.slots) {
		return nil
	}
	return c.slots[slot-1]
}

// Logf adds a line to the timeline a failure prints.
func (c *Cluster) Logf(format string, args ...any) { c.note("--", fmt.Sprintf(format, args...)) }

func (c *Cluster) note(who, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notes = append(c.notes, entry{at: time.Now(), who: who, what: what})
}

// Node is one process of the cluster: a simba.Client on its own memory
// backend node, whose faults the schedule drives.
type Node struct {
	c      *Cluster
	name   string
	mem    *memory.Node
	client *simba.Client
	rng    *rand.Rand

	mu      sync.Mutex
	paused  int           // pauses in force
	resume  chan struct{} // closed when the last pause ends
	cut     int           // pauses and partitions cutting the link
	slow    int           // slow faults in force
	crashed chan struct{}

	ctx  context.Context // ends when the process stops
	stop context.CancelFunc
}

// Context returns a context that ends when the node's process stops: when
// it crashes, when it is restarted, and when the simulation closes every
// node (then before its client closes). Give it to work started with a
// ctx, such as jobs.Run, started in a goroutine of the start function.
func (n *Node) Context() context.Context { return n.ctx }

// Name returns the node's member ID: "n1", "n2", …, and "n2-2" for the
// second process of slot 2.
func (n *Node) Name() string { return n.name }

// Client returns the node's client.
func (n *Node) Client() *simba.Client { return n.client }

// Rand returns a random source of the node's own, derived from the seed and
// the node's name, for the task's choices: the same on every replay.
func (n *Node) Rand() *rand.Rand { return n.rng }

// Logf adds a line about the node to the timeline.
func (n *Node) Logf(format string, args ...any) { n.c.note(n.name, fmt.Sprintf(format, args...)) }

// frozen waits while n is paused, whatever becomes of the caller's ctx (a
// frozen process notices nothing; a pause ends by itself), and fails once
// n has crashed.
func (n *Node) frozen() error {
	for {
		n.mu.Lock()
		crashed, resume, paused := n.crashed, n.resume, n.paused > 0
		n.mu.Unlock()
		select {
		case <-crashed:
			return ErrCrashed
		default:
		}
		if !paused {
			return nil
		}
		select {
		case <-resume:
		case <-crashed:
			return ErrCrashed
		}
	}
}

// fatalf stops the simulation that cannot go on: it kills every process,
// closes their clients, the admin and the backend, so that nothing is left
// running in the bubble, and fails the test. On the driving goroutine only.
func (c *Cluster) fatalf(format string, args ...any) {
	c.mu.Lock()
	all := slices.Clone(c.all)
	c.mu.Unlock()
	for _, n := range all {
		n.kill()
		n.heal()
		c.closing.Go(func() { n.client.Close() })
	}
	c.closing.Wait()
	c.faults.Wait()
	if c.adm != nil {
		c.adm.Close()
	}
	c.b.Close()
	c.t.Fatalf(format, args...)
}

// kill ends n's process: its resource operations fail from then on.
func (n *Node) kill() {
	n.stop()
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.crashed:
	default:
		close(n.crashed)
	}
}

// shutdown closes n's client gracefully, as a process does on SIGTERM. A
// client that has not closed within 5×TTL has a task function that
// ignores its ctx: that is a violation, and simtest then kills the
// process, so that the function's next resource operation fails and it
// can return. (A function that never returns and touches no resource
// cannot be stopped: Go cannot end a goroutine from outside.)
func (c *Cluster) shutdown(n *Node) {
	n.stop()
	within := 5 * c.cfg.TTL
	ctx, cancel := context.WithTimeout(context.Background(), within)
	err := n.client.Shutdown(ctx)
	cancel()
	if err == nil {
		return
	}
	c.violate("I6", fmt.Errorf("I6: %s had not closed %v after its client began closing (%v): a task function ignores its ctx; simtest killed the process", n.name, within, err))
	n.Logf("killed: its client did not close")
	n.kill()
	n.client.Close()
}

// violate records a violation found now.
func (c *Cluster) violate(inv string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.broken = append(c.broken, violation{inv: inv, at: time.Now(), err: err})
}

// addNode starts the process of slot (0-based).
func (c *Cluster) addNode(slot int) *Node {
	c.mu.Lock()
	for len(c.gen) <= slot {
		c.gen = append(c.gen, 0)
		c.slots = append(c.slots, nil)
	}
	c.gen[slot]++
	name := fmt.Sprintf("n%d", slot+1)
	if c.gen[slot] > 1 {
		name = fmt.Sprintf("n%d-%d", slot+1, c.gen[slot])
	}
	c.mu.Unlock()
	h := fnv.New64a()
	h.Write([]byte(name))
	n := &Node{c: c, name: name, mem: c.b.Node(name), crashed: make(chan struct{}),
		rng: rand.New(rand.NewPCG(c.seed, h.Sum64()))}
	n.ctx, n.stop = context.WithCancel(context.Background())
	opts := append([]simba.Option{simba.WithTTL(c.cfg.TTL), simba.WithMemberID(name), simba.WithLogger(logger(c.t, name)),
		simba.WithEventHandler(func(e simba.Event) { c.event(n, e) })}, c.cfg.Options...)
	cl, err := simba.New(n.mem, opts...)
	if err != nil {
		n.stop()
		c.fatalf("simtest: starting %s: %v", name, err)
	}
	n.client = cl
	c.mu.Lock()
	c.slots[slot] = n
	c.all = append(c.all, n)
	c.mu.Unlock()
	c.note(name, "starts")
	if err := c.startNode(n); err != nil {
		c.fatalf("simtest: %s: the start function failed: %v", name, err)
	}
	return n
}

func logger(t *testing.T, node string) *slog.Logger {
	if !*flagLogs {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", node)
}

// Term is one term as the simulation saw it: from the node's Elected and
// Revoked events.
type Term struct {
	Lease string
	Token uint64
	Node  string
	Start time.Time
	End   time.Time // zero while it lasts
	How   string    // why it ended
}

func (c *Cluster) event(n *Node, e simba.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events++
	switch e := e.(type) {
	case simba.Elected:
		t := &Term{Lease: e.Election, Token: e.Token, Node: n.name, Start: e.At}
		c.terms[e.Token] = t
		c.termOrder = append(c.termOrder, t)
		c.notes = append(c.notes, entry{at: e.At, who: n.name, what: fmt.Sprintf("elected   %s, token %d", e.Election, e.Token)})
	case simba.Revoked:
		if t := c.terms[e.Token]; t != nil && t.End.IsZero() {
			t.End, t.How = e.At, e.Reason.String()
		}
		c.notes = append(c.notes, entry{at: e.At, who: n.name, what: fmt.Sprintf("revoked   %s, token %d (%v)", e.Election, e.Token, e.Reason)})
	}
}

// lateOp reports a write or claim sent with a term's token longer than
// LateGrace after the term ended. With the store's lock held, not c.mu.
func (c *Cluster) lateOp(op Op) string {
	if c.cfg.LateGrace < 0 || op.Token == 0 {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.terms[op.Token]
	if t == nil || t.End.IsZero() || !op.Issued.After(t.End.Add(c.cfg.LateGrace)) {
		return ""
	}
	return fmt.Sprintf("%s sent a %s with token %d %v after its term of %s ended (%s): the task ignores its ctx",
		op.Node, op.Kind, op.Token, op.Issued.Sub(t.End), t.Lease, t.How)
}

// checkInvariants runs the test's invariants, and with final its final
// checks too.
func (c *Cluster) checkInvariants(final bool) {
	c.mu.Lock()
	invs := slices.Clone(c.invariants)
	c.mu.Unlock()
	for _, inv := range invs {
		if inv.final && !final {
			continue
		}
		if err := inv.f(); err != nil {
			c.violate("invariant", fmt.Errorf("invariant %q: %w", inv.name, err))
		}
	}
}

// run drives the simulation: the schedule, the heal, the recovery, the
// close, and the checks.
func (c *Cluster) run() *Result {
	var err error
	c.adm, err = admin.Open(context.Background(), c.b, admin.WithTTL(c.cfg.TTL), admin.WithOperator("simtest"))
	if err != nil {
		c.fatalf("simtest: opening the admin: %v", err)
	}
	for i := range c.cfg.Nodes {
		c.addNode(i)
	}
	schedule := c.cfg.Script
	if schedule == nil {
		schedule = c.randomSchedule()
	} else {
		schedule = slices.Clone(schedule)
		sort.SliceStable(schedule, func(i, j int) bool { return schedule[i].At < schedule[j].At })
	}
	end := c.cfg.Duration
	for _, f := range schedule {
		time.Sleep(time.Until(c.start.Add(f.At)))
		c.apply(f)
		c.checkInvariants(false)
		end = max(end, f.At+f.For)
	}
	time.Sleep(time.Until(c.start.Add(end)))
	c.faults.Wait()
	c.mu.Lock()
	live := slices.Clone(c.slots)
	c.mu.Unlock()
	for _, n := range live {
		n.heal()
	}
	healed := time.Now()
	c.note("--", "every fault healed")
	covered := healed.Add(c.cfg.Recovery)
	time.Sleep(c.cfg.Recovery + 100*time.Millisecond) // terms checked at covered end at Close
	c.checkInvariants(false)

	// Close everything: nothing may be left behind.
	for _, n := range live {
		c.closing.Go(func() { c.shutdown(n) })
	}
	c.closing.Wait()
	c.adm.Close()
	c.mu.Lock()
	events := c.events
	c.mu.Unlock()
	time.Sleep(2 * c.cfg.TTL) // sessions of crashed nodes expire
	c.mu.Lock()
	if late := c.events - events; late > 0 {
		c.broken = append(c.broken, violation{inv: "I6", at: time.Now(), err: fmt.Errorf("I6: %d events delivered after every client had closed", late)})
	}
	c.mu.Unlock()
	c.checkInvariants(true)
	return c.result(schedule, healed, covered)
}

// Result is what one seed did: its schedule, the terms, the resources'
// operations, and every violation found.
type Result struct {
	Seed       uint64
	Schedule   []Fault
	Terms      []Term
	Ops        []Op
	Violations []error

	start    time.Time
	found    []violation
	notes    []entry
	once     sync.Once
	timeline []entry // built by lines
}

// Failed reports whether the seed broke an invariant.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

func (c *Cluster) result(schedule []Fault, healed, covered time.Time) *Result {
	r := &Result{Seed: c.seed, Schedule: schedule, start: c.start}
	c.mu.Lock()
	for _, t := range c.termOrder {
		r.Terms = append(r.Terms, *t)
	}
	found := slices.Clone(c.broken)
	notes := slices.Clone(c.notes)
	stores := slices.Clone(c.storeOrder)
	c.mu.Unlock()
	for _, s := range stores {
		ops, broken := s.snapshot()
		r.Ops = append(r.Ops, ops...)
		found = append(found, broken...)
	}
	sort.SliceStable(r.Ops, func(i, j int) bool { return r.Ops[i].At.Before(r.Ops[j].At) })

	// The terms: one valid term per lease at any instant, tokens
	// increasing, each term within its backend grant.
	var terms []check.Term
	leases := map[string]bool{}
	for _, t := range r.Terms {
		end := t.End
		if end.IsZero() {
			end = time.Now()
			found = append(found, violation{inv: "I6", at: covered, err: fmt.Errorf("I6: term %d of %s on %s did not end when its client closed", t.Token, t.Lease, t.Node)})
		}
		terms = append(terms, check.Term{Name: t.Lease, Token: t.Token, Start: t.Start, End: end})
		leases[t.Lease] = true
	}
	grants := check.MemoryGrants(c.b.History())
	for _, err := range check.Terms(terms) {
		found = append(found, violation{inv: prefix(err), at: atOf(err, terms), err: err})
	}
	_, errs := check.AgainstGrants(terms, grants)
	for _, err := range errs {
		found = append(found, violation{inv: "I4", at: atOf(err, terms), err: err})
	}
	names := slices.Sorted(maps.Keys(leases))
	for _, err := range check.Covered(terms, names, covered) {
		found = append(found, violation{inv: "I5", at: covered, err: fmt.Errorf("%w: not taken again within %v of the heal at %v", err, c.cfg.Recovery, healed.Sub(c.start))})
	}
	if ss := c.b.Sessions(); len(ss) > 0 {
		found = append(found, violation{inv: "I6", at: time.Now(), err: fmt.Errorf("I6: sessions left after every client closed: %v", ss)})
	}
	for _, l := range names {
		if holder, _, ok := c.b.Holder(l); ok {
			found = append(found, violation{inv: "I6", at: time.Now(), err: fmt.Errorf("I6: lease %q still held by %s after every client closed", l, holder)})
		}
	}
	c.b.Close()

	sort.SliceStable(found, func(i, j int) bool { return found[i].at.Before(found[j].at) })
	r.found = found
	for _, v := range found {
		r.Violations = append(r.Violations, v.err)
	}
	r.notes = notes
	return r
}

func prefix(err error) string {
	s, _, _ := strings.Cut(err.Error(), ":")
	return s
}

// atOf places a term checker's error on the timeline: at the start of the
// latest term it names.
func atOf(err error, terms []check.Term) time.Time {
	var at time.Time
	msg := err.Error()
	for _, t := range terms {
		if strings.Contains(msg, fmt.Sprintf("%q", t.Name)) && strings.Contains(msg, fmt.Sprintf("term %d ", t.Token)) && t.Start.After(at) {
			at = t.Start
		}
	}
	return at
}

// holdsTerm reports whether node had a term that had begun and not ended
// at at, by its events.
func (c *Cluster) holdsTerm(node string, at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.termOrder {
		if t.Node == node && !t.Start.After(at) && (t.End.IsZero() || t.End.After(at)) {
			return true
		}
	}
	return false
}
