package zookeeper_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
)

// termLog records the terms tasks saw, on this process's clock.
type termLog struct {
	mu    sync.Mutex
	terms []check.Term
}

// started is one term as its task began it.
type started struct {
	who  string
	term *simba.Term
	at   time.Time
}

// task returns a RunWhileLeader function for client who: it reports the
// term on ch, holds it until it is revoked, and records it.
func (l *termLog) task(who string, ch chan<- started) func(context.Context, *simba.Term) error {
	return func(ctx context.Context, term *simba.Term) error {
		if ch != nil {
			ch <- started{who, term, time.Now()}
		}
		<-term.Revoked()
		l.mu.Lock()
		l.terms = append(l.terms, check.Term{Name: term.Name(), Token: term.Token(), Start: term.Start(), End: term.Deadline()})
		l.mu.Unlock()
		return nil
	}
}

// check runs the invariant checkers over the recorded terms.
func (l *termLog) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range check.Terms(l.terms) {
		t.Error(err)
	}
}

// client returns a simba client on b, closed when the test ends.
func client(t *testing.T, b *zookeeper.Backend, ttl time.Duration, opts ...simba.Option) *simba.Client {
	t.Helper()
	c, err := simba.New(b, append([]simba.Option{simba.WithTTL(ttl)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { closeWithin(t, c) })
	return c
}

// closeWait bounds a clean-up's wait for a client's Close.
const closeWait = 30 * time.Second

// closeWithin closes c, waiting at most closeWait: a client that a failed
// test left cut off from the server may wait for its deadline, for ever if
// that never ends its session; its goroutines are then left to goleak, and
// the test fails saying so instead of hanging.
func closeWithin(t testing.TB, c *simba.Client) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); c.Close() }()
	select {
	case <-done:
	case <-time.After(closeWait):
		t.Errorf("client %s: Close did not return within %v", c.SessionID(), closeWait)
	}
}

// await waits up to d for the next term start on ch.
func await(ch <-chan started, d time.Duration) (started, bool) {
	select {
	case s := <-ch:
		return s, true
	case <-time.After(d):
		return started{}, false
	}
}

// next waits for the next term start on ch.
func next(t *testing.T, ch <-chan started, d time.Duration, what string) started {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(d):
		t.Fatalf("no term started within %v: %s", d, what)
		return started{}
	}
}

// TestBlackholeRevokesBeforeTakeover cuts the holder's link in a proxy:
// the holder's term must be revoked, on its own clock, strictly before the
// other client's term begins. Ten pairs of clients run five rounds each,
// concurrently, on 1s sessions.
func TestBlackholeRevokesBeforeTakeover(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	const pairs, rounds = 10, 5
	gaps, errs := blackholeRounds(t, addr, root, pairs, rounds, nil)
	for _, err := range errs {
		t.Error(err)
	}
	require.Len(t, gaps, pairs*rounds)
	smallest, sum := time.Duration(math.MaxInt64), time.Duration(0)
	for _, g := range gaps {
		smallest = min(smallest, g)
		sum += g
	}
	t.Logf("%d take-overs after a blackhole: the old term ended %v before the new one began at the least (mean %v)",
		len(gaps), smallest, sum/time.Duration(len(gaps)))
}

// TestBlackholeCatchesOverstatedTTL plants a bug, a backend that reports
// a longer session timeout than granted, and checks that the blackhole
// rounds catch it: a checker that cannot fail proves nothing. A lie of
// 400ms on the rounds' 1s sessions made the terms overlap by 110–250ms
// (the server expires a session up to a tick, 200ms, late, and the
// take-over takes its round trips); a lie of a TTL (1s), by 570–780ms.
func TestBlackholeCatchesOverstatedTTL(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	const lie = time.Second
	_, errs := blackholeRounds(t, addr, root, 2, 2, func(b backend.Backend) backend.Backend {
		return overstated{b, lie}
	})
	if len(errs) == 0 {
		t.Fatalf("no overlap found with a TTL overstated by %v", lie)
	}
	for _, err := range errs {
		t.Logf("caught: %v", err)
	}
}

// overstated is a backend whose sessions claim a longer TTL than granted.
type overstated struct {
	backend.Backend
	extra time.Duration
}

func (o overstated) Open(ctx context.Context, opts backend.SessionOptions) (backend.Session, error) {
	s, err := o.Backend.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	return overstatedSession{s, o.extra}, nil
}

type overstatedSession struct {
	backend.Session
	extra time.Duration
}

func (s overstatedSession) TTL() time.Duration { return s.Session.TTL() + s.extra }

func (s overstatedSession) KeepAlive(ctx context.Context) (time.Duration, error) {
	ttl, err := s.Session.KeepAlive(ctx)
	return ttl + s.extra, err
}

// blackholeRounds runs pairs of clients, each client through a proxy of
// its own, for rounds take-overs each: the holder's link is blackholed
// until the other client's term begins. It returns the gaps between the
// end of each old term and the start of the new one, and the violations
// of the invariants.
func blackholeRounds(t *testing.T, addr, root string, pairs, rounds int, wrap func(backend.Backend) backend.Backend) ([]time.Duration, []error) {
	var (
		log  termLog
		mu   sync.Mutex
		gaps []time.Duration
		errs []error
		wg   sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Errorf(format, args...))
		mu.Unlock()
	}
	for i := range pairs {
		wg.Go(func() {
			election := fmt.Sprintf("blackhole-%d", i)
			proxies := make(map[string]*faultproxy.Proxy)
			ch := make(chan started, 4)
			for _, who := range []string{"a", "b"} {
				p, err := faultproxy.New(addr)
				if err != nil {
					fail("%s: proxy: %v", election, err)
					return
				}
				t.Cleanup(func() { p.Close() })
				proxies[who] = p
				var b backend.Backend = newBackendAt(t, p.Addr(), root)
				if wrap != nil {
					b = wrap(b)
				}
				c, err := simba.New(b, simba.WithTTL(time.Second))
				if err != nil {
					fail("%s: %v", election, err)
					return
				}
				t.Cleanup(func() {
					p.Heal() // a round that failed left it cut off
					closeWithin(t, c)
				})
				if _, err := c.Election(election).RunWhileLeader(log.task(who, ch)); err != nil {
					fail("%s: %v", election, err)
					return
				}
			}
			cur, ok := await(ch, 10*time.Second)
			if !ok {
				fail("%s: no first term within 10s", election)
				return
			}
			for round := range rounds {
				// Cut the link at a random phase of the holder's renewals,
				// once its last request is a renewal rather than the
				// Acquire that began its term (which the server counts
				// from, and the client does not).
				time.Sleep(400*time.Millisecond + rand.N(400*time.Millisecond))
				proxies[cur.who].Blackhole()
				nxt, ok := await(ch, 10*time.Second)
				if !ok {
					fail("%s round %d: no take-over within 10s", election, round)
					return
				}
				if nxt.who == cur.who {
					fail("%s round %d: the blackholed client started a term", election, round)
				}
				select {
				case <-cur.term.Revoked():
				default:
					fail("%s round %d: the old term %d was not revoked when term %d began", election, round, cur.term.Token(), nxt.term.Token())
				}
				gap := nxt.term.Start().Sub(cur.term.Deadline())
				mu.Lock()
				gaps = append(gaps, gap)
				mu.Unlock()
				if gap <= 0 {
					fail("%s round %d: term %d valid until %v, %v after term %d began", election, round,
						cur.term.Token(), cur.term.Deadline().Format(time.StampMicro), -gap, nxt.term.Token())
				}
				proxies[cur.who].Heal()
				cur = nxt
			}
		})
	}
	wg.Wait()
	log.mu.Lock()
	errs = append(errs, check.Terms(log.terms)...)
	log.mu.Unlock()
	return gaps, errs
}

// TestServerRestartExpiresCutOffSession restarts the server while the
// holder is cut off, and keeps it cut off until its session has expired on
// the restarted server. The other client takes over; the stale session
// never acts again (the new holder keeps its term); once healed, the old
// holder learns its session is gone, opens a new one by itself, and takes
// over when the lease is free.
func TestServerRestartExpiresCutOffSession(t *testing.T) {
	t.Parallel()
	srv := zktest.StartServer(t)
	root := zktest.Root(t, srv.Addr)
	p, err := faultproxy.New(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })

	var log termLog
	ch := make(chan started, 4)
	var emu sync.Mutex
	var aSessions []string
	a := client(t, newBackendAt(t, p.Addr(), root), time.Second, simba.WithEventHandler(func(e simba.Event) {
		if s, ok := e.(simba.SessionStarted); ok {
			emu.Lock()
			aSessions = append(aSessions, s.Session)
			emu.Unlock()
		}
	}))
	_, err = a.Election("x").RunWhileLeader(log.task("a", ch))
	require.NoError(t, err)
	first := next(t, ch, 10*time.Second, "a's first term")
	old := a.SessionID()
	b := client(t, newBackendAt(t, srv.Addr, root), time.Second)
	bTask, err := b.Election("x").RunWhileLeader(log.task("b", ch))
	require.NoError(t, err)

	p.Blackhole()
	t.Cleanup(p.Heal) // before the clients close, if the test fails while a is cut off
	srv.Stop()
	srv.Start()
	// The restarted server restores the sessions with a fresh timeout; a's
	// expires a second later, as a cannot reach it.
	took := next(t, ch, 15*time.Second, "b's take-over")
	require.Equal(t, "b", took.who)
	assert.True(t, first.term.Start().Before(took.term.Start()))
	select {
	case <-first.term.Revoked():
	default:
		t.Fatal("a's term still valid when b's began")
	}
	p.Heal()

	// a recovers by itself: a new session, and nothing from the old one.
	deadline := time.Now().Add(10 * time.Second)
	for {
		id := a.SessionID()
		if id != "" && id != old {
			break
		}
		require.True(t, time.Now().Before(deadline), "a has no new session 10s after the link healed")
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	select {
	case <-took.term.Revoked():
		t.Fatal("b's term was revoked after a came back")
	default:
	}
	// A connection of its own, opened now: one opened before the restart
	// may be between go-zookeeper's reconnection attempts, which fail
	// what it was asked meanwhile with "could not connect to a server".
	nodes, err := zktest.Snapshot(srv.Addr, root)
	require.NoError(t, err)
	for _, n := range nodes {
		if owner, ok := n.Ephemeral(); ok {
			assert.NotEqual(t, old, fmt.Sprintf("%016x", uint64(owner)), "znode %s of the expired session", n.Path)
		}
	}

	bTask.Stop()
	again := next(t, ch, 10*time.Second, "a's take-over after b stops")
	assert.Equal(t, "a", again.who)
	assert.Greater(t, again.term.Token(), took.term.Token())
	emu.Lock()
	assert.GreaterOrEqual(t, len(aSessions), 2)
	emu.Unlock()
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	log.check(t)
}

// Environment of the helper process of TestCrashedClientFailover.
const (
	helperEnv     = "SIMBA_ZK_HELPER"
	helperRootEnv = "SIMBA_ZK_HELPER_ROOT"
	helperTTLEnv  = "SIMBA_ZK_HELPER_TTL"
)

// TestHelperProcess is the client that TestCrashedClientFailover and the
// benchmarks start and kill: it contends for "crash" and prints
// "elected <token> <granted TTL in ns>" when it wins, then holds the term
// until it is killed.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("started by TestCrashedClientFailover")
	}
	ttl, err := time.ParseDuration(os.Getenv(helperTTLEnv))
	require.NoError(t, err)
	b, err := zookeeper.New([]string{zktest.Addr(t)}, zookeeper.WithRoot(os.Getenv(helperRootEnv)))
	require.NoError(t, err)
	var granted atomicDuration
	c, err := simba.New(b, simba.WithTTL(ttl), simba.WithEventHandler(func(e simba.Event) {
		if s, ok := e.(simba.SessionStarted); ok {
			granted.set(s.TTL)
		}
	}))
	require.NoError(t, err)
	_, err = c.Election("crash").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		fmt.Printf("elected %d %d\n", term.Token(), granted.get())
		<-ctx.Done()
		return nil
	})
	require.NoError(t, err)
	select {} // until killed
}

type atomicDuration struct {
	mu sync.Mutex
	d  time.Duration
}

func (a *atomicDuration) set(d time.Duration) { a.mu.Lock(); a.d = d; a.mu.Unlock() }
func (a *atomicDuration) get() time.Duration  { a.mu.Lock(); defer a.mu.Unlock(); return a.d }

// crashRound starts a helper client, waits until it leads, lets this
// process's task contend, kills the helper with SIGKILL and returns the time
// from the kill to this process's term, with the helper's granted TTL.
func crashRound(t *testing.T, addr, root string, c *simba.Client, ttl time.Duration, ch chan started) (failover, granted time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperRootEnv+"="+root, helperTTLEnv+"="+ttl.String(), zktest.EnvAddr+"="+addr)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "elected ") {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatal("the helper process did not lead within 30s")
	}
	f := strings.Fields(line)
	require.Len(t, f, 3, line)
	ns, err := strconv.ParseInt(f[2], 10, 64)
	require.NoError(t, err)
	task, err := c.Election("crash").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		ch <- started{"parent", term, time.Now()}
		<-ctx.Done()
		return nil
	})
	require.NoError(t, err)
	defer task.Close()
	time.Sleep(ttl/2 + time.Duration(time.Now().UnixNano()%int64(ttl/3))) // contending, at a random phase of the helper's renewals
	killed := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	s := next(t, ch, 3*ttl+5*time.Second, "take-over after the kill")
	return s.term.Start().Sub(killed), time.Duration(ns)
}

// TestCrashedClientFailover kills a leading client process with SIGKILL: a
// client of this process takes over within the session timeout + 0.2s of
// the kill. The server expires sessions on tick boundaries (200ms here),
// one timeout after the last request of the killed client, which is at
// most a third of the timeout before the kill. The bound holds for the
// median of three rounds; on a loaded machine the server's expiry thread
// can be late, so a single round may take up to a second more.
func TestCrashedClientFailover(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	c := client(t, newBackendAt(t, addr, root), time.Second)
	ch := make(chan started, 1)
	var d []time.Duration
	var granted time.Duration
	for round := range 3 {
		failover, g := crashRound(t, addr, root, c, time.Second, ch)
		t.Logf("round %d: fail-over %v after SIGKILL (session timeout %v)", round, failover.Round(time.Millisecond), g)
		assert.Greater(t, failover, time.Duration(0))
		assert.LessOrEqual(t, failover, g+time.Second, "round %d", round)
		d, granted = append(d, failover), g
	}
	slices.Sort(d)
	assert.LessOrEqual(t, d[1], granted+200*time.Millisecond, "median fail-over")
}

// TestClientCloseLeavesNothing runs elections and a partition group, closes
// the clients and the backend, and checks that no znode of theirs is left
// but their status records, which outlive sessions by design, and no
// goroutine runs (the server then deletes the empty container znodes too,
// and those of the records once they are deleted).
func TestClientCloseLeavesNothing(t *testing.T) {
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	before := goleak.IgnoreCurrent()
	b, err := zookeeper.New([]string{addr}, zookeeper.WithRoot(root))
	require.NoError(t, err)
	var clients []*simba.Client
	running := make(chan string, 64)
	for i := range 3 {
		c, err := simba.New(b, simba.WithTTL(time.Second))
		require.NoError(t, err)
		clients = append(clients, c)
		for _, e := range []string{"ingest", "report"} {
			_, err := c.Election(e).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
				running <- term.Name()
				<-ctx.Done()
				return nil
			})
			require.NoError(t, err)
		}
		_, err = c.Group("billing", 4).RunWhileLeader(func(ctx context.Context, term *simba.Term, partition int) error {
			running <- term.Name()
			<-ctx.Done()
			return nil
		})
		require.NoError(t, err, "client %d", i)
	}
	seen := map[string]bool{}
	deadline := time.After(15 * time.Second)
	for len(seen) < 6 {
		select {
		case n := <-running:
			seen[n] = true
		case <-deadline:
			t.Fatalf("not every lease was taken within 15s: %v", seen)
		}
	}
	nodes, err := zktest.Snapshot(addr, root)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(slices.DeleteFunc(nodes, zktest.Node.Directory)), 6+3, "leases and memberships while running")

	for _, c := range clients {
		require.NoError(t, c.Close())
	}
	require.NoError(t, b.Close())
	goleak.VerifyNone(t, before)
	nodes, err = zktest.Snapshot(addr, root)
	require.NoError(t, err)
	isRecord := func(n zktest.Node) bool { return n.Record(root) }
	assert.Empty(t, slices.DeleteFunc(slices.Clone(nodes), func(n zktest.Node) bool { return n.Directory() || isRecord(n) }), "znodes left after Close")
	assert.NotEmpty(t, slices.DeleteFunc(slices.Clone(nodes), func(n zktest.Node) bool { return !isRecord(n) }), "status records")

	d := zktest.ContainerCheckInterval()
	if d == 0 {
		return
	}
	// Delete the records, as an operator would.
	del := newBackendAt(t, addr, root)
	s, err := del.Open(t.Context(), backend.SessionOptions{TTL: time.Second})
	require.NoError(t, err)
	recs, err := s.(backend.Records).ListRecords(t.Context(), "")
	require.NoError(t, err)
	statuses := 0
	for _, r := range recs {
		if strings.HasPrefix(r.Key, "status/") {
			statuses++
		}
	}
	assert.Equal(t, 6, statuses, "a status record per lease")
	for _, r := range recs {
		require.NoError(t, s.(backend.Records).DeleteRecord(t.Context(), r.Key, backend.Condition{}))
	}
	require.NoError(t, s.Close(t.Context()))
	wait := 3*d + 2*time.Second // a container is deleted on the check after it empties: one level per check
	deadline2 := time.Now().Add(wait)
	for len(nodes) > 0 {
		if time.Now().After(deadline2) {
			t.Fatalf("the server did not delete the empty containers within %v: %v", wait, nodes)
		}
		time.Sleep(100 * time.Millisecond)
		nodes, err = zktest.Snapshot(addr, root)
		require.NoError(t, err)
	}
}
