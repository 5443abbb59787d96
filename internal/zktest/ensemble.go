package zktest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EnsembleConfig is what an [Ensemble]'s servers add to [Config]: a leader
// waits up to initLimit ticks (2 s) for its followers to sync, and a
// follower that has not heard from the leader for syncLimit ticks (1 s)
// drops out. A client of the ensemble sets simba's leader lag (the
// backend's WithLeaderLag) to LeaderLag.
const EnsembleConfig = `initLimit=10
syncLimit=5
`

// LeaderLag is syncLimit × tickTime + tickTime of [EnsembleConfig]: the
// leader lag the ZooKeeper backend's WithLeaderLag documentation asks a
// client of such an ensemble to set.
const LeaderLag = 6 * 200 * time.Millisecond

// quorumMain is the main class of a member of an ensemble.
const quorumMain = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

// Ensemble is a replicated ZooKeeper of the test's own: n servers on
// 127.0.0.1, each a [Server] that can be stopped, killed, paused and
// started again on its own.
type Ensemble struct {
	// Servers are the members, server.1 first.
	Servers []*Server
}

// StartEnsemble starts an ensemble of n servers (3 makes a quorum of 2)
// with [Config] and [EnsembleConfig], and waits until each serves, having
// joined the quorum. The servers are stopped when the test ends. Without
// an installed ZooKeeper it skips the test (fails it under
// SIMBA_REQUIRE_SERVERS=1). A server that exits while the ensemble starts
// (a port taken meanwhile by another process: the ports are free when
// chosen, not reserved) makes it start again on other ports, up to three
// times.
func StartEnsemble(t testing.TB, n int) *Ensemble {
	t.Helper()
	if n < 1 {
		t.Fatalf("zktest: an ensemble of %d servers", n)
	}
	var err error
	for range 3 {
		var e *Ensemble
		if e, err = startEnsemble(t, n); err == nil {
			return e
		}
		t.Logf("zktest: starting the ensemble again on other ports: %v", err)
	}
	t.Fatal(err)
	return nil
}

// startEnsemble is one attempt of StartEnsemble: it stops the servers it
// started when it fails.
func startEnsemble(t testing.TB, n int) (*Ensemble, error) {
	t.Helper()
	e := &Ensemble{}
	peers := make([]string, n)
	for i := range n {
		s := newServer(t)
		s.main = quorumMain
		e.Servers = append(e.Servers, s)
		peer, election := freeAddr(t), freeAddr(t)
		_, pp, _ := net.SplitHostPort(peer)
		_, ep, _ := net.SplitHostPort(election)
		peers[i] = fmt.Sprintf("server.%d=127.0.0.1:%s:%s", i+1, pp, ep)
	}
	for i, s := range e.Servers {
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
