package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// faultKind is a kind of fault of a schedule.
type faultKind int

const (
	faultKill      faultKind = iota // SIGKILL a client process; a new one takes its place
	faultPause                      // SIGSTOP a client process, SIGCONT after For
	faultBlackhole                  // silence a client's links to the servers for For
	faultRestart                    // take a server down for For, then start it again
	faultStop                       // Stop a client's election (or group), and start it again once Done
	numFaultKinds
)

func (k faultKind) String() string {
	return [...]string{"kill", "pause", "blackhole", "restart", "stop"}[k]
}

// fault is one entry of a schedule.
type fault struct {
	At   time.Duration // from the start of the schedule
	Kind faultKind
	// Slot is the client the fault hits (kill, pause, blackhole, stop), by
	// its place among the running clients; Holder asks for the current
	// holder of the election instead, when it is free.
	Slot   int
	Holder bool
	// Group, for a stop, stops the client's partition group instead of its
	// election.
	Group bool
	// Member is the server a restart stops: an etcd member, or -1 for the
	// leader, which then crashes (a hard stop, no leadership transfer); on
	// ZooKeeper -1 is a SIGKILL of the server, others a SIGTERM.
	Member int
	For    time.Duration // how long a pause, blackhole or restart lasts
}

func (f fault) String() string {
	at := fmt.Sprintf("+%6.3fs %-9s", f.At.Seconds(), f.Kind)
	switch f.Kind {
	case faultRestart:
		m := fmt.Sprintf("member %d", f.Member)
		if f.Member < 0 {
			m = "leader/crash"
		}
		return fmt.Sprintf("%s %s, down %v", at, m, f.For.Round(time.Millisecond))
	case faultKill:
		return fmt.Sprintf("%s slot %d%s", at, f.Slot, holderNote(f.Holder))
	case faultStop:
		return fmt.Sprintf("%s slot %d%s, %s", at, f.Slot, holderNote(f.Holder), f.stopped())
	}
	return fmt.Sprintf("%s slot %d%s for %v", at, f.Slot, holderNote(f.Holder), f.For.Round(time.Millisecond))
}

// stopped is what a stop stops: the election or the group.
func (f fault) stopped() string {
	if f.Group {
		return group
	}
	return election
}

func holderNote(h bool) string {
	if h {
		return " (or the holder)"
	}
	return ""
}

// Schedule parameters.
const (
	meanFaultGap = 1500 * time.Millisecond // mean time between faults
	warmUp       = 500 * time.Millisecond  // before the first fault
)

// newSchedule draws a fault schedule of the given length from seed: a fault
// every meanFaultGap on average; pauses and blackholes last 0–3×TTL,
// restarts keep the server down 0–2×TTL (restarts only if the backend can
// restart a server); a third of the stops stop the group, the others the
// election. The same arguments give the same schedule.
func newSchedule(seed uint64, length, ttl time.Duration, slots int, restarts bool) []fault {
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	// Weights of kill, pause, blackhole, restart, stop.
	weights := []int{2, 3, 3, 2, 2}
	if !restarts {
		weights[faultRestart] = 0
	}
	total := 0
	for _, w := range weights {
		total += w
	}
	var out []fault
	for at := warmUp; ; {
		at += time.Duration(rng.Int64N(int64(2 * meanFaultGap)))
		if at >= length {
			return out
		}
		pick := rng.IntN(total)
		kind := faultKind(0)
		for pick >= weights[kind] {
			pick -= weights[kind]
			kind++
		}
		f := fault{At: at, Kind: kind, Slot: rng.IntN(slots), Holder: rng.IntN(2) == 0, Member: -1}
		switch kind {
		case faultPause, faultBlackhole:
			f.For = time.Duration(rng.Int64N(int64(3*ttl) + 1))
		case faultRestart:
			f.For = time.Duration(rng.Int64N(int64(2*ttl) + 1))
			if rng.IntN(3) != 0 {
				f.Member = rng.IntN(3)
			}
		case faultStop:
			f.Group = rng.IntN(3) == 0
		}
		out = append(out, f)
	}
}

// TestScheduleIsReplayable checks that a seed gives its schedule again,
// and that schedules hold every kind of fault.
func TestScheduleIsReplayable(t *testing.T) {
	a := newSchedule(42, 5*time.Minute, 2*time.Second, 4, true)
	b := newSchedule(42, 5*time.Minute, 2*time.Second, 4, true)
	if !slices.Equal(a, b) {
		t.Fatal("seed 42 gave two schedules")
	}
	if c := newSchedule(43, 5*time.Minute, 2*time.Second, 4, true); slices.Equal(a, c) {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
	kinds := map[faultKind]int{}
	for i, f := range a {
		kinds[f.Kind]++
		if i > 0 && f.At < a[i-1].At {
			t.Fatalf("fault %d at %v before fault %d at %v", i, f.At, i-1, a[i-1].At)
		}
		if f.For < 0 || f.For > 6*time.Second || f.Slot < 0 || f.Slot >= 4 {
			t.Fatalf("fault out of range: %v", f)
		}
	}
	if len(kinds) != int(numFaultKinds) || len(a) < 150 {
		t.Fatalf("5 minutes: %d faults, by kind %v", len(a), kinds)
	}
	for _, f := range newSchedule(42, 5*time.Minute, 2*time.Second, 4, false) {
		if f.Kind == faultRestart {
			t.Fatal("a restart in a schedule without restarts")
		}
	}
}
