package zookeeper_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
)

// ensembleTTL is the session timeout the ensemble tests ask for: the
// servers' largest (20 ticks), which leaves a TTL of 2.8 s after the
// leader lag.
const ensembleTTL = 4 * time.Second

// ensembleClient is a simba client of an ensemble, through a proxy of its
// own to each server.
type ensembleClient struct {
	who     string
	c       *simba.Client
	proxies []*faultproxy.Proxy
	task    *simba.LeaderTask
}

// cut blackholes the client's link to every server; heal ends that.
func (c *ensembleClient) cut() {
	for _, p := range c.proxies {
		p.Blackhole()
	}
}

func (c *ensembleClient) heal() {
	for _, p := range c.proxies {
		p.Heal()
	}
}

// contend starts the client's task for election "x", recording its terms
// in log and reporting their starts on ch.
func (c *ensembleClient) contend(t *testing.T, log *termLog, ch chan<- started) {
	t.Helper()
	task, err := c.c.Election("x").RunWhileLeader(log.task(c.who, ch))
	require.NoError(t, err)
	c.task = task
}

// ensembleClients returns two clients of e, a and b, under root, with the
// leader lag of zktest.LeaderLag; wrap, if not nil, wraps their backends.
func ensembleClients(t *testing.T, e *zktest.Ensemble, root string, wrap func(backend.Backend) backend.Backend) map[string]*ensembleClient {
	t.Helper()
	out := make(map[string]*ensembleClient)
	for _, who := range []string{"a", "b"} {
		ec := &ensembleClient{who: who}
		var addrs []string
		for _, addr := range e.Addrs() {
			p, err := faultproxy.New(addr)
			require.NoError(t, err)
			t.Cleanup(func() { p.Close() })
			ec.proxies = append(ec.proxies, p)
			addrs = append(addrs, p.Addr())
		}
		zb, err := zookeeper.New(addrs, zookeeper.WithRoot(root), zookeeper.WithLeaderLag(zktest.LeaderLag))
		require.NoError(t, err)
		t.Cleanup(func() { zb.Close() })
		var b backend.Backend = zb
		if wrap != nil {
			b = wrap(b)
		}
		c, err := simba.New(b, simba.WithTTL(ensembleTTL))
		require.NoError(t, err)
		t.Cleanup(func() {
			ec.heal()
			closeWithin(t, c)
		})
		ec.c = c
		out[who] = ec
	}
	return out
}

// ensembleRun starts a three-server ensemble and two clients of it (see
// ensembleClients) under a root of the test's own, and returns the index
// of the server that leads it, with the log and the channel for the
// clients' tasks.
func ensembleRun(t *testing.T, wrap func(backend.Backend) backend.Backend) (e *zktest.Ensemble, leader int, clients map[string]*ensembleClient, log *termLog, ch chan started) {
	t.Helper()
	e = zktest.StartEnsemble(t, 3)
	leader = e.Leader(t, 30*time.Second)
	root := zktest.Root(t, e.Servers[(leader+1)%3].Addr)
	return e, leader, ensembleClients(t, e, root, wrap), &termLog{}, make(chan started, 8)
}

// other returns the client that is not who.
func other(who string) string {
	if who == "a" {
		return "b"
	}
	return "a"
}

// TestEnsembleLeaderKilled runs two clients on a three-server ensemble,
// each connected through proxies to all three, the holder's session on
// the server that leads the ensemble, and kills that server (SIGKILL): a
// new leader is elected from the other two, the holder's session moves to
// one of them, and the clients go on working with two servers of three:
// the term is handed off, the killed server is started again, and the term
// is handed back. The terms never overlap and
// the tokens grow (the negative control that makes these checks fail on
// an ensemble is TestEnsembleLeaderKilledCatchesOverstatedTTL).
func TestEnsembleLeaderKilled(t *testing.T) {
	e, leader, clients, log, ch := ensembleRun(t, nil)
	a := clients["a"]
	for i, p := range a.proxies { // a's session starts on the leader
		if i != leader {
			p.Refuse()
		}
	}
	a.contend(t, log, ch)
	cur := next(t, ch, 20*time.Second, "a's first term")
	for _, p := range a.proxies {
		p.Accept()
	}
	clients["b"].contend(t, log, ch)
	session := a.c.SessionID()

	killed := time.Now()
	e.Servers[leader].Kill()
	elected := e.Leader(t, 30*time.Second)
	t.Logf("server %d (leader) killed; server %d leads %v later", leader+1, elected+1, time.Since(killed).Round(time.Millisecond))
	select {
	case <-cur.term.Revoked():
		t.Logf("a's term %d was revoked during the election (its session expired or its renewals failed)", cur.term.Token())
	default:
	}
	if id := a.c.SessionID(); id == session {
		t.Logf("a's session %s lives on after the kill", id)
	} else {
		t.Logf("a's session %s ended with the kill; a runs on session %q", session, id)
	}

	// Hand off on two servers of three: the holder stops, the other takes
	// over (or takes over at once if the holder's term ended meanwhile).
	clients[cur.who].task.Stop()
	took := next(t, ch, 30*time.Second, "the take-over with the leader killed")
	for took.who == cur.who {
		took = next(t, ch, 30*time.Second, "the take-over with the leader killed")
	}
	require.Equal(t, other(cur.who), took.who)
	require.Greater(t, took.term.Token(), cur.term.Token())

	// The killed server comes back and joins as a follower; hand back.
	e.Servers[leader].Start()
	clients[cur.who].contend(t, log, ch)
	clients[took.who].task.Stop()
	back := next(t, ch, 30*time.Second, "the hand-back after the server restarted")
	require.Equal(t, cur.who, back.who)
	require.Greater(t, back.term.Token(), took.term.Token())

	for _, c := range clients {
		closeWithin(t, c.c)
	}
	log.check(t)
}

// TestEnsembleLeaderKilledCatchesOverstatedTTL is the negative control of
// TestEnsembleLeaderKilled: with backends that overstate the TTL by a
// TTL, the holder is cut off from all three servers as the leader is
// killed; the other client takes over once the new quorum has expired the
// holder's session, while the holder still believes its term valid. The
// checks must report the overlap.
func TestEnsembleLeaderKilledCatchesOverstatedTTL(t *testing.T) {
	e, leader, clients, log, ch := ensembleRun(t, func(b backend.Backend) backend.Backend { return overstated{b, ensembleTTL} })
	clients["a"].contend(t, log, ch)
	cur := next(t, ch, 20*time.Second, "a's first term")
	clients["b"].contend(t, log, ch)

	clients[cur.who].cut()
	e.Servers[leader].Kill()
	took := next(t, ch, 60*time.Second, "the take-over from the cut-off holder")
	require.Equal(t, other(cur.who), took.who)
	select { // the cut-off holder's term ends on its own (overstated) clock
	case <-cur.term.Revoked():
	case <-time.After(30 * time.Second):
		t.Fatal("the cut-off holder's term not revoked within 30s")
	}
	clients[cur.who].heal()
	for _, c := range clients {
		closeWithin(t, c.c)
	}
	log.mu.Lock()
	errs := check.Terms(log.terms)
	log.mu.Unlock()
	if len(errs) == 0 {
		t.Fatalf("no overlap found with a TTL overstated by %v", ensembleTTL)
	}
	for _, err := range errs {
		t.Logf("caught: %v", err)
	}
}
