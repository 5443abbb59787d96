package chaos

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/plant"
)

// The shape of every run.
const (
	clients = 4               // client processes running at once
	ttl     = 2 * time.Second // the TTL they request
)

// testBackend runs the fault schedule on w, then the controls, all from
// one seed.
func testBackend(t *testing.T, w world) {
	seed := scheduleSeed(t)
	t.Run("Faults", func(t *testing.T) { testFaults(t, w, seed) })
	t.Run("NegativeControl", func(t *testing.T) { testControl(t, w, seed, negativeControl) })
	t.Run("PlantedBug", func(t *testing.T) {
		for _, c := range plantedBugs {
			t.Run(c.plant, func(t *testing.T) {
				if c.plant != plantOverstatedTTL {
					plant.Require(t, c.plant) // the clients are this test binary
				}
				testControl(t, w, seed, c)
			})
		}
	})
}

// testFaults plays a seeded fault schedule against w and checks the
// invariants over what happened.
func testFaults(t *testing.T, w world, seed uint64) {
	length := scheduleDuration(t, w)
	schedule := newSchedule(seed, length, ttl, clients, w.canRestart())
	t.Logf("seed %d: %d faults over %v; replay with -chaos.seed=%d", seed, len(schedule), length, seed)
	r := newRun(t, w, runConfig{seed: seed, duration: length, fenced: true, children: clients, ttl: ttl, coverage: true})
	for _, f := range schedule {
		r.logf("scheduled: %v", f)
	}
	healed := r.play(schedule)
	s, errs := r.finish(healed)
	r.report(s, errs)
}

// A control runs the workload with a weakness put in on purpose (fencing
// off, or a bug planted in the clients) and hits the holder of the
// election with one kind of fault, again and again, until the checker
// that must catch the weakness reports it: otherwise the run is too weak
// to show what the checks are for. Every other invariant must still hold,
// but for those the weakness may break as well.
type controlSpec struct {
	plant  string    // the bug planted in the clients (see envPlant), or ""
	fenced bool      // the register's fencing
	hit    faultKind // what is done to the holder: pause, blackhole or stop
	// every: hit every client holding a lease, not only the election's
	// holder, for as many chances as there are holders in each round.
	every  bool
	rounds int      // at most
	want   string   // the prefix of the violation it must show
	also   []string // prefixes of other violations the weakness may cause
	what   string   // what the violations are, for the log
}

// negativeControl: with the register's fencing off, a holder paused
// (SIGSTOP) for 2–3×TTL sends, once resumed, the write it was about to
// send, with its old token, after the new holder wrote with a newer one.
// check.StaleWrites must report it (I3).
var negativeControl = controlSpec{fenced: false, hit: faultPause, rounds: 5, want: "I3:",
	what: "without fencing, the stale writes accepted"}

// plantedBugs are the safety bugs planted in the clients, each with the
// fault that shows it and the checker that must catch it.
var plantedBugs = []controlSpec{
	// The backend overstates the granted TTL by one TTL: a paused
	// holder's term outlives its lease, and check.Terms sees it overlap
	// the next holder's (I1). The tasks were told so: check.Observed may
	// see it too (I4), and check.HandOffOrder a lease gone before the
	// horizon promised to a run still going (I7: a watcher cannot tell
	// the expiry from a release). A holder paused between the grant of a
	// partition and its term's start starts that term once resumed, its
	// session good by the overstated TTL, after the partition's next
	// grant began: terms out of token order (I2; seen once on the
	// ZooKeeper ensemble).
	{plant: plantOverstatedTTL, fenced: true, hit: faultPause, rounds: 5, want: "I1:", also: []string{"I2:", "I4:", "I7:"},
		what: "with the TTL overstated, the overlapping terms"},
	// Term.Valid stays true for 500ms after the term ended: a holder cut
	// off from the servers (blackholed) for 1.5×TTL goes on writing after
	// the backend has freed its lease, if the backend freed it within
	// those 500ms, and if its task asks Valid (not EnsureValid or its
	// ctx). The backend frees it a drift margin (200ms) after the term's
	// end at the earliest, and later by its expiry's granularity (etcd's
	// lessor looks every 500ms, ZooKeeper's sessions expire on ticks, and
	// from the last request the server had, which may be after the last
	// renewal the client saw answered): about half the time within the
	// lie. So every holder is blackholed, each a chance of its own, up to
	// sixteen times (the rounds stop once one shows it; on a kube-apiserver
	// of a machine testing four packages at once, eight rounds missed it
	// in one CI run). The library's own account of
	// its terms is consistent, so only what the tasks were told, against
	// the grants seen on the servers, shows it: check.Observed (I4).
	// check.HandOffOrder may flag the same runs (I7): the horizon of a run
	// is the latest instant it was told its term valid, Valid's lies
	// included, and the lease was gone before it.
	{plant: "valid-late", fenced: true, hit: faultBlackhole, every: true, rounds: 16, want: "I4:", also: []string{"I7:"},
		what: "with Valid late, the tasks told their term is valid after the backend freed it"},
	// A stopped term's lease is released at once, not once its run has
	// exited: a holder told to stop its election releases the lease while
	// the run finishes its step. check.HandOffOrder (I7) must see the
	// release before the exit.
	{plant: "release-before-exit", fenced: true, hit: faultStop, rounds: 5, want: "I7:",
		what: "with the lease released before the run exits, the hand-offs out of order"},
}

// controlRuns bounds the runs of a control: a run too weak to show its
// bug (the faults' timing missed the window the bug needs, on a loaded
// machine) is followed by another, with the next seed.
const controlRuns = 3

// testControl runs the control c, with the clients' TTL ttl, or the one
// the world's controlTTL, if it has one, gives for c: up to controlRuns
// runs, until one shows the bug.
func testControl(t *testing.T, w world, seed uint64, c controlSpec) {
	cttl := ttl
	if ct, ok := w.(controlTTLer); ok {
		cttl = ct.controlTTL(c)
	}
	for run := range controlRuns {
		if runControl(t, w, seed+uint64(run), cttl, c, run == controlRuns-1) {
			return
		}
	}
}

// runControl runs the control c once, with seed and TTL cttl. It reports
// whether the run showed the bug; a run that did not fails the test if it
// is the last, and is logged otherwise.
func runControl(t *testing.T, w world, seed uint64, cttl time.Duration, c controlSpec, last bool) bool {
	r := newRun(t, w, runConfig{seed: seed, fenced: c.fenced, children: clients, ttl: cttl, plant: c.plant})
	rounds := r.hitHolders(c.hit, c.every, c.rounds, c.want)
	s, errs := r.finish(time.Now())
	found := map[string][]error{} // by the prefix expected
	for _, err := range errs {
		i := slices.IndexFunc(append([]string{c.want}, c.also...), func(p string) bool { return strings.HasPrefix(err.Error(), p) })
		if i < 0 {
			t.Error(err)
			continue
		}
		p := append([]string{c.want}, c.also...)[i]
		found[p] = append(found[p], err)
	}
	mine := found[c.want]
	if len(mine) == 0 {
		if last {
			t.Fatalf("seed %d: no %s violation in %d %ss of the holder: the run is too weak to show it, as were the %d before (%v)", r.cfg.seed, c.want, rounds, c.hit, controlRuns-1, s)
		}
		t.Logf("seed %d: no %s violation in %d %ss of the holder: the run is too weak to show it; another run (%v)", r.cfg.seed, c.want, rounds, c.hit, s)
		return false
	}
	var others []string
	for _, a := range c.also {
		if n := len(found[a]); n > 0 {
			others = append(others, fmt.Sprintf("%d %s %v", n, a, found[a][0]))
		}
	}
	t.Logf("seed %d: %s after %d %ss of the holder: %d, such as\n%v\n(also: %s)\n(%v)", r.cfg.seed, c.what, rounds, c.hit, len(mine), mine[0],
		cmp.Or(strings.Join(others, ", "), "none"), s)
	if testing.Verbose() && len(errs) > 1 {
		var all []error
		for _, errs := range found {
			all = append(all, errs...)
		}
		t.Logf("all of them:\n%v", errors.Join(all...))
	}
	return true
}

// hitHolders hits the holder of the election (with every, each client
// holding a lease) with a fault of the kind given, again and again, until
// a violation with the given prefix shows, or max rounds; it returns the
// rounds played. A pause lasts 2–3×TTL, a blackhole 1.5×TTL; a stop
// lasts until the client has started its election again; a restart, in a
// failoverWorld only, is a failover that cuts the holder off with the old
// primary for a TTL.
func (r *run) hitHolders(kind faultKind, every bool, max int, want string) int {
	rng := rand.New(rand.NewPCG(r.cfg.seed, 0x5709))
	for round := 1; ; round++ {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, ok := r.holder(); ok {
				break
			}
			if time.Now().After(deadline) {
				r.violate("no holder of %s for 30s", election)
				return round - 1
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // the holder is at work
		f := fault{At: time.Since(r.begin), Kind: kind, Holder: true}
		settle := time.Second // the resumed client's write arrives, its term ends
		switch kind {
		case faultPause:
			f.For = 2*r.cfg.ttl + time.Duration(rng.Int64N(int64(r.cfg.ttl)))
		case faultBlackhole:
			// Past the backend's expiry of the holder's leases; the
			// tasks report what they see as they go.
			f.For = r.cfg.ttl + r.cfg.ttl/2
			settle = 300 * time.Millisecond
		case faultStop:
			settle = 300 * time.Millisecond // the run's exit is reported, the watcher sees the release
		case faultRestart:
			// A failover of the world's (failoverWorld), which takes the
			// holder down with the old primary (Holder) for a TTL; the
			// round ends once a standby of the new primary runs.
			f.For, f.Member = r.cfg.ttl, -1
		default:
			panic(fmt.Sprintf("hitHolders(%v)", kind))
		}
		r.apply(f)
		if every {
			for _, slot := range r.holderSlots() {
				g := f
				g.Holder, g.Slot = false, slot
				r.apply(g)
			}
		}
		r.pending.Wait()
		time.Sleep(settle)
		if r.shows(want) || round == max {
			return round
		}
	}
}

// holderSlots returns the slots of the clients holding a lease and not
// under a fault.
func (r *run) holderSlots() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for slot, c := range r.slots {
		if r.holdsLocked(c) && !r.busy[slot] {
			out = append(out, slot)
		}
	}
	return out
}

// shows reports whether the history so far has a violation with the
// prefix (I1, I2, I3, I4 or I7).
func (r *run) shows(prefix string) bool {
	var errs []error
	switch prefix {
	case "I3:":
		errs = check.StaleWrites(r.reg.Writes())
	case "I1:", "I2:":
		// I1 over the terms ended; I2 (tokens) over every term begun.
		now := time.Now()
		r.mu.Lock()
		var terms []check.Term
		for _, tr := range r.terms {
			switch {
			case tr.ended:
				terms = append(terms, check.Term{Name: tr.lease, Token: tr.token, Start: tr.start, End: tr.end})
			case prefix == "I2:":
				terms = append(terms, check.Term{Name: tr.lease, Token: tr.token, Start: tr.start, End: now})
			}
		}
		r.mu.Unlock()
		errs = check.Terms(terms)
	case "I4:", "I7:":
		r.mu.Lock()
		obs, exits := append([]check.Observation(nil), r.obs...), append([]check.Exit(nil), r.exits...)
		r.mu.Unlock()
		_, errs = observedChecks(obs, exits, r.grants)
	default:
		panic(fmt.Sprintf("shows(%q)", prefix))
	}
	for _, err := range errs {
		if strings.HasPrefix(err.Error(), prefix) {
			return true
		}
	}
	return false
}
