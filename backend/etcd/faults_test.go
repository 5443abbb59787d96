package etcd_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/faultproxy"
)

// faultTTL is the session TTL of the fault tests: etcd's minimum here.
// Renewals go every 333ms; the default drift margin is 100ms.
const faultTTL = time.Second

// TestBlackholedHolderRevokedBeforeTakeover cuts the link of the holder of
// an election, again and again: its term must be over, on its own clock,
// strictly before the other node's term begins. Ten independent pairs of
// nodes, each with its own proxies and election, play five rounds each, the
// holder alternating.
func TestBlackholedHolderRevokedBeforeTakeover(t *testing.T) {
	srv := startServer(t)
	const pairs, rounds = 10, 5
	var (
		mu     sync.Mutex
		gaps   []time.Duration
		cut    []check.Term  // the cut holders' terms
		grants []check.Grant // their holdings, ended at the latest when the next term began
		wg     sync.WaitGroup
	)
	logs := make([]*termLog, pairs)
	var all []*node
	for p := range pairs {
		logs[p] = newTermLog()
		election := fmt.Sprintf("pair-%d", p)
		var nodes [2]*node
		var proxies [2]*faultproxy.Proxy
		for i := range nodes {
			proxies[i] = newProxy(t, srv.Endpoints()[0])
			nodes[i] = newNode(t, fmt.Sprintf("p%d-%c", p, 'a'+i), []string{proxies[i].Addr()}, testPrefix(t), faultTTL)
			all = append(all, nodes[i])
		}
		wg.Go(func() {
			pairGaps, pairCut, pairGrants := blackholeRounds(t, election, nodes, proxies, logs[p], rounds)
			mu.Lock()
			gaps = append(gaps, pairGaps...)
			cut = append(cut, pairCut...)
			grants = append(grants, pairGrants...)
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, n := range all {
		await.For(t, await.Returned(n.client.Close), closeWait, "node %s: Close did not return", n.name)
	}
	terms := 0
	for _, l := range logs {
		terms += l.check(t) // I1, I2 over every term, not only the rounds'
	}
	if t.Failed() {
		return
	}
	t.Logf("%d terms checked", terms)
	if len(gaps) < pairs*rounds {
		t.Fatalf("%d rounds completed, want %d", len(gaps), pairs*rounds)
	}
	slices.Sort(gaps)
	t.Logf("%d take-overs after a blackholed link: revocation-before-grant gap min %v, median %v, max %v",
		len(gaps), gaps[0].Round(time.Microsecond), gaps[len(gaps)/2].Round(time.Millisecond), gaps[len(gaps)-1].Round(time.Millisecond))
	if gaps[0] <= 0 {
		t.Errorf("a new term began %v before the blackholed holder's term ended", -gaps[0])
	}
	// I4 by the shared checker: etcd freed each cut holder's key (by
	// expiry) no later than the next term began, so the term must have ended
	// before that.
	minGap, errs := check.AgainstGrants(cut, grants)
	for _, err := range errs {
		t.Error(err)
	}
	if minGap != gaps[0] {
		t.Errorf("the checker's smallest gap %v differs from the rounds' %v", minGap, gaps[0])
	}
}

// blackholeRounds plays rounds on one pair and returns the gaps between the
// end of the cut holder's term (its Deadline once revoked, on this process's
// clock) and the start of the next term; and, for the checker, the cut
// holders' terms and their holdings, whose end etcd applied before the next
// term began.
func blackholeRounds(t *testing.T, election string, nodes [2]*node, proxies [2]*faultproxy.Proxy, log *termLog, rounds int) (gaps []time.Duration, cut []check.Term, grants []check.Grant) {
	defer func() { // a round that failed left its holder cut off
		for _, px := range proxies {
			px.Heal()
		}
	}()
	for _, n := range nodes {
		n.awaitSession(t, opTimeout)
		if _, err := n.client.Election(election).RunWhileLeader(log.task(n.name)); err != nil {
			t.Error(err)
			return
		}
	}
	index := map[string]int{nodes[0].name: 0, nodes[1].name: 1}
	holder := log.next(t, "", opTimeout)
	for round := range rounds {
		h := index[holder.node]
		other := nodes[1-h]
		proxies[h].Blackhole()
		next := log.next(t, other.name, 30*time.Second)
		if !waitFor(holder.ended, 30*time.Second) {
			t.Errorf("%s round %d: the cut holder's term %d was never revoked", election, round, holder.term.Token())
			return
		}
		gap := next.start.Sub(holder.term.Deadline())
		if gap <= 0 {
			t.Errorf("%s round %d: term %d of %s began at %v, %v before term %d of the cut %s ended",
				election, round, next.term.Token(), next.node, next.start, -gap, holder.term.Token(), holder.node)
		}
		if next.term.Token() <= holder.term.Token() {
			t.Errorf("%s round %d: token %d after %d", election, round, next.term.Token(), holder.term.Token())
		}
		gaps = append(gaps, gap)
		ct := holder.term
		cut = append(cut, check.Term{Name: ct.Name(), Token: ct.Token(), Start: holder.start, End: ct.Deadline()})
		grants = append(grants, check.Grant{Name: ct.Name(), Token: ct.Token(), Start: holder.start, End: next.start, Ended: true, Expired: true})
		// Heal, and let the cut node open a new session before it is the
		// one to take over.
		proxies[h].Heal()
		nodes[h].awaitSession(t, opTimeout)
		holder = next
	}
	return
}

// TestServerRestart stops the etcd server for longer than the TTL: the
// holder's term is revoked by its deadline, without any answer from the
// server; once the server is back, the nodes recover by themselves and the
// next term has a larger token. A short outage first tests that nothing
// breaks when renewals merely fail for a while.
func TestServerRestart(t *testing.T) {
	srv := startServer(t)
	log := newTermLog()
	var nodes []*node
	for i := range 2 {
		n := newNode(t, fmt.Sprintf("n%d", i), srv.Endpoints(), testPrefix(t), faultTTL)
		if _, err := n.client.Election("restart").RunWhileLeader(log.task(n.name)); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	t.Cleanup(func() { srv.Restart() }) // a test failing in an outage: before the clients close
	first := log.next(t, "", opTimeout)

	// A short outage: a renewal or two fail.
	srv.Stop()
	time.Sleep(200 * time.Millisecond)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("short outage: term %d survived: %v", first.term.Token(), !closed(first.ended))

	// A long outage: every term must end by its deadline.
	holder := first
	if closed(first.ended) {
		holder = log.next(t, "", opTimeout)
	}
	srv.Stop()
	stopped := time.Now()
	if !waitFor(holder.ended, 30*time.Second) {
		t.Fatalf("term %d not revoked 30s into the outage", holder.term.Token())
	}
	// No renewal was confirmed after the stop: the term ended by the
	// deadline of the last renewal before it, at most TTL - margin after the
	// stop, on this process's clock alone.
	end := holder.term.Deadline()
	t.Logf("long outage: term %d ended %v after the server stopped; its task saw it %v later",
		holder.term.Token(), end.Sub(stopped).Round(time.Millisecond), holder.endedAt.Sub(end).Round(time.Millisecond))
	if holder.term.Valid() || end.After(holder.endedAt) {
		t.Error("term valid after its revocation")
	}
	if limit := stopped.Add(faultTTL - 100*time.Millisecond); end.After(limit) {
		t.Errorf("term %d valid until %v after the server stopped, past TTL - margin", holder.term.Token(), end.Sub(stopped))
	}
	time.Sleep(time.Until(stopped.Add(2 * faultTTL)))
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	next := log.next(t, "", 30*time.Second)
	t.Logf("after the restart: term %d on %s after %v", next.term.Token(), next.node, next.start.Sub(restarted).Round(time.Millisecond))
	if next.term.Token() <= holder.term.Token() {
		t.Errorf("token %d after the restart, want > %d", next.term.Token(), holder.term.Token())
	}
	for _, n := range nodes {
		await.For(t, await.Returned(n.client.Close), closeWait, "node %s: Close did not return", n.name)
	}
	log.check(t)
}

// TestCloseLeavesNothing runs elections and a partition group on three
// nodes, closes them, and checks that no key is left under the prefix and
// no goroutine of theirs runs.
func TestCloseLeavesNothing(t *testing.T) {
	srv := startServer(t)
	cli := newClient(t, srv)
	prefix := testPrefix(t)
	if _, err := cli.Get(op(t), prefix); err != nil { // the client's goroutines are up
		t.Fatal(err)
	}
	baseline := goleak.IgnoreCurrent()

	var nodes []*node
	running := make(chan string, 64)
	for i := range 3 {
		n := newNode(t, fmt.Sprintf("n%d", i), srv.Endpoints(), prefix, 2*time.Second)
		for _, e := range []string{"ingest", "report"} {
			if _, err := n.client.Election(e).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
				running <- term.Name()
				<-ctx.Done()
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := n.client.Group("billing", 4).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
			running <- term.Name()
			<-ctx.Done()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	seen := map[string]bool{}
	timeout := time.After(opTimeout)
	for len(seen) < 6 {
		select {
		case name := <-running:
			seen[name] = true
		case <-timeout:
			t.Fatalf("only %v running after %v", seen, opTimeout)
		}
	}
	// Sessions, candidacies (every node's for each election, the owner's
	// for each partition) and members (the last members may join a little
	// after the partitions run).
	for deadline := time.Now().Add(opTimeout); ; time.Sleep(10 * time.Millisecond) {
		got := sessionKeys(keys(t, cli, prefix))
		if len(got) == 3+2*3+4+3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys while running: %q", got)
		}
	}
	for _, n := range nodes {
		if err := n.client.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Records (status) outlive the sessions, by design; nothing else may.
	if got := sessionKeys(keys(t, cli, prefix)); len(got) != 0 {
		t.Errorf("keys left after Close: %q", got)
	}
	for _, n := range nodes {
		if err := n.backend.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := goleak.Find(baseline); err != nil {
		t.Errorf("goroutines left after Close: %v", err)
	}
}

// sessionKeys returns the keys that are not records: those bound to a
// session.
func sessionKeys(keys []string) []string {
	var out []string
	for _, k := range keys {
		if !strings.HasPrefix(k, "rec/") {
			out = append(out, k)
		}
	}
	return out
}
