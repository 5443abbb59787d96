package chaos

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/check"
)

// world is a backend under test as the harness drives it: the servers, a
// link of fault-injecting proxies for each client, server restarts, and a
// look at what is left on the servers.
type world interface {
	kind() string     // backendEtcd, backendZooKeeper, backendPostgres, backendMySQL or backendKubernetes: what the clients open
	newSpace() string // a fresh key prefix, root, schema or namespace for one run
	newLink() (link, error)
	canRestart() bool
	// stopServer takes one server down (see fault.Member) and returns what
	// it did, in full and as a kind of restart for the figures, and the
	// function that starts it again.
	stopServer(member int) (what, kind string, start func() error, err error)
	// leftovers lists what is left under space: keys or znodes.
	leftovers(space string) ([]string, error)
	// expiryLag is how much later than one TTL after a client's last
	// renewal the backend may free its leases: the granularity of its
	// expiry, and what a server fault adds to it.
	expiryLag() time.Duration
	// watchGrants starts a watcher, of the test process's own, of the
	// grants of the leases under space (see grants_test.go).
	watchGrants(space string) (*grantWatch, error)
}

// Optional methods of a world.
type (
	// shortRunner's shortRun is the length of its schedule in the short
	// run, in place of defaultDuration (see scheduleDuration).
	shortRunner interface{ shortRun() time.Duration }
	// controlTTLer's controlTTL is the clients' TTL in the control c, in
	// place of ttl (see testControl).
	controlTTLer interface {
		controlTTL(c controlSpec) time.Duration
	}
	// failoverWorld's failover takes the place of stopServer: a server
	// fault that fails over to a standby, and may act on the run's clients
	// as it does (see failover_postgres_test.go).
	failoverWorld interface {
		failover(r *run, f fault) (what, kind string, start func() error, err error)
	}
)

// link is a client's own way to the servers: one proxy per server.
type link interface {
	endpoints() []string
	blackhole()
	heal()
	close()
}

// runConfig is what a run does.
type runConfig struct {
	seed     uint64
	duration time.Duration // of the fault schedule
	fenced   bool          // the register's fencing
	children int           // client processes running at once
	ttl      time.Duration // the clients' TTL
	plant    string        // a safety bug planted in the clients (see envPlant)
	// coverage asks for I5: every lease held once the bound has passed
	// after the heal.
	coverage bool
}

// run is one fault run: client processes, the register, the schedule,
// and what they recorded.
type run struct {
	t     *testing.T
	w     world
	cfg   runConfig
	id    string
	space string
	reg   *register
	begin time.Time // the start of the schedule

	mu         sync.Mutex
	slots      []*child // the running clients, by slot
	busy       []bool   // a slot whose client is under a fault
	all        []*child // every client started
	nextNode   int
	terms      []*termRecord
	obs        []check.Observation // what the tasks were told (see report "obs")
	liveCtx    int                 // and the times a task found its ctx live
	exits      []check.Exit        // when their runs returned
	violations []error
	timeline   []string
	serverDown bool
	faults     map[string]int // faults applied, by description
	skipped    int

	pending sync.WaitGroup // faults waiting to heal
	healNow chan struct{}  // closed when the schedule ends: heal at once

	grants *grantWatch // the grants on the servers, as the test process sees them
}

// termRecord is one term as its client reported it.
type termRecord struct {
	child      *child
	lease      string
	token      uint64
	start, end time.Time
	ended      bool
	why        string
}

// newRun starts the register and the clients of a run, and waits until
// every client has a session and the election a leader.
func newRun(t *testing.T, w world, cfg runConfig) *run {
	var id [6]byte
	rand.Read(id[:])
	r := &run{t: t, w: w, cfg: cfg, id: hex.EncodeToString(id[:]), space: w.newSpace(),
		reg: startRegister(cfg.fenced), slots: make([]*child, cfg.children), busy: make([]bool, cfg.children),
		faults: map[string]int{}, healNow: make(chan struct{})}
	r.begin = time.Now()
	gw, err := w.watchGrants(r.space)
	if err != nil {
		r.reg.Close()
		t.Fatalf("watching the grants under %s: %v", r.space, err)
	}
	gw.log.setNote(r.logf)
	r.grants = gw
	t.Cleanup(func() {
		r.killAll()
		r.grants.stop()
		r.reg.Close()
		if t.Failed() || *flagTimeline {
			r.dump()
		}
	})
	for slot := range cfg.children {
		if _, err := r.startChild(slot); err != nil {
			t.Fatalf("starting a client: %v", err)
		}
	}
	timeout := time.After(60 * time.Second)
	for _, c := range r.slots {
		select {
		case <-c.ready:
		case <-c.exited:
			t.Fatalf("%s exited before its first session: %s", c.name, c.exitReason(c.waitErr))
		case <-timeout:
			t.Fatalf("%s has no session after 60s", c.name)
		}
	}
	for {
		if _, ok := r.holder(); ok {
			break
		}
		select {
		case <-timeout:
			t.Fatal("no leader 60s after the start")
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.mu.Lock()
	r.begin = time.Now()
	r.logLocked("%d clients up, %s held: the schedule starts", cfg.children, election)
	r.mu.Unlock()
	return r
}

func (r *run) logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logLocked(format, args...)
}

func (r *run) logLocked(format string, args ...any) {
	r.timeline = append(r.timeline, fmt.Sprintf("%s %+8.3fs ", stamp(time.Now()), time.Since(r.begin).Seconds())+fmt.Sprintf(format, args...))
}

// violate records a failure found while the run goes on.
func (r *run) violate(format string, args ...any) {
	err := fmt.Errorf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violations = append(r.violations, err)
	r.logLocked("VIOLATION: %v", err)
}

// dump prints the run's timeline, for a failed test.
func (r *run) dump() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t.Logf("timeline of run %s (seed %d):\n%s", r.id, r.cfg.seed, strings.Join(r.timeline, "\n"))
}

// holder returns the slot of the client holding the election, if any.
func (r *run) holder() (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holderLocked()
}

func (r *run) holderLocked() (int, bool) {
	for i := len(r.terms) - 1; i >= 0; i-- {
		tr := r.terms[i]
		if tr.lease != election || tr.ended || !tr.child.killedAt.IsZero() {
			continue
		}
		if slot := slices.Index(r.slots, tr.child); slot >= 0 {
			return slot, true
		}
	}
	return 0, false
}

// holds reports whether c holds a lease, as far as it has reported.
func (r *run) holdsLocked(c *child) bool {
	for _, tr := range r.terms {
		if tr.child == c && !tr.ended {
			return true
		}
	}
	return false
}

// take picks the slot a fault hits and marks it busy: the holder of the
// election if asked and free, else the fault's slot or the next free one.
func (r *run) take(f fault) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	slot, ok := r.holderLocked()
	if !f.Holder || !ok || r.busy[slot] {
		ok = false
		for i := range r.slots {
			if s := (f.Slot + i) % len(r.slots); !r.busy[s] {
				slot, ok = s, true
				break
			}
		}
	}
	if ok {
		r.busy[slot] = true
	}
	return slot, ok
}

func (r *run) free(slot int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy[slot] = false
}

// count records a fault applied, under a description such as "pause of
// a holder".
func (r *run) count(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults[what]++
}

// counted returns how many faults were recorded under what.
func (r *run) counted(what string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.faults[what]
}

// play applies the schedule, then heals every fault still in place when
// it ends, and returns when everything is healed: the instant I5 counts
// from.
func (r *run) play(schedule []fault) time.Time {
	for _, f := range schedule {
		time.Sleep(time.Until(r.begin.Add(f.At)))
		r.apply(f)
	}
	time.Sleep(time.Until(r.begin.Add(r.cfg.duration)))
	r.logf("the schedule ends: healing everything")
	close(r.healNow)
	r.pending.Wait()
	healed := time.Now()
	r.logf("healed")
	return healed
}

// hold waits d, or less if the schedule ends first.
func (r *run) hold(d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-r.healNow:
	}
}

// apply applies one fault of the schedule.
func (r *run) apply(f fault) {
	if f.Kind == faultRestart {
		r.restart(f)
		return
	}
	slot, ok := r.take(f)
	if !ok {
		r.mu.Lock()
		r.skipped++
		r.mu.Unlock()
		r.logf("skipped (every client is under a fault): %v", f)
		return
	}
	r.mu.Lock()
	c := r.slots[slot]
	what := f.Kind.String()
	if f.Kind == faultStop {
		what += " " + f.stopped()
	}
	if r.holdsLocked(c) {
		what += " of a holder"
	}
	r.mu.Unlock()
	r.count(what)
	r.logf("%v: %s %s", f, what, c.name)
	switch f.Kind {
	case faultKill:
		r.kill(c)
		next, err := r.startChild(slot)
		if err != nil {
			r.violate("starting a client in place of %s: %v", c.name, err)
			return
		}
		// The fault lasts until the new client has a session.
		r.pending.Go(func() {
			defer r.free(slot)
			select {
			case <-next.ready:
			case <-next.exited:
			case <-time.After(60 * time.Second):
				r.violate("%s has no session 60s after it started", next.name)
			}
		})
	case faultPause:
		c.cmd.Process.Signal(syscall.SIGSTOP)
		r.pending.Go(func() {
			defer r.free(slot)
			r.hold(f.For)
			c.cmd.Process.Signal(syscall.SIGCONT)
			r.logf("%s resumed (SIGCONT)", c.name)
		})
	case faultBlackhole:
		c.link.blackhole()
		r.pending.Go(func() {
			defer r.free(slot)
			r.hold(f.For)
			c.link.heal()
			r.logf("%s's link healed", c.name)
		})
	case faultStop:
		// The fault lasts until the client has started it again.
		if err := c.command(cmdStop + f.stopped()); err != nil {
			r.free(slot)
			r.violate("telling %s to stop %s: %v", c.name, f.stopped(), err)
			return
		}
		r.pending.Go(func() {
			defer r.free(slot)
			select {
			case <-c.restarted:
			case <-c.exited:
			case <-time.After(30 * time.Second):
				r.violate("%s did not start %s again within 30s of being told to stop it", c.name, f.stopped())
			}
		})
	}
}

// restart takes a server down for the fault's time.
func (r *run) restart(f fault) {
	r.mu.Lock()
	down := r.serverDown
	if down {
		r.skipped++
	}
	r.serverDown = true
	r.mu.Unlock()
	if down {
		r.logf("skipped (a server is down already): %v", f)
		return
	}
	var (
		what, kind string
		start      func() error
		err        error
	)
	if fw, ok := r.w.(failoverWorld); ok {
		what, kind, start, err = fw.failover(r, f)
	} else {
		what, kind, start, err = r.w.stopServer(f.Member)
	}
	if err != nil {
		r.violate("%v: %v", f, err)
		r.mu.Lock()
		r.serverDown = false
		r.mu.Unlock()
		return
	}
	r.count("restart (" + kind + ")")
	r.logf("%v: %s", f, what)
	r.pending.Go(func() {
		r.hold(f.For)
		if err := start(); err != nil {
			r.violate("starting the server again: %v", err)
		}
		r.mu.Lock()
		r.serverDown = false
		r.mu.Unlock()
		r.logf("server back (%s)", what)
	})
}

// bound is how soon after the faults heal every lease must be held again
// (I5): a TTL for the last holder's session to expire, a renewal interval
// for a new one to be confirmed, and the backend's expiry lag.
func (r *run) bound() time.Duration { return r.cfg.ttl + r.cfg.ttl/3 + r.w.expiryLag() }

// finish closes every client after the bound has passed since healed,
// waits for the servers to drop what crashed clients left, and checks
// the history: it returns the violations, with the figures of the run.
func (r *run) finish(healed time.Time) (summary, []error) {
	at := healed.Add(r.bound())
	if r.cfg.coverage {
		time.Sleep(time.Until(at) + 200*time.Millisecond)
	}
	r.closeChildren(30 * time.Second)
	var errs []error
	// I6: the sessions of killed clients expire, and nothing is left.
	left, err := r.awaitEmpty(3*r.cfg.ttl + 10*time.Second)
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range left {
		errs = append(errs, fmt.Errorf("I6: left on the server: %s", l))
	}
	procs, err := leftoverProcesses(r.id)
	if err != nil {
		r.t.Logf("leftover processes not checked: %v", err)
	}
	for _, p := range procs {
		errs = append(errs, fmt.Errorf("I6: a client process is left: %s", p))
	}
	// The watcher's view lags the servers': let it see the ends of the
	// grants, up to a few seconds (a grant not seen to end is checked only
	// for its start).
	for deadline := time.Now().Add(5 * time.Second); r.grants.log.open() > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	r.mu.Lock()
	terms := r.checkTerms()
	errs = append(errs, r.violations...)
	obs, exits := append([]check.Observation(nil), r.obs...), append([]check.Exit(nil), r.exits...)
	r.mu.Unlock()
	writes := r.reg.Writes()
	errs = append(errs, check.Terms(terms)...)
	errs = append(errs, check.StaleWrites(writes)...)
	if r.cfg.coverage {
		errs = append(errs, check.Covered(terms, leases(), at.Round(0))...)
	}
	observed, oerrs := observedChecks(obs, exits, r.grants)
	errs = append(errs, oerrs...)
	s := r.summarize(healed, terms, writes)
	r.mu.Lock()
	observed.liveCtx = r.liveCtx
	r.mu.Unlock()
	s.observed = observed
	return s, errs
}

// checkTerms returns the terms for the checkers. A killed client's term
// that never reported its end ended when the process died.
func (r *run) checkTerms() []check.Term {
	var out []check.Term
	for _, tr := range r.terms {
		end := tr.end
		switch {
		case tr.ended:
		case !tr.child.killedAt.IsZero():
			end = tr.child.killedAt.Round(0)
		default:
			r.violations = append(r.violations, fmt.Errorf("%s: term %d of %s never ended", tr.child.name, tr.token, tr.lease))
			end = tr.child.exitedAt.Round(0)
		}
		out = append(out, check.Term{Name: tr.lease, Token: tr.token, Start: tr.start, End: end})
	}
	return out
}

// awaitEmpty polls the servers until nothing is left under the run's
// space, or timeout passes; it returns what is left.
func (r *run) awaitEmpty(timeout time.Duration) ([]string, error) {
	deadline := time.Now().Add(timeout)
	for {
		left, err := r.w.leftovers(r.space)
		if err != nil || len(left) == 0 || time.Now().After(deadline) {
			if err == nil && len(left) == 0 {
				r.logf("nothing left under %s", r.space)
			}
			return left, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// summary is the figures of a run.
type summary struct {
	children, terms, writes, rejected, stale int
	faults                                   map[string]int
	skipped                                  int
	recovery                                 time.Duration // from the heal until every lease was held
	vacancy                                  time.Duration // the longest time a lease had no valid term
	vacancyOf                                string        // which lease, when
	// gap is the shortest time from the end of a lease's terms so far to
	// the start of its next term (negative: an overlap, which check.Terms
	// reports), over the leases with two terms or more.
	gap      time.Duration
	gapOf    string // which lease, when
	hasGap   bool
	observed observedFigures
}

func (s summary) String() string {
	var kinds []string
	total := 0
	for k, n := range s.faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	slices.Sort(kinds)
	gap := "none"
	if s.hasGap {
		gap = fmt.Sprintf("%v (%s)", s.gap, s.gapOf)
	}
	return fmt.Sprintf("%d faults (%s; %d skipped), %d client processes, %d terms, %d writes (%d rejected as stale; %d stale accepted), %v, longest vacancy of a lease %v (%s), shortest gap between a lease's terms %s, every lease held again %v after the heal",
		total, strings.Join(kinds, ", "), s.skipped, s.children, s.terms, s.writes, s.rejected, s.stale, s.observed,
		s.vacancy.Round(time.Millisecond), s.vacancyOf, gap, s.recovery.Round(time.Millisecond))
}

func (r *run) summarize(healed time.Time, terms []check.Term, writes []check.Write) summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := summary{children: len(r.all), terms: len(terms), writes: len(writes), faults: r.faults, skipped: r.skipped,
		stale: len(check.StaleWrites(writes))}
	for _, w := range writes {
		if !w.Accepted {
			s.rejected++
		}
	}
	healed = healed.Round(0)
	for _, l := range leases() {
		var mine []check.Term
		for _, t := range terms {
			if t.Name == l {
				mine = append(mine, t)
			}
		}
		slices.SortFunc(mine, func(a, b check.Term) int { return a.Start.Compare(b.Start) })
		for i := 1; i < len(mine); i++ {
			covered := mine[0].End
			for _, p := range mine[:i] {
				if p.End.After(covered) {
					covered = p.End
				}
			}
			gap := mine[i].Start.Sub(covered)
			if gap > s.vacancy {
				s.vacancy = gap
				s.vacancyOf = fmt.Sprintf("%s from %s to %s, before term %d", l, stamp(covered), stamp(mine[i].Start), mine[i].Token)
			}
			if !s.hasGap || gap < s.gap {
				s.gap, s.hasGap = gap, true
				s.gapOf = fmt.Sprintf("%s, before term %d", l, mine[i].Token)
			}
		}
		// The term valid at the heal, or the first to begin after it.
		var first time.Duration = -1
		for _, t := range terms {
			if t.Name != l || !t.End.After(healed) {
				continue
			}
			d := max(t.Start.Sub(healed), 0)
			if first < 0 || d < first {
				first = d
			}
		}
		s.recovery = max(s.recovery, first)
	}
	return s
}

// report fails t with every violation, or logs the figures.
func (r *run) report(s summary, errs []error) {
	r.t.Helper()
	if len(errs) > 0 {
		r.t.Errorf("seed %d: %d violations; replay the schedule with -chaos.seed=%d\n%s",
			r.cfg.seed, len(errs), r.cfg.seed, errors.Join(errs...))
		return
	}
	r.t.Logf("seed %d, %v schedule: %v; violations: 0", r.cfg.seed, r.cfg.duration, s)
}
