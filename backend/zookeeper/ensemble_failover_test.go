package zookeeper_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/zookeeper"
	waitfor "github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
)

// The failover tests of a three-server ensemble beyond its leader's crash
// (TestEnsembleLeaderKilled): a follower killed, the quorum lost and
// regained, a follower partitioned from the others. Each runs an honest
// election, "x", whose terms must never overlap, with tokens growing, and
// whose every term must end by the deadline its confirmed renewals allow
// (renewalLog.check); and next to it, on the same ensemble in the same
// run, a control election, "y", whose client has a bug planted (a TTL
// overstated by a TTL, or no leader lag): the same checks must report it,
// or the run is too weak to show anything. One ensemble per test keeps the
// cost at a start of three JVMs.

// renewal is one renewal the ensemble confirmed to a client (its session's
// opening counts as one): sent when the request left, confirmed when the
// reply came, ttl the TTL the backend reported with it.
type renewal struct {
	sent, confirmed time.Time
	ttl             time.Duration
}

// renewalLog records the renewals each client's backend saw confirmed,
// below any wrapper that plants a bug: the TTLs are the backend's own.
type renewalLog struct {
	mu  sync.Mutex
	log map[string][]renewal // by client
}

// wrap returns a function that wraps client who's backend to record its
// renewals in l.
func (l *renewalLog) wrap(who string) func(backend.Backend) backend.Backend {
	return func(b backend.Backend) backend.Backend { return renewalBackend{b, who, l} }
}

func (l *renewalLog) add(who string, sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.log == nil {
		l.log = map[string][]renewal{}
	}
	l.log[who] = append(l.log[who], renewal{sent, time.Now(), ttl})
}

// last returns client who's last confirmed renewal, if any.
func (l *renewalLog) last(who string) (renewal, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.log[who]
	if len(rs) == 0 {
		return renewal{}, false
	}
	return rs[len(rs)-1], true
}

// awaitAfter waits up to d for a renewal of who sent after at, and
// returns it.
func (l *renewalLog) awaitAfter(t *testing.T, who string, at time.Time, d time.Duration, what string) renewal {
	t.Helper()
	var r renewal
	waitfor.Until(t, d, fmt.Sprintf("%s: a renewal of %s sent after %s, confirmed", what, who, at.Format("15:04:05.000")), func() bool {
		var ok bool
		r, ok = l.last(who)
		return ok && r.sent.After(at)
	}, func() string { return fmt.Sprintf("the last one sent %s", r.sent.Format("15:04:05.000")) })
	return r
}

// beyond returns the longest stretch of [start, end) during which client
// who counted on more than its confirmed renewals allowed: an instant τ
// after the horizon of the renewals confirmed by τ (the latest sent + ttl
// among them). It returns the stretch's first instant, the horizon then,
// and its length (0 if none).
func (l *renewalLog) beyond(who string, start, end time.Time) (at, horizon time.Time, over time.Duration) {
	l.mu.Lock()
	rs := slices.Clone(l.log[who])
	l.mu.Unlock()
	slices.SortFunc(rs, func(a, b renewal) int { return a.confirmed.Compare(b.confirmed) })
	var h time.Time
	for k, r := range rs {
		if r.sent.Add(r.ttl).After(h) {
			h = r.sent.Add(r.ttl)
		}
		until := end // the horizon h holds until the next confirmation
		if k+1 < len(rs) && rs[k+1].confirmed.Before(end) {
			until = rs[k+1].confirmed
		}
		from := h
		for _, x := range []time.Time{start, r.confirmed} {
			if x.After(from) {
				from = x
			}
		}
		if d := until.Sub(from); d > over {
			at, horizon, over = from, h, d
		}
	}
	return at, horizon, over
}

// check reports, by lease name, each ended term of terms that was valid
// at an instant beyond the horizon of its client's renewals confirmed by
// then: a term valid longer than anything the ensemble confirmed allows
// (the backend's TTL already has the leader lag taken off). A term's
// client, through the whole term, has one session: the renewals of the
// others are older.
func (l *renewalLog) check(terms []started) map[string][]error {
	errs := map[string][]error{}
	for _, s := range terms {
		select {
		case <-s.term.Revoked():
		default:
			continue
		}
		if at, h, over := l.beyond(s.who, s.term.Start(), s.term.Deadline()); over > 0 {
			errs[s.term.Name()] = append(errs[s.term.Name()], fmt.Errorf("lease %q: %s's term %d valid for %v beyond the horizon of its confirmed renewals (%s), from %s",
				s.term.Name(), s.who, s.term.Token(), over.Round(time.Millisecond), h.Format("15:04:05.000"), at.Format("15:04:05.000")))
		}
	}
	return errs
}

// renewalBackend is a backend whose sessions record their confirmed
// renewals in a renewalLog.
type renewalBackend struct {
	backend.Backend
	who string
	log *renewalLog
}

func (b renewalBackend) Open(ctx context.Context, opts backend.SessionOptions) (backend.Session, error) {
	sent := time.Now()
	s, err := b.Backend.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	b.log.add(b.who, sent, s.TTL())
	return renewalSession{s, b.who, b.log}, nil
}

// renewalSession is a session of a renewalBackend.
type renewalSession struct {
	backend.Session
	who string
	log *renewalLog
}

func (s renewalSession) KeepAlive(ctx context.Context) (time.Duration, error) {
	sent := time.Now()
	ttl, err := s.Session.KeepAlive(ctx)
	if err == nil {
		s.log.add(s.who, sent, ttl)
	}
	return ttl, err
}

// failoverRun is one run of the failover tests: the ensemble, its
// clients by name, what they recorded.
type failoverRun struct {
	t        *testing.T
	e        *zktest.Ensemble
	root     string
	clients  map[string]*ensembleClient
	log      termLog // the terms of every election
	renewals renewalLog
	ch       chan started

	starts  []started // every term start taken from ch
	pending []started // those of starts nextOf has not returned yet
}

// newFailoverRun starts a three-server ensemble with the options given and
// waits for its leader.
func newFailoverRun(t *testing.T, opts ...zktest.EnsembleOption) (*failoverRun, int) {
	t.Helper()
	e := zktest.StartEnsemble(t, 3, opts...)
	leader := e.Leader(t, 30*time.Second)
	r := &failoverRun{t: t, e: e, clients: map[string]*ensembleClient{}, ch: make(chan started, 16)}
	r.root = zktest.Root(t, e.Addr())
	return r, leader
}

// client adds client who, reaching every server through a proxy of its
// own, with the leader lag given and, if not nil, its backend wrapped by
// bug (above the renewal log) and the TTL of the ensemble tests.
func (r *failoverRun) client(who string, lag time.Duration, bug func(backend.Backend) backend.Backend) *ensembleClient {
	t := r.t
	t.Helper()
	ec := &ensembleClient{who: who}
	var addrs []string
	for _, addr := range r.e.Addrs() {
		p, err := faultproxy.New(addr)
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		ec.proxies = append(ec.proxies, p)
		addrs = append(addrs, p.Addr())
	}
	zb, err := zookeeper.New(addrs, zookeeper.WithRoot(r.root), zookeeper.WithLeaderLag(lag))
	require.NoError(t, err)
	t.Cleanup(func() { zb.Close() })
	b := r.renewals.wrap(who)(zb)
	if bug != nil {
		b = bug(b)
	}
	c, err := simba.New(b, simba.WithTTL(ensembleTTL))
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, p := range ec.proxies {
			p.Heal()
			p.Accept()
		}
		closeWithin(t, c)
	})
	ec.c = c
	r.clients[who] = ec
	return ec
}

// only lets client who open connections to server i alone (the others
// refuse it), so that its session lives there; all lets it reach each
// server again.
func (r *failoverRun) only(who string, i int) {
	for j, p := range r.clients[who].proxies {
		if j == i {
			p.Accept()
		} else {
			p.Refuse()
		}
	}
}

func (r *failoverRun) all(who string) {
	for _, p := range r.clients[who].proxies {
		p.Accept()
	}
}

// contend starts client who's task for election name.
func (r *failoverRun) contend(who, name string) {
	r.t.Helper()
	c := r.clients[who]
	task, err := c.c.Election(name).RunWhileLeader(r.log.task(who, r.ch))
	require.NoError(r.t, err)
	c.task = task
}

// nextOf returns the next term start of election name, waiting up to d
// for it: every start taken from the channel is kept for the checks, and
// those of other elections for their own nextOf.
func (r *failoverRun) nextOf(name string, d time.Duration, what string) started {
	r.t.Helper()
	if i := slices.IndexFunc(r.pending, func(s started) bool { return s.term.Name() == name }); i >= 0 {
		s := r.pending[i]
		r.pending = slices.Delete(r.pending, i, i+1)
		return s
	}
	deadline := time.Now().Add(d)
	for {
		s := next(r.t, r.ch, time.Until(deadline), what)
		r.starts = append(r.starts, s)
		if s.term.Name() == name {
			return s
		}
		r.pending = append(r.pending, s)
	}
}

// revokedWithin waits up to d for s's term to end.
func (r *failoverRun) revokedWithin(s started, d time.Duration, what string) {
	r.t.Helper()
	select {
	case <-s.term.Revoked():
	case <-time.After(d):
		r.t.Fatalf("%s: %s's term %d of %q not revoked within %v", what, s.who, s.term.Token(), s.term.Name(), d)
	}
}

// finish closes the clients, takes the term starts left in the channel,
// and returns the violations of the invariants by election: I1 and I2
// (check.Terms) and the renewal horizon (renewalLog.check).
func (r *failoverRun) finish() map[string][]error {
	r.t.Helper()
	for _, c := range r.clients {
		for _, p := range c.proxies {
			p.Heal()
			p.Accept()
		}
	}
	for _, c := range r.clients {
		closeWithin(r.t, c.c)
	}
	for len(r.ch) > 0 { // the tasks have returned: nothing more comes
		r.starts = append(r.starts, <-r.ch)
	}
	out := r.renewals.check(r.starts)
	r.log.mu.Lock()
	byName := map[string][]check.Term{}
	for _, tr := range r.log.terms {
		byName[tr.Name] = append(byName[tr.Name], tr)
	}
	r.log.mu.Unlock()
	for name, terms := range byName {
		out[name] = append(out[name], check.Terms(terms)...)
	}
	for _, s := range r.starts {
		r.t.Logf("term: %s %q token %d, %s – %s", s.who, s.term.Name(), s.term.Token(),
			s.term.Start().Format("15:04:05.000"), s.term.Deadline().Format("15:04:05.000"))
	}
	return out
}

// verdict fails the test for any violation in the honest election, and
// for none in the control's: the checks must see the planted bug.
func (r *failoverRun) verdict(errs map[string][]error, honest, control, bug string) {
	r.t.Helper()
	for _, err := range errs[honest] {
		r.t.Errorf("%s: %v", honest, err)
	}
	if len(errs[control]) == 0 {
		r.t.Errorf("control %q (%s): no violation found: the run is too weak to show the bug", control, bug)
	}
	for _, err := range errs[control] {
		r.t.Logf("control %q (%s) caught: %v", control, bug, err)
	}
}

// overstate plants the bug of the controls that need the holder's TTL
// overstated: the backend reports a TTL longer than granted by a TTL.
func overstate(b backend.Backend) backend.Backend { return overstated{b, ensembleTTL} }

// TestEnsembleFollowerKilled kills (SIGKILL) the follower that the
// holder's session lives on, while it holds: the session moves to another
// server and the term goes on (or ends by its deadline). Then the killed
// follower is started again, and the other follower, which the waiter's
// session lives on, is killed during a hand-off: the holder stops as the
// server dies, and the waiter, its session moved, takes over with a
// larger token. The control election "y" has its holder's TTL overstated
// and its link to every server cut as the first follower dies: its waiter
// takes over when the quorum expires the session, while the holder still
// counts its term valid.
func TestEnsembleFollowerKilled(t *testing.T) {
	r, leader := newFailoverRun(t)
	f1 := r.e.Follower(t, 10*time.Second, leader)
	f2 := 3 - leader - f1
	lag := zktest.LeaderLag
	r.client("a", lag, nil)
	r.client("b", lag, nil)
	r.client("c", lag, overstate)
	r.client("d", lag, nil)

	r.only("a", f1) // a's session on f1, b's on f2
	r.only("b", f2)
	r.only("c", f1)
	r.contend("a", "x")
	cur := r.nextOf("x", 20*time.Second, "a's first term")
	r.contend("c", "y")
	liar := r.nextOf("y", 20*time.Second, "c's first term")
	r.contend("b", "x")
	r.contend("d", "y")
	r.all("a")

	killed := time.Now()
	for _, p := range r.clients["c"].proxies {
		p.Blackhole()
	}
	r.e.Servers[f1].Kill()
	t.Logf("server %d (follower, a's and c's sessions) killed; leader server %d", f1+1, leader+1)
	moved := r.renewals.awaitAfter(t, "a", killed, 20*time.Second, "a's session after the kill")
	select {
	case <-cur.term.Revoked():
		t.Logf("a's term %d ended (safely, by its deadline) with its server", cur.term.Token())
	default:
		t.Logf("a's session renewed on another server %v after the kill; its term %d goes on", moved.confirmed.Sub(killed).Round(time.Millisecond), cur.term.Token())
	}
	took := r.nextOf("y", 30*time.Second, "d's take-over from the cut-off liar c")
	r.revokedWithin(liar, 30*time.Second, "the cut-off liar")
	t.Logf("control: d took y %v after the kill", took.at.Sub(killed).Round(time.Millisecond))

	// The follower back; a hand-off as the waiter's server dies.
	r.e.Servers[f1].Start()
	r.all("b")
	holder := cur
	select {
	case <-cur.term.Revoked(): // a's term ended: b holds, or will
		holder = r.nextOf("x", 30*time.Second, "b's take-over after a's term ended")
	default:
	}
	handoff := time.Now()
	r.e.Servers[f2].Kill()
	r.clients[holder.who].task.Stop()
	t.Logf("server %d (follower, b's session) killed, and %s's task stopped: a hand-off", f2+1, holder.who)
	back := r.nextOf("x", 30*time.Second, "the hand-off with a follower killed")
	require.Equal(t, other(holder.who), back.who, "the hand-off went to the stopped holder")
	require.Greater(t, back.term.Token(), holder.term.Token(), "the token did not grow across the hand-off")
	t.Logf("%s took x %v after the hand-off began, token %d > %d", back.who, back.at.Sub(handoff).Round(time.Millisecond), back.term.Token(), holder.term.Token())
	r.verdict(r.finish(), "x", "y", "TTL overstated, holder cut off")
}

// TestEnsembleQuorumLost kills two servers of three (the leader and a
// follower), leaving one, which cannot serve without a quorum, for longer
// than the session timeout, and then starts one of them again. While the
// quorum is lost, the holder's term must end by the deadline its last
// confirmed renewal allows (no valid term the ensemble cannot confirm),
// and nothing may be granted. Once the quorum is back, the sessions that
// ended on the clients while it was lost are still alive on the ensemble
// (a new leader gives every session a fresh timeout): their candidacies
// must hold the lease up until they expire, so no two holders; then the
// waiter takes over, and a hand-off back works, tokens growing. The
// control "y" overstates its holder's TTL: its term outlives its renewals.
func TestEnsembleQuorumLost(t *testing.T) {
	r, leader := newFailoverRun(t)
	f1 := r.e.Follower(t, 10*time.Second, leader)
	lag := zktest.LeaderLag
	r.client("a", lag, nil)
	r.client("b", lag, nil)
	r.client("c", lag, overstate)
	r.contend("a", "x")
	cur := r.nextOf("x", 20*time.Second, "a's first term")
	r.contend("c", "y")
	liar := r.nextOf("y", 20*time.Second, "c's first term")
	r.contend("b", "x")

	lost := time.Now()
	r.e.Servers[leader].Kill()
	r.e.Servers[f1].Kill()
	t.Logf("servers %d (leader) and %d killed: the quorum is lost", leader+1, f1+1)
	r.revokedWithin(cur, 2*ensembleTTL, "the holder without a quorum")
	t.Logf("a's term %d ended %v after the quorum was lost (deadline %s)", cur.term.Token(),
		cur.term.Deadline().Sub(lost).Round(time.Millisecond), cur.term.Deadline().Format("15:04:05.000"))
	// a's session has ended on its side; the quorum stays lost for the
	// session timeout at least (the fault's length, not a wait for a
	// condition), so that every session of the clients has outlived it
	// without a renewal. The liar counts on its term meanwhile.
	time.Sleep(time.Until(lost.Add(ensembleTTL)))
	r.e.Servers[leader].Start()
	regained := time.Now()
	select {
	case s := <-r.ch:
		t.Fatalf("%s granted %q (token %d) while the quorum was lost", s.who, s.term.Name(), s.term.Token())
	default:
	}
	if len(r.pending) > 0 {
		s := r.pending[0]
		t.Fatalf("%s granted %q (token %d) while the quorum was lost", s.who, s.term.Name(), s.term.Token())
	}
	t.Logf("server %d started again: the quorum is back %v after it was lost; the liar's term %d valid until %s by its own account",
		leader+1, regained.Sub(lost).Round(time.Millisecond), liar.term.Token(), liar.term.Deadline().Format("15:04:05.000"))

	took := r.nextOf("x", 30*time.Second, "the take-over once the quorum is back")
	require.True(t, took.at.After(regained), "%s took x at %s, before the quorum was back", took.who, took.at.Format("15:04:05.000"))
	require.Greater(t, took.term.Token(), cur.term.Token(), "the token did not grow across the quorum loss")
	t.Logf("%s took x %v after the quorum was back, token %d > %d", took.who, took.at.Sub(regained).Round(time.Millisecond), took.term.Token(), cur.term.Token())
	holder := took
	r.clients[holder.who].task.Stop()
	back := r.nextOf("x", 30*time.Second, "the hand-off after the quorum is back")
	require.Equal(t, other(holder.who), back.who)
	require.Greater(t, back.term.Token(), holder.term.Token(), "the token did not grow across the hand-off")
	r.verdict(r.finish(), "x", "y", "TTL overstated")
}

// partitionLag is the leader lag that keeps a client of the ensemble safe
// when its follower is cut from the leader, as WithLeaderLag documents it:
// zktest.LeaderLag (syncLimit × tickTime + tickTime), the lag it documented
// before, is short by up to a renewal interval. The last renewal the leader heard of
// may be the one before the last the follower reported (a renewal answered
// just before the cut, its report lost with the cut), and the follower
// answers for syncLimit ticks after the cut: the client may count from a
// renewal up to syncLimit × tickTime + half a tick + a renewal interval
// (a third of the TTL) later than the leader. With zktest.LeaderLag and
// the cut timed 30 ms after the holder's renewal, one run in three
// overlapped, by 131 ms. The third of the session timeout (4 s) covers
// the interval, whatever the TTL left.
const partitionLag = zktest.LeaderLag + ensembleTTL/3

// TestEnsemblePartitionedFollower cuts the follower that the holders'
// sessions live on from the other two servers (its quorum links
// blackholed), while the holders reach that follower alone: it goes on
// answering their renewals (reads, served locally) until it gives up on
// its leader, syncLimit ticks later, and the leader, which never hears of
// those renewals, expires the sessions a timeout after the last renewal
// the follower reported to it (with its reply to the leader's ping, every
// half tick). The waiters, on the other servers, take over then.
//
// The holder of "x" sets partitionLag: its term must end before the
// take-over. The control "y" sets no leader lag (the planted bug): its
// term, extended by the renewals the cut-off follower answered, must
// overlap its waiter's. The partition is timed 400 ms before the control
// holder's next renewal, so that the follower answers one.
func TestEnsemblePartitionedFollower(t *testing.T) {
	r, leader := newFailoverRun(t, zktest.WithQuorumProxies())
	f := r.e.Follower(t, 10*time.Second, leader)
	lag := partitionLag
	r.client("a", lag, nil)
	r.client("b", lag, nil)
	r.client("c", 0, nil)
	r.client("d", 0, nil)
	for _, who := range []string{"a", "c"} {
		r.only(who, f)
	}
	for _, who := range []string{"b", "d"} {
		r.clients[who].proxies[f].Refuse()
	}
	r.contend("a", "x")
	cur := r.nextOf("x", 20*time.Second, "a's first term")
	r.contend("c", "y")
	liar := r.nextOf("y", 20*time.Second, "c's first term")
	r.contend("b", "x")
	r.contend("d", "y")

	// c renews every third of its TTL (4 s with no lag): cut 400 ms
	// before its next renewal, well within the second the follower goes
	// on answering.
	last := r.renewals.awaitAfter(t, "c", time.Now(), 10*time.Second, "c's renewals")
	time.Sleep(time.Until(last.sent.Add(ensembleTTL/3 - 400*time.Millisecond)))
	cut := time.Now()
	r.e.Partition(f)
	t.Logf("server %d (follower, the holders' sessions) cut from the others", f+1)
	waitfor.Until(t, 30*time.Second, fmt.Sprintf("server %d out of service after it was cut from its leader", f+1),
		func() bool { return r.e.Mode(f) == "" }, func() string { return "it still serves" })
	t.Logf("server %d stopped serving %v after the cut", f+1, time.Since(cut).Round(time.Millisecond))
	for _, who := range []string{"a", "c"} {
		if rn, ok := r.renewals.last(who); ok && rn.sent.After(cut) {
			t.Logf("%s's renewal sent %v after the cut confirmed by the cut-off follower", who, rn.sent.Sub(cut).Round(time.Millisecond))
		}
	}
	tookX := r.nextOf("x", 30*time.Second, "b's take-over")
	r.revokedWithin(cur, 30*time.Second, "a cut off with its follower")
	require.Equal(t, "b", tookX.who)
	t.Logf("x: a's term ended %v after the cut, b's began %v after it", cur.term.Deadline().Sub(cut).Round(time.Millisecond), tookX.at.Sub(cut).Round(time.Millisecond))
	tookY := r.nextOf("y", 30*time.Second, "d's take-over")
	r.revokedWithin(liar, 30*time.Second, "c cut off with its follower")
	r.e.Heal(f)
	errs := r.finish()
	t.Logf("y: c's term ended %v after the cut, d's began %v after it", liar.term.Deadline().Sub(cut).Round(time.Millisecond), tookY.at.Sub(cut).Round(time.Millisecond))
	r.verdict(errs, "x", "y", "no leader lag")
}
