package zktest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/faultproxy"
)

// EnsembleConfig is what an [Ensemble]'s servers add to [Config]: a leader
// waits up to initLimit ticks (2 s) for its followers to sync, and a
// follower that has not heard from the leader for syncLimit ticks (1 s)
// drops out. A client of the ensemble sets simba's leader lag (the
// backend's WithLeaderLag) to LeaderLag plus a third of its session
// timeout.
const EnsembleConfig = `initLimit=10
syncLimit=5
`

// LeaderLag is syncLimit × tickTime + tickTime of [EnsembleConfig]: the
// leader lag that the ZooKeeper backend's WithLeaderLag documentation asks
// a client of such an ensemble to set, less its renewal interval (a third
// of the session timeout), which it asks for too.
const LeaderLag = 6 * 200 * time.Millisecond

// quorumMain is the main class of a member of an ensemble.
const quorumMain = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

// Ensemble is a replicated ZooKeeper of the test's own: n servers on
// 127.0.0.1, each a [Server] that can be stopped, killed, paused and
// started again on its own.
//
// Started [WithQuorumProxies], each server reaches the quorum port of
// every other (the port a follower connects to on its leader) through a
// fault proxy of that pair's own, so that [Ensemble.Partition] can cut a
// server from the others.
type Ensemble struct {
	// Servers are the members, server.1 first.
	Servers []*Server

	// links[i][j] is the proxy through which server i reaches server j's
	// quorum port (nil for i == j); nil without WithQuorumProxies.
	links [][]*faultproxy.Proxy
}

// EnsembleOption is an option of [StartEnsemble].
type EnsembleOption func(*ensembleOptions)

type ensembleOptions struct {
	proxies bool
}

// WithQuorumProxies makes each server reach the quorum port of every other
// through a fault proxy of that pair's own (each server's zoo.cfg names
// its own ports, and the proxies' for the others), for
// [Ensemble.Partition]. The election ports are reached directly: a
// partitioned server still hears who leads, but cannot follow it.
//
// It slows elections down: a new leader served 0.3–4.8 s after the old
// one was killed (four runs), against 0.4–0.8 s without proxies; probably
// because a follower that connects to a new leader not yet listening sees
// the proxy accept its connection and close it, where the leader's port
// would refuse it, and gives up that round of the election.
func WithQuorumProxies() EnsembleOption {
	return func(o *ensembleOptions) { o.proxies = true }
}

// StartEnsemble starts an ensemble of n servers (3 makes a quorum of 2)
// with [Config] and [EnsembleConfig] (and the options given, such as
// [WithQuorumProxies]), and waits until each serves, having
// joined the quorum. The servers are stopped when the test ends. Without
// an installed ZooKeeper it skips the test (fails it under
// SIMBA_REQUIRE_SERVERS=1). A server that exits while the ensemble starts
// (a port taken meanwhile by another process: the ports are free when
// chosen, not reserved) makes it start again on other ports, up to three
// times.
func StartEnsemble(t testing.TB, n int, opts ...EnsembleOption) *Ensemble {
	t.Helper()
	if n < 1 {
		t.Fatalf("zktest: an ensemble of %d servers", n)
	}
	var o ensembleOptions
	for _, opt := range opts {
		opt(&o)
	}
	var err error
	for range 3 {
		var e *Ensemble
		if e, err = startEnsemble(t, n, o); err == nil {
			return e
		}
		t.Logf("zktest: starting the ensemble again on other ports: %v", err)
	}
	t.Fatal(err)
	return nil
}

// startEnsemble is one attempt of StartEnsemble: it stops the servers it
// started when it fails.
func startEnsemble(t testing.TB, n int, o ensembleOptions) (*Ensemble, error) {
	t.Helper()
	e := &Ensemble{}
	quorum, election := make([]string, n), make([]string, n)
	for i := range n {
		s := newServer(t)
		s.main = quorumMain
		e.Servers = append(e.Servers, s)
		quorum[i], election[i] = freeAddr(t), freeAddr(t)
	}
	if o.proxies {
		e.links = make([][]*faultproxy.Proxy, n)
	}
	for i := range e.links {
		e.links[i] = make([]*faultproxy.Proxy, n)
		for j := range n {
			if i == j {
				continue
			}
			p, err := faultproxy.New(quorum[j])
			if err != nil {
				e.closeLinks()
				return nil, fmt.Errorf("zktest: a proxy to server.%d's quorum port: %w", j+1, err)
			}
			e.links[i][j] = p
		}
	}
	t.Cleanup(e.closeLinks) // after the servers' Stop, registered below
	for i, s := range e.Servers {
		var peers []string
		for j := range n {
			q := quorum[j]
			if i != j && e.links != nil {
				q = e.links[i][j].Addr()
			}
			_, qp, _ := net.SplitHostPort(q)
			_, ep, _ := net.SplitHostPort(election[j])
			peers = append(peers, fmt.Sprintf("server.%d=127.0.0.1:%s:%s", j+1, qp, ep))
		}
		data := filepath.Join(s.dir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			t.Fatalf("zktest: %v", err)
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintf("%d\n", i+1)), 0o644); err != nil {
			t.Fatalf("zktest: %v", err)
		}
		s.configure(append(strings.Split(strings.TrimSpace(EnsembleConfig), "\n"), peers...))
		t.Cleanup(s.Stop)
	}
	for _, s := range e.Servers {
		s.launch() // a member serves only once a quorum has formed
	}
	for _, s := range e.Servers {
		if err := s.awaitErr(); err != nil {
			for _, s := range e.Servers {
				s.Kill()
			}
			e.closeLinks()
			return nil, err
		}
	}
	return e, nil
}

// Addrs returns the client addresses of the servers, server.1 first.
func (e *Ensemble) Addrs() []string {
	addrs := make([]string, len(e.Servers))
	for i, s := range e.Servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// Addr returns the client addresses of the servers, comma-separated: what
// [Root], [Connect] and [Snapshot] take to reach whichever member serves.
func (e *Ensemble) Addr() string { return strings.Join(e.Addrs(), ",") }

// Mode returns what the server at index i says it is ("leader",
// "follower", "standalone"), or "" when it does not serve (stopped, or
// not in a quorum).
func (e *Ensemble) Mode(i int) string {
	reply, err := FourLetter(e.Servers[i].Addr, "srvr")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(reply) {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

// Leader returns the index of the server that leads the ensemble, waiting
// up to timeout for one to be elected; it fails the test when none is.
func (e *Ensemble) Leader(t testing.TB, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for i := range e.Servers {
			if e.Mode(i) == "leader" {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("zktest: no leader among %v after %v", e.Addrs(), timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// needLinks fails the test when the ensemble has no quorum proxies.
func (e *Ensemble) needLinks() {
	if e.links == nil {
		e.Servers[0].t.Fatalf("zktest: a partition needs an ensemble started WithQuorumProxies")
	}
}

// closeLinks closes the proxies of the quorum links.
func (e *Ensemble) closeLinks() {
	for _, row := range e.links {
		for _, p := range row {
			if p != nil {
				p.Close()
			}
		}
	}
}

// Partition cuts server i from the other members: its quorum links to
// them and theirs to it are blackholed (see [faultproxy.Proxy.Blackhole]),
// while its clients still reach it. A follower so cut stops hearing from
// its leader and gives up after syncLimit ticks (1 s, see
// [EnsembleConfig]); a leader so cut loses its quorum as fast. It fails
// the test for an ensemble started without [WithQuorumProxies].
func (e *Ensemble) Partition(i int) {
	e.needLinks()
	for j := range e.links {
		if j != i {
			e.links[i][j].Blackhole()
			e.links[j][i].Blackhole()
		}
	}
}

// Heal ends a [Ensemble.Partition] of server i.
func (e *Ensemble) Heal(i int) {
	e.needLinks()
	for j := range e.links {
		if j != i {
			e.links[i][j].Heal()
			e.links[j][i].Heal()
		}
	}
}

// Follower returns the index of a server that follows the ensemble's
// leader, other than those in except, waiting up to timeout for one; it
// fails the test when there is none.
func (e *Ensemble) Follower(t testing.TB, timeout time.Duration, except ...int) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for i := range e.Servers {
			if !slices.Contains(except, i) && e.Mode(i) == "follower" {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("zktest: no follower among %v (but %v) after %v", e.Addrs(), except, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
