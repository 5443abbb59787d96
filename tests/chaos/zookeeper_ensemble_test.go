package chaos

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
)

// TestZooKeeperEnsemble plays a fault schedule on a three-server ZooKeeper
// ensemble of the test's own (zktest.StartEnsemble), each client reaching
// every server through a proxy of its own, so that its session moves when
// its server dies; the schedule's restarts kill (SIGKILL) the leader or a
// follower and start it again, one server at a time (the quorum stays).
// To keep its cost small it runs the fault schedule and one control, the
// TTL overstated (which the ensemble's expiry of a paused holder's session
// must show as overlapping terms), not the whole set TestZooKeeper runs.
// Without ZooKeeper installed it skips (fails under
// SIMBA_REQUIRE_SERVERS=1).
//
// The client processes set the backend's leader lag to zkEnsembleLag, and
// ask for the TTL plus the lag: a follower killed just after it answered a
// renewal may never have reported it to the leader, which then counts
// from the renewal before, up to a renewal interval earlier (see
// zookeeper.WithLeaderLag). Partitions between servers are
// backend/zookeeper's TestEnsemblePartitionedFollower.
func TestZooKeeperEnsemble(t *testing.T) {
	t.Parallel()
	w := startZKEnsemble(t)
	seed := scheduleSeed(t)
	t.Run("Faults", func(t *testing.T) { testFaults(t, w, seed) })
	i := slices.IndexFunc(plantedBugs, func(c controlSpec) bool { return c.plant == plantOverstatedTTL })
	t.Run("PlantedBug/"+plantOverstatedTTL, func(t *testing.T) { testControl(t, w, seed, plantedBugs[i]) })
}

// zkEnsembleShortRun is the length of the ensemble's schedule in the short
// run: its servers are three JVMs, on top of TestZooKeeper's one.
const zkEnsembleShortRun = 15 * time.Second

// zkEnsembleLag is the clients' leader lag: syncLimit × tickTime +
// tickTime of the ensemble, and a renewal interval (a third of the TTL).
// Their sessions ask for the TTL plus the lag, which the ensemble's
// maxSessionTimeout (20 ticks, 4 s) grants.
const zkEnsembleLag = zktest.LeaderLag + ttl/3

// zkEnsembleLink is a client's proxies to the servers, and the leader lag
// its backend sets.
type zkEnsembleLink struct{ *etcdLink }

func (zkEnsembleLink) env() []string { return []string{envZKLag + "=" + zkEnsembleLag.String()} }

// zkEnsemble is a three-server ZooKeeper ensemble; each client reaches
// every server through a proxy of its own (an etcdLink: one proxy per
// server).
type zkEnsemble struct {
	e *zktest.Ensemble

	mu    sync.Mutex
	links []*etcdLink
}

// startZKEnsemble starts the ensemble. zktest reports a failure with
// t.Fatalf, which restarts, on other goroutines, must not call: the
// servers get a TB that panics instead (see startServer).
func startZKEnsemble(t *testing.T) (z *zkEnsemble) {
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(fatalf)
			if !ok {
				panic(p)
			}
			t.Fatal(string(f))
		}
	}()
	z = &zkEnsemble{e: zktest.StartEnsemble(softTB{t}, 3)}
	t.Cleanup(z.close)
	return z
}

func (z *zkEnsemble) close() {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, l := range z.links {
		l.close()
	}
}

func (z *zkEnsemble) kind() string { return backendZooKeeper }

func (z *zkEnsemble) newSpace() string {
	var b [4]byte
	rand.Read(b[:])
	return "/simba-chaos/" + hex.EncodeToString(b[:])
}

func (z *zkEnsemble) canRestart() bool { return true }

func (z *zkEnsemble) shortRun() time.Duration { return zkEnsembleShortRun }

// expiryLag: the leader expires sessions on tick boundaries, up to a tick
// late, and hears of a renewal a follower answered with the follower's
// next ping reply, up to half a tick later; a new leader gives every
// session a fresh timeout from its election, which comes before the heal
// (the killed server's start waits until it has joined the new quorum).
//
// A crashed client's session outlives its last renewal by the TTL plus
// the leader lag it asked for on top.
func (z *zkEnsemble) expiryLag() time.Duration { return 3*zkTick + zkEnsembleLag }

func (z *zkEnsemble) newLink() (link, error) {
	l := &etcdLink{}
	for _, addr := range z.e.Addrs() {
		p, err := faultproxy.New(addr)
		if err != nil {
			l.close()
			return nil, err
		}
		l.proxies = append(l.proxies, p)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.links = append(z.links, l)
	return zkEnsembleLink{l}, nil
}

// stopServer kills (SIGKILL) a server: the leader for -1, else a
// follower, the member-th of them (modulo their number) in server order.
func (z *zkEnsemble) stopServer(member int) (what, kind string, start func() error, err error) {
	leader, followers := z.roles()
	i, role := leader, "leader"
	if member >= 0 {
		if len(followers) == 0 {
			return "", "", nil, errors.New("no follower to kill")
		}
		i, role = followers[member%len(followers)], "follower"
	}
	if i < 0 {
		return "", "", nil, fmt.Errorf("no leader among %v", z.e.Addrs())
	}
	z.e.Servers[i].Kill()
	return fmt.Sprintf("server %d (%s) killed (SIGKILL)", i+1, role), role + " killed", func() error { return z.start(i) }, nil
}

// roles returns the index of the leader (-1 if none) and of the followers,
// waiting up to 10s for a leader (an election after the last restart).
func (z *zkEnsemble) roles() (leader int, followers []int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		leader, followers = -1, nil
		for i := range z.e.Servers {
			switch z.e.Mode(i) {
			case "leader":
				leader = i
			case "follower":
				followers = append(followers, i)
			}
		}
		if leader >= 0 || time.Now().After(deadline) {
			return leader, followers
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// start starts server i again and waits until it has joined the quorum.
func (z *zkEnsemble) start(i int) (err error) {
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(fatalf)
			if !ok {
				panic(p)
			}
			err = fmt.Errorf("restarting ZooKeeper server %d: %s", i+1, string(f))
		}
	}()
	z.e.Servers[i].Start()
	return nil
}

// leftovers lists the znodes under root, as zooKeeper.leftovers does
// (the servers delete empty containers every second), read from whichever
// server serves.
func (z *zkEnsemble) leftovers(root string) ([]string, error) {
	nodes, err := zktest.Snapshot(z.e.Addr(), root)
	if err != nil {
		return nil, err
	}
	return zkLeftovers(nodes, root, true), nil
}

// watchGrants watches the grants through a connection to any server,
// which moves to another when its server dies; each listing of a lease is
// preceded by a sync, as a follower may not have applied what the leader
// committed (see watchZKGrants).
func (z *zkEnsemble) watchGrants(root string) (*grantWatch, error) {
	return watchZKGrants(root, z.e.Addrs(), true)
}
