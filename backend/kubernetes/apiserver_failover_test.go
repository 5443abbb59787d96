package kubernetes_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/kubetest"
)

// The kinds of round of TestAPIServerFailover: what the holder does as the
// kube-apiserver its clients reach through the front is killed.
const (
	killRenewing = "renewing"   // it renews: its term must go on
	killStopping = "stopping"   // it closes its client: a hand-off by release
	killCut      = "holder-cut" // its link is cut: a hand-off by expiry
)

// failoverStats are the figures of the rounds of TestAPIServerFailover.
type failoverStats struct {
	rounds, kills, handOffs int
	killed                  map[string]int             // kills per server address
	toRenewal               []time.Duration            // kill → the holder's next renewal confirmed (sent after the kill)
	toGrant                 map[string][]time.Duration // by kind, kill → the next term
	termsLost               int                        // renewing holders whose term ended on a kill
	frontMove               []time.Duration            // kill → the front's move
	tokens                  []uint64                   // the tokens of the terms the rounds saw, in order
}

// TestAPIServerFailover runs simba's clients against two kube-apiservers on
// one etcd (kubetest.StartPeer), reached through one address, a load
// balancer that health-checks its target and moves to the other server
// when it fails (kubetest.Front), as clients of a highly available control
// plane reach it. Round after round, the front's target, the server every
// client is connected to, is killed (SIGKILL) at a random moment: while
// the holder renews (its term must go on: the next renewal is confirmed by
// the other server), as the holder closes its client (a hand-off by
// release), or as the holder's link is cut (a hand-off by expiry, its term
// over by its own deadline before the server freed its holding); then the
// killed server is started again, and the next round kills the other one.
// Every round checks that the lease is held again within opTimeout;
// overall: no two terms overlap (I1), tokens increase (I2), no stale
// fenced write is accepted (I3).
//
// Its control, in the same run: the same kills with a backend that
// overstates its sessions' TTL by a TTL (overstating) and a holder cut off
// as its server is killed; the checks must catch the overlap.
func TestAPIServerFailover(t *testing.T) {
	t0 := time.Now()
	srv := kubetest.Start(t)
	peer := srv.StartPeer(t)
	front := kubetest.StartFront(t, srv, peer)
	t.Logf("two kube-apiservers on one etcd, %s and %s, behind the front %s (health checks every %v), in %v",
		srv.Addr(), peer.Addr(), front.Addr(), kubetest.HealthEvery, time.Since(t0).Round(time.Millisecond))

	t.Run("failover", func(t *testing.T) {
		t1 := time.Now()
		p := startViaFront(t, srv, front, nil)
		kinds := []string{killRenewing, killStopping, killCut, killRenewing, killStopping, killCut}
		st := p.failoverRounds(t, front, kinds, nil, nil)
		p.checkAll(t)
		t.Logf("%d rounds, %d apiserver kills (%s), %d hand-offs, %d terms (tokens %s), %d front moves; renewing holders whose term ended on the kill: %d",
			st.rounds, st.kills, killsPer(st.killed), st.handOffs, len(st.tokens), tokenRange(st.tokens), len(front.Moves()), st.termsLost)
		t.Logf("kill → the front's move: %s", spread(st.frontMove))
		t.Logf("kill → the holder's next renewal confirmed (sent after the kill): %s", spread(st.toRenewal))
		for _, k := range []string{killStopping, killCut} {
			t.Logf("kill as the holder was %s → the next term: %s", k, spread(st.toGrant[k]))
		}
		t.Logf("wall time %v", time.Since(t1).Round(time.Millisecond))
		// A renewing holder may lose its term when the failover takes
		// longer than its slack (on a loaded machine): not a safety matter,
		// so only a holder that never keeps its term fails the test.
		if n := len(st.toRenewal) + st.termsLost; n > 0 && st.termsLost == n {
			t.Errorf("every renewing holder (%d) lost its term on the kill of the server: renewals do not follow the front to the other server", n)
		}
	})

	t.Run("control", func(t *testing.T) {
		t1 := time.Now()
		wrap := func(b *kubernetes.Backend) backend.Backend { return &overstating{Backend: b, extra: faultTTL} }
		p := startViaFront(t, srv, front, wrap)
		// Up to four rounds, until one is caught.
		p.failoverRounds(t, front, []string{killCut, killCut, killCut, killCut}, wrap, func() bool {
			for _, err := range p.log.CheckTerms() {
				p.failf("%v", err)
			}
			return len(p.errs) > 0
		})
		if len(p.errs) == 0 {
			t.Fatalf("the failover rounds found no violation with the TTL overstated by %v", faultTTL)
		}
		for _, err := range p.errs {
			t.Logf("caught: %v", err)
		}
		t.Logf("wall time %v", time.Since(t1).Round(time.Millisecond))
	})
	t.Logf("wall time %v", time.Since(t0).Round(time.Millisecond))
}

// startViaFront is startClients with every client's proxy forwarding to
// the front, and the grant log's watch through the front too.
func startViaFront(t *testing.T, srv *kubetest.Server, front *kubetest.Front, wrap func(*kubernetes.Backend) backend.Backend) *pair {
	t.Helper()
	ns := srv.Namespace(t)
	p := &pair{t: t, keep: wrap != nil, srv: srv, ns: ns, log: newTermLog(),
		proxy: map[string]*faultproxy.Proxy{}, c: map[string]*simba.Client{}}
	p.grant = watchGrantsVia(t, srv.ConfigVia(front.Addr(), srv.Admin()), ns)
	for _, name := range []string{"a", "b"} {
		px, err := faultproxy.New(front.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		p.proxy[name] = px
		p.c[name] = startClientVia(t, p, name, wrap)
	}
	return p
}

// startClientVia starts the client of name, through its proxy, running
// the term log's task on the election "x".
func startClientVia(t *testing.T, p *pair, name string, wrap func(*kubernetes.Backend) backend.Backend) *simba.Client {
	t.Helper()
	px := p.proxy[name]
	b, err := kubernetes.New(p.srv.ConfigVia(px.Addr(), p.srv.Admin()), kubernetes.WithNamespace(p.ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var sb backend.Backend = b
	if wrap != nil {
		sb = wrap(b)
	}
	c, err := simba.New(sb, simba.WithTTL(faultTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		px.Heal()
		await.For(t, await.Returned(c.Close), closeWait, "client %s: Close did not return", name)
	})
	if _, err := c.Election("x").RunWhileLeader(p.log.Task(name, c)); err != nil {
		t.Fatal(err)
	}
	return c
}

// failoverRounds plays a round per kind: at a random phase of the
// holder's renewals, it kills the front's target (and, for killStopping,
// closes the holder's client; for killCut, cuts the holder's link), waits
// for the front to move, for the holder's renewal or the next term, starts
// the killed server again, and makes the old holder a contender again
// (wrap, if not nil, wrapping its new backend). It stops early once done (if not nil) reports true after a round.
func (p *pair) failoverRounds(t *testing.T, front *kubetest.Front, kinds []string, wrap func(*kubernetes.Backend) backend.Backend, done func() bool) failoverStats {
	t.Helper()
	st := failoverStats{killed: map[string]int{}, toGrant: map[string][]time.Duration{}}
	holder := p.first(t)
	st.tokens = append(st.tokens, holder.Term.Token())
	for round, kind := range kinds {
		if round > 0 && done != nil && done() {
			break
		}
		st.rounds++
		time.Sleep(faultTTL/3 + rand.N(faultTTL/3))
		other := map[string]string{"a": "b", "b": "a"}[holder.Node]
		victim := front.Target()
		moves := len(front.Moves())

		var closed <-chan error
		switch kind {
		case killStopping:
			closed = await.Returned(p.c[holder.Node].Close)
		case killCut:
			p.proxy[holder.Node].Blackhole()
		}
		deadline0 := holder.Term.Deadline()
		kill := time.Now()
		victim.Crash()
		st.kills++
		st.killed[victim.Addr()]++
		if !eventually(opTimeout, func() bool { return len(front.Moves()) > moves }) {
			t.Fatalf("round %d: the front did not move off the killed server %s within %v", round, victim.Addr(), opTimeout)
		}
		st.frontMove = append(st.frontMove, front.Moves()[moves].At.Sub(kill))

		var next *seenTerm
		switch kind {
		case killRenewing:
			// The next renewal sent after the kill is confirmed: the
			// deadline passes kill + TTL − margin (10% of the TTL).
			renewed := func() bool { return holder.Term.Deadline().After(kill.Add(faultTTL - faultTTL/10)) }
			if eventually(opTimeout, func() bool { return renewed() || !holder.Term.Valid() }) && renewed() {
				st.toRenewal = append(st.toRenewal, time.Since(kill))
			} else {
				st.termsLost++
				t.Logf("round %d (%s): the term %d of %s ended %v after the kill (deadline before it %v after it)",
					round, kind, holder.Term.Token(), holder.Node, holder.Term.Deadline().Sub(kill).Round(time.Millisecond), deadline0.Sub(kill).Round(time.Millisecond))
				if next = p.log.Next("", opTimeout); next == nil {
					t.Fatalf("round %d: no term within %v after %s's term ended", round, opTimeout, holder.Node)
				}
			}
		case killStopping, killCut:
			if next = p.log.Next(other, opTimeout); next == nil {
				t.Fatalf("round %d (%s): no take-over by %s within %v of the kill", round, kind, other, opTimeout)
			}
			st.handOffs++
			st.toGrant[kind] = append(st.toGrant[kind], next.Term.Start().Sub(kill))
			if next.Term.Token() <= holder.Term.Token() {
				p.failf("round %d: token %d after %d", round, next.Term.Token(), holder.Term.Token())
			}
			if gap := next.Term.Start().Sub(holder.Term.Deadline()); gap <= 0 {
				p.failf("round %d (%s): term %d of %s began %v before term %d of %s ended", round, kind, next.Term.Token(), next.Node, -gap, holder.Term.Token(), holder.Node)
			}
		}
		if kind == killCut {
			p.revoked(t, holder, kill, "cut")
			if !p.keep {
				p.expiredTerm(t, holder, next)
			}
		}
		t.Logf("round %d (%s): killed %s; the front moved %v after; %s",
			round, kind, victim.Addr(), st.frontMove[len(st.frontMove)-1].Round(time.Millisecond), roundResult(holder, next, kill))

		restarted := time.Now()
		victim.Start()
		t.Logf("round %d: %s started again in %v", round, victim.Addr(), time.Since(restarted).Round(time.Millisecond))
		switch kind {
		case killStopping:
			if err := await.For(t, closed, closeWait, "round %d: %s's Close did not return", round, holder.Node); err != nil {
				t.Fatalf("round %d: %s's Close: %v", round, holder.Node, err)
			}
			p.c[holder.Node] = startClientVia(t, p, holder.Node, wrap)
		case killCut:
			p.proxy[holder.Node].Heal()
			if !eventually(opTimeout, func() bool {
				id := p.c[holder.Node].SessionID()
				return id != "" && id != holder.Session
			}) {
				t.Fatalf("round %d: %s has no new session %v after the link healed", round, holder.Node, opTimeout)
			}
		}
		if next != nil {
			st.tokens = append(st.tokens, next.Term.Token())
			holder = next
		}
	}
	return st
}

// roundResult describes a round's outcome for the log.
func roundResult(holder, next *seenTerm, kill time.Time) string {
	if next == nil {
		return fmt.Sprintf("term %d of %s went on (deadline %v after the kill)", holder.Term.Token(), holder.Node, holder.Term.Deadline().Sub(kill).Round(time.Millisecond))
	}
	return fmt.Sprintf("term %d of %s ended %v after the kill, term %d of %s began %v after it (%v later)",
		holder.Term.Token(), holder.Node, holder.Term.Deadline().Sub(kill).Round(time.Millisecond),
		next.Term.Token(), next.Node, next.Term.Start().Sub(kill).Round(time.Millisecond), next.Term.Start().Sub(holder.Term.Deadline()).Round(time.Millisecond))
}

// killsPer gives the kills per server.
func killsPer(m map[string]int) string {
	var s []string
	for a, n := range m {
		s = append(s, fmt.Sprintf("%s: %d", a, n))
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// tokenRange gives the first and last of tokens.
func tokenRange(tokens []uint64) string {
	if len(tokens) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d…%d", tokens[0], tokens[len(tokens)-1])
}

// spread gives min, median and max of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return fmt.Sprintf("%d: min %v, median %v, max %v", len(ds), ds[0].Round(time.Millisecond), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
}
