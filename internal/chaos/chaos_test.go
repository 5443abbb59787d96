package chaos

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/check"
)

// The shape of every run.
const (
	clients = 4               // client processes running at once
	ttl     = 2 * time.Second // the TTL they request
)

// testBackend runs the fault schedule on w, then the two controls, all
// from one seed.
func testBackend(t *testing.T, w world) {
	seed := scheduleSeed(t)
	t.Run("Faults", func(t *testing.T) { testFaults(t, w, seed) })
	t.Run("NegativeControl", func(t *testing.T) { testNegativeControl(t, w, seed) })
	t.Run("PlantedBug", func(t *testing.T) { testPlantedBug(t, w, seed) })
}

// testFaults plays a seeded fault schedule against w and checks the
// invariants over what happened.
func testFaults(t *testing.T, w world, seed uint64) {
	length := scheduleDuration(t)
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

// testNegativeControl runs the same workload with the register's fencing
// off, pausing the election's holder (SIGSTOP) for 2–3×TTL until a stale
// write gets through: a resumed client sends the write it was about to
// send, with its old token, after the new holder wrote with a newer one.
// I3 must then report it, or the workload does not exercise what fencing
// protects against; every other invariant must still hold.
func testNegativeControl(t *testing.T, w world, seed uint64) {
	r := newRun(t, w, runConfig{seed: seed, fenced: false, children: clients, ttl: ttl})
	control(t, r, "I3:", "without fencing, the stale writes accepted")
}

// testPlantedBug runs the workload with a bug planted in the clients, a
// backend that overstates the granted TTL by one TTL, and pauses the
// election's holder as the negative control does: a paused holder's term
// then outlives its lease, and I1 must report the overlap with the next
// holder's term.
func testPlantedBug(t *testing.T, w world, seed uint64) {
	r := newRun(t, w, runConfig{seed: seed, fenced: true, children: clients, ttl: ttl, plant: plantOverstatedTTL})
	control(t, r, "I1:", "with the TTL overstated, the overlapping terms")
}

// control pauses the election's holder until a violation with the given
// prefix shows, and fails t if none does or if anything else does.
func control(t *testing.T, r *run, want, what string) {
	rounds := r.pauseHolders(5, want)
	s, errs := r.finish(time.Now())
	var found []error
	for _, err := range errs {
		if strings.HasPrefix(err.Error(), want) {
			found = append(found, err)
		} else {
			t.Error(err)
		}
	}
	if len(found) == 0 {
		t.Fatalf("seed %d: no %s violation in %d pauses of the holder: the run is too weak to show it (%v)", r.cfg.seed, want, rounds, s)
	}
	t.Logf("seed %d: %s after %d pauses of the holder: %d, such as\n%v\n(%v)", r.cfg.seed, what, rounds, len(found), found[0], s)
	if testing.Verbose() && len(found) > 1 {
		t.Logf("all of them:\n%v", errors.Join(found...))
	}
}

// pauseHolders pauses the holder of the election for 2–3×TTL, again and
// again, until a violation with the given prefix shows, or max rounds;
// it returns the rounds played.
func (r *run) pauseHolders(max int, want string) int {
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
		r.apply(fault{At: time.Since(r.begin), Kind: faultPause, Holder: true, For: 2*r.cfg.ttl + time.Duration(rng.Int64N(int64(r.cfg.ttl)))})
		r.pending.Wait()
		time.Sleep(time.Second) // the resumed client's write arrives, its term ends
		if r.shows(want) || round == max {
			return round
		}
	}
}

// shows reports whether the history so far has a violation with the
// prefix (I1 or I3).
func (r *run) shows(prefix string) bool {
	var errs []error
	switch prefix {
	case "I3:":
		errs = check.StaleWrites(r.reg.Writes())
	case "I1:":
		r.mu.Lock()
		var terms []check.Term
		for _, tr := range r.terms {
			if tr.ended {
				terms = append(terms, check.Term{Name: tr.lease, Token: tr.token, Start: tr.start, End: tr.end})
			}
		}
		r.mu.Unlock()
		errs = check.Terms(terms)
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
