package simtest

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is a kind of fault.
type Kind int

const (
	// KindPause freezes a process, as a long GC pause, a stopped VM or
	// SIGSTOP do: its link to the backend is cut, and every resource
	// operation it sends waits until it resumes (then goes through, as a
	// write that was on its way does). The simba client itself keeps its
	// own clock: a term whose deadline passed is over when it resumes.
	KindPause Kind = iota + 1
	// KindPartition cuts the process's link to the backend, not to the
	// resources: the classic split brain that fencing is for.
	KindPartition
	// KindSlow delays the backend's requests and replies (slow renewals).
	KindSlow
	// KindExpire makes the backend expire the process's sessions at once.
	KindExpire
	// KindCrash kills the process (nothing is released, its sessions
	// expire by their TTL) and starts a new one in its slot.
	KindCrash
	// KindRestart closes the process gracefully (its terms hand off) and
	// starts a new one in its slot.
	KindRestart
	// KindHandOff has an operator resign the term holding a lease
	// (admin.Resign): a graceful hand-off in the middle of a run.
	KindHandOff
	// KindCustom runs the test's own fault, Fault.Do.
	KindCustom
)

var kindNames = map[Kind]string{KindPause: "pause", KindPartition: "partition", KindSlow: "slow", KindExpire: "expire",
	KindCrash: "crash", KindRestart: "restart", KindHandOff: "hand-off", KindCustom: "custom"}

// String returns the kind's name: "pause", "partition", ….
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Fault is one fault of a schedule. Make them with the functions below
// (Pause, Partition, …), or draw them with RandomFault.
type Fault struct {
	At   time.Duration // when, from the start of the simulation
	Kind Kind
	// Node is the slot hit (1 to Config.Nodes): the process that runs in
	// it at the time.
	Node int
	// For is how long a pause, partition or slow fault lasts.
	For time.Duration
	// Request and Response are a slow fault's delays.
	Request, Response time.Duration
	// Lease is the lease a hand-off resigns; "" picks one of the leases
	// held at the time, by Pick.
	Lease string
	Pick  int
	// Name and Do are a custom fault's description and action; Do runs on
	// the driving goroutine.
	Name string
	Do   func(c *Cluster)
}

// Pause freezes node's process at at for d.
func Pause(node int, at, d time.Duration) Fault {
	return Fault{At: at, Kind: KindPause, Node: node, For: d}
}

// Partition cuts node's link to the backend at at for d.
func Partition(node int, at, d time.Duration) Fault {
	return Fault{At: at, Kind: KindPartition, Node: node, For: d}
}

// Slow delays node's backend requests by request and replies by response,
// at at for d.
func Slow(node int, at, d, request, response time.Duration) Fault {
	return Fault{At: at, Kind: KindSlow, Node: node, For: d, Request: request, Response: response}
}

// Expire has the backend expire node's sessions at at.
func Expire(node int, at time.Duration) Fault { return Fault{At: at, Kind: KindExpire, Node: node} }

// Crash kills node's process at at, and starts a new one in its slot.
func Crash(node int, at time.Duration) Fault { return Fault{At: at, Kind: KindCrash, Node: node} }

// Restart closes node's process gracefully at at, and starts a new one.
func Restart(node int, at time.Duration) Fault { return Fault{At: at, Kind: KindRestart, Node: node} }

// HandOff has an operator resign the term that holds lease at at.
func HandOff(lease string, at time.Duration) Fault {
	return Fault{At: at, Kind: KindHandOff, Lease: lease}
}

// Custom runs do at at, as a fault named name.
func Custom(name string, at time.Duration, do func(c *Cluster)) Fault {
	return Fault{At: at, Kind: KindCustom, Name: name, Do: do}
}

// String describes the fault as a schedule prints it.
func (f Fault) String() string { return fmt.Sprintf("%9.3fs  %s", f.At.Seconds(), f.what()) }

// what describes the fault without its time.
func (f Fault) what() string {
	at := ""
	switch f.Kind {
	case KindPause, KindPartition:
		return at + fmt.Sprintf("%s n%d for %v", f.Kind, f.Node, f.For)
	case KindSlow:
		return at + fmt.Sprintf("slow n%d for %v (requests +%v, replies +%v)", f.Node, f.For, f.Request, f.Response)
	case KindExpire, KindCrash, KindRestart:
		return at + fmt.Sprintf("%s n%d", f.Kind, f.Node)
	case KindHandOff:
		if f.Lease == "" {
			return at + "hand-off of a held lease"
		}
		return at + "hand-off of " + f.Lease
	default:
		return at + f.Name
	}
}

// RandomFault draws one fault of cfg.Kinds, with At left zero: pauses,
// partitions and slow replies last up to 3×TTL, slow requests take up to
// TTL/10 and replies up to TTL/3.
func RandomFault(r *rand.Rand, cfg *Config) Fault {
	f := Fault{Kind: cfg.Kinds[r.IntN(len(cfg.Kinds))], Node: 1 + r.IntN(cfg.Nodes)}
	switch f.Kind {
	case KindPause, KindPartition:
		f.For = time.Duration(r.Int64N(int64(3 * cfg.TTL)))
	case KindSlow:
		f.For = time.Duration(r.Int64N(int64(3 * cfg.TTL)))
		f.Request = time.Duration(r.Int64N(int64(cfg.TTL / 10))).Round(time.Millisecond)
		f.Response = time.Duration(r.Int64N(int64(cfg.TTL / 3))).Round(time.Millisecond)
	case KindHandOff:
		f.Pick = r.IntN(1 << 16)
	}
	f.For = f.For.Round(time.Millisecond)
	return f
}

// randomSchedule draws the seed's faults, about FaultEvery apart, over
// Duration.
func (c *Cluster) randomSchedule() []Fault {
	draw := c.cfg.Random
	if draw == nil {
		draw = RandomFault
	}
	var out []Fault
	at := time.Duration(0)
	for {
		at += time.Duration(c.rng.Int64N(int64(2 * c.cfg.FaultEvery))).Round(time.Millisecond)
		if at >= c.cfg.Duration {
			return out
		}
		f := draw(c.rng, &c.cfg)
		f.At = at
		out = append(out, f)
	}
}

// apply injects f.
func (c *Cluster) apply(f Fault) {
	c.note("fault", f.what())
	if f.Kind == KindCustom {
		if f.Do != nil {
			f.Do(c)
		}
		return
	}
	if f.Kind == KindHandOff {
		c.handOff(f)
		return
	}
	if f.Node < 1 || f.Node > c.cfg.Nodes {
		c.fatalf("simtest: fault %v: no node %d (the cluster has %d)", f, f.Node, c.cfg.Nodes)
	}
	c.mu.Lock()
	n := c.slots[f.Node-1]
	c.mu.Unlock()
	switch f.Kind {
	case KindPause:
		n.mu.Lock()
		if n.paused == 0 {
			n.resume = make(chan struct{})
		}
		n.paused++
		n.mu.Unlock()
		n.cutLink()
		c.faults.Go(func() {
			time.Sleep(f.For)
			n.mu.Lock()
			n.paused--
			if n.paused == 0 {
				close(n.resume)
			}
			n.mu.Unlock()
			n.healLink()
		})
	case KindPartition:
		n.cutLink()
		c.faults.Go(func() { time.Sleep(f.For); n.healLink() })
	case KindSlow:
		n.mu.Lock()
		n.slow++
		n.mem.SetDelay(f.Request, f.Response)
		n.mu.Unlock()
		c.faults.Go(func() {
			time.Sleep(f.For)
			n.mu.Lock()
			if n.slow--; n.slow == 0 {
				n.mem.SetDelay(0, 0)
			}
			n.mu.Unlock()
		})
	case KindExpire:
		n.mu.Lock()
		cut := n.cut > 0
		n.mu.Unlock()
		if !cut { // a cut node would not hear of it
			n.mem.Expire()
		}
	case KindCrash:
		n.kill()
		n.mem.Crash()
		c.closing.Go(func() { n.client.Close() })
		c.addNode(f.Node - 1)
	case KindRestart:
		c.closing.Go(func() { c.shutdown(n) })
		c.addNode(f.Node - 1)
	}
}

func (n *Node) cutLink() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut++; n.cut == 1 {
		n.mem.Partition()
	}
}

func (n *Node) healLink() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut--; n.cut == 0 {
		n.mem.Heal()
	}
}

// heal ends whatever fault still holds n.
func (n *Node) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.paused > 0 {
		n.paused = 0
		close(n.resume)
	}
	n.cut, n.slow = 0, 0
	n.mem.Heal()
	n.mem.SetDelay(0, 0)
}

// handOff resigns the term holding f's lease, through the admin.
func (c *Cluster) handOff(f Fault) {
	lease := f.Lease
	if lease == "" {
		c.mu.Lock()
		seen := map[string]bool{}
		for _, t := range c.termOrder {
			seen[t.Lease] = true
		}
		c.mu.Unlock()
		var held []string
		for _, l := range slices.Sorted(maps.Keys(seen)) {
			if _, _, ok := c.b.Holder(l); ok {
				held = append(held, l)
			}
		}
		if len(held) == 0 {
			c.note("fault", "hand-off: no lease is held")
			return
		}
		lease = held[f.Pick%len(held)]
	}
	_, token, ok := c.b.Holder(lease)
	if !ok {
		c.note("fault", "hand-off: "+lease+" is not held")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.TTL)
	defer cancel()
	if err := c.adm.Resign(ctx, lease, token, "simtest hand-off"); err != nil {
		c.note("fault", fmt.Sprintf("hand-off of %s (token %d): %v", lease, token, err))
		return
	}
	c.note("fault", fmt.Sprintf("operator resigned %s, token %d", lease, token))
}
