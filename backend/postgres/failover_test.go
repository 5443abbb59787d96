package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/pgtest"
	"github.com/simba-go/simba/internal/termlog"
)

// failoverNode is a client of a replicated server (pgtest.Pair) through a
// link of its own, a fault proxy in front of the pair's VIP, so that a
// test can cut it off together with the old primary, as a lost zone does.
type failoverNode struct {
	name string
	link *faultproxy.Proxy
	tap  *tap // records the register's accepted writes, for staleWrites
	c    *simba.Client
	task *simba.LeaderTask
}

func startFailoverNode(t *testing.T, p *pgtest.Pair, log *termLog, name string, ttl time.Duration) *failoverNode {
	t.Helper()
	n := newFailoverNode(t, p, name, ttl)
	n.start(t, log)
	return n
}

// newFailoverNode is startFailoverNode without the start of the election.
func newFailoverNode(t *testing.T, p *pgtest.Pair, name string, ttl time.Duration) *failoverNode {
	t.Helper()
	link, err := faultproxy.New(p.VIP.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	b, err := postgres.New(fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", link.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tp := &tap{Backend: b}
	c, err := simba.New(tp, simba.WithTTL(ttl), simba.WithMemberID(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		link.Heal()
		await.For(t, await.Returned(c.Close), closeWait, "client %s: Close did not return", name)
	})
	return &failoverNode{name: name, link: link, tap: tp, c: c}
}

func (n *failoverNode) start(t *testing.T, log *termLog) {
	t.Helper()
	task, err := n.c.Election("x").RunWhileLeader(log.Task(n.name, n.c))
	if err != nil {
		t.Fatal(err)
	}
	n.task = task
}

// TestFailoverZoneLost: the holder of a term loses its link together with
// the primary (a zone lost), and the standby is promoted. With an
// asynchronous standby that missed the last commits (its replication cut
// before the holder's term was granted), the new primary knows neither
// the holder's session nor its candidacy: the waiter, on the new server,
// must not be granted while the holder's term can still run by its own
// clock, and its token must be above the holder's. With a synchronous
// standby nothing acknowledged is lost, and the same holds.
//
// Planted bugs that this test catches (go test -tags simba_plant):
// keep-chain-on-failover (no hold after a change of server: the waiter is
// granted at once, and the two terms overlap), untimed-tokens (the
// waiter's token is not above the holder's: it repeats or goes back).
//
// In the fresh-client case the waiter is a client started after the
// failover, which never saw the old server: the name's counter, last
// bumped on the old timeline, holds its grant back. In the
// first-gives-up case a fresh client asks for the lease and withdraws
// within its hold, and the waiter is another fresh client that asks after
// it: the counter, bumped on the new timeline by the first, still says
// that no term was granted there, and holds the waiter back too.
func TestFailoverZoneLost(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   pgtest.Mode
		waiter waiterKind
	}{
		{"async", pgtest.Async, waiterOld},
		{"async/fresh-client", pgtest.Async, waiterFresh},
		{"async/first-gives-up", pgtest.Async, waiterBehindGivenUp},
		{"sync", pgtest.Sync, waiterOld},
	} {
		t.Run(tc.name, func(t *testing.T) { testFailoverZoneLost(t, tc.mode, tc.waiter) })
	}
}

// waiterKind is who waits for the lease across the failover.
type waiterKind int

const (
	waiterOld           waiterKind = iota // a, a client of the old primary
	waiterFresh                           // c, a client started after the failover
	waiterBehindGivenUp                   // d, started after c asked and gave up
)

func testFailoverZoneLost(t *testing.T, mode pgtest.Mode, waiterOf waiterKind) {
	fresh := waiterOf != waiterOld
	// Long enough that the holder's term outlasts the failover by seconds:
	// a waiter granted without a hold overlaps it by as much.
	const ttl = 4 * time.Second
	p := pgtest.StartPair(t, mode)
	log := newTermLog()
	a := startFailoverNode(t, p, log, "a", ttl)
	first := log.Next("a", opTimeout)
	if first == nil {
		t.Fatalf("no first term within %v", opTimeout)
	}
	if waiterOf == waiterBehindGivenUp {
		// a leaves before the cut: the new primary will know no session
		// to wait for and no candidacy of the name, only its counter.
		await.For(t, await.Returned(a.c.Close), closeWait, "client a: Close did not return")
	}
	p.Standby.WaitReplayed()
	if mode == pgtest.Async {
		// From now on the standby receives nothing: b's session, its
		// candidacy, the counter's bumps and a's release are the
		// primary's only.
		p.Standby.Link().Blackhole()
	}
	b := startFailoverNode(t, p, log, "b", ttl)
	a.task.Stop()
	holder := log.Next("b", opTimeout)
	if holder == nil {
		t.Fatalf("b was not granted the lease within %v of a's stop", opTimeout)
	}
	if !fresh {
		a.start(t, log) // a waits behind b
	}
	time.Sleep(ttl / 2)

	// The zone of the primary and of b is lost; the standby is promoted,
	// and the VIP moved to it.
	b.link.Blackhole()
	lost := time.Now()
	p.Primary.Kill()
	p.Failover()
	t.Logf("failed over to the %s standby (timeline %d) %v after b's term %d began",
		mode, p.Standby.Timeline(), lost.Sub(holder.Term.Start()).Round(time.Millisecond), holder.Term.Token())

	waiter := "a"
	taps := []*tap{a.tap, b.tap}
	switch waiterOf {
	case waiterFresh:
		waiter = "c"
		taps = append(taps, startFailoverNode(t, p, log, "c", ttl).tap)
	case waiterBehindGivenUp:
		// c asks and is held back; d asks after it, and queues behind it;
		// c gives up within its hold.
		conn, err := pgx.Connect(ctxT(t), p.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		candidacies := func() (n int) {
			if err := conn.QueryRow(ctxT(t), "SELECT count(*) FROM simba.candidacies WHERE name = 'x'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		seen := func() string { return fmt.Sprintf("%d candidacies", candidacies()) }
		c, d := newFailoverNode(t, p, "c", ttl), newFailoverNode(t, p, "d", ttl)
		taps = append(taps, c.tap, d.tap)
		c.start(t, log)
		await.Until(t, opTimeout, "c's candidacy", func() bool { return candidacies() == 1 }, seen)
		waiter = "d"
		d.start(t, log)
		await.Until(t, opTimeout, "d's candidacy behind c's", func() bool { return candidacies() == 2 }, seen)
		await.For(t, await.Returned(c.task.Close), closeWait, "c's election: Close did not return")
		select {
		case got := <-log.Elected():
			t.Fatalf("%s was granted term %d %v after the failover, within c's hold", got.Node, got.Term.Token(), got.Term.Start().Sub(lost).Round(time.Millisecond))
		default:
		}
	}
	next := log.Next(waiter, opTimeout+3*ttl)
	if next == nil {
		t.Fatalf("%s was not granted the lease on the new primary within %v", waiter, opTimeout+3*ttl)
	}
	gap := next.Term.Start().Sub(holder.Term.Deadline())
	t.Logf("%s's term %d began %v after b's term %d ended by b's clock (%v after the failover)",
		waiter, next.Term.Token(), gap.Round(time.Millisecond), holder.Term.Token(), next.Term.Start().Sub(lost).Round(time.Millisecond))
	if gap <= 0 {
		t.Errorf("%s's term %d began %v before b's term %d ended: two valid terms at once", waiter, next.Term.Token(), (-gap).Round(time.Millisecond), holder.Term.Token())
	}
	if next.Term.Token() <= holder.Term.Token() {
		t.Errorf("%s's token %d on the new primary is not above b's %d on the old one", waiter, next.Term.Token(), holder.Term.Token())
	}
	for _, err := range log.CheckTerms() {
		t.Error(err)
	}
	// The first grant on the new timeline marked the name's counter: a
	// candidacy registered from now on is not held back.
	if last, mark := counterOf(t, p.DSN(), "x"), int64(p.Standby.Timeline()-1)<<32|1<<31; last < mark {
		t.Errorf("the counter of x is %d after the first grant on timeline %d, below the mark %d", last, p.Standby.Timeline(), mark)
	}
	time.Sleep(3 * termlog.WriteEvery) // a few writes of the new holder
	errs, acc, ref := staleWrites(log, taps...)
	for _, err := range errs {
		t.Error(err)
	}
	t.Logf("register writes: %d accepted, %d refused", acc, ref)
}

// counterOf reads the counter of the lease name, in the schema simba.
func counterOf(t *testing.T, dsn, name string) (last int64) {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctxT(t), "SELECT last FROM simba.lease_names WHERE name = $1", name).Scan(&last); err != nil {
		t.Fatalf("reading the counter of %s: %v", name, err)
	}
	return last
}

// TestOldPrimaryBackIsRefused: after a failover, the old primary comes
// back on its old timeline, with commits the new one never had, and the
// VIP is moved back to it by mistake. A Backend that has seen the new
// timeline refuses it: no session opens there, no renewal counts, no
// candidacy registers.
func TestOldPrimaryBackIsRefused(t *testing.T) {
	p := pgtest.StartPair(t, pgtest.Async)
	b, err := postgres.New(p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx := t.Context()
	opts := backend.SessionOptions{TTL: 5 * time.Second}
	s1, err := b.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	s1.Close(ctx)
	p.Standby.WaitReplayed()
	p.Primary.Kill()
	p.Failover()
	var s2 backend.Session
	if !eventually(opTimeout, func() bool { s2, err = b.Open(ctx, opts); return err == nil }) {
		t.Fatalf("no session on the promoted standby within %v: %v", opTimeout, err)
	}
	p.Primary.Start() // the old primary, on timeline 1
	p.VIP.MoveTo(p.Primary)
	const refused = "below timeline 2 seen before"
	var openErr error
	if !eventually(opTimeout, func() bool {
		_, openErr = b.Open(ctx, opts)
		return openErr != nil && strings.Contains(openErr.Error(), refused)
	}) {
		t.Fatalf("Open on the old primary: %v, want it refused (%q)", openErr, refused)
	}
	// The session of timeline 2 is not on the old primary: its renewal
	// fails there in any case (not found, or refused).
	if _, err := s2.KeepAlive(ctx); err == nil {
		t.Fatal("a renewal answered by the old primary succeeded")
	}
	t.Logf("refused: %v", openErr)
}

// TestWarnsOfAsyncStandbys: the first use of a Backend warns when the
// server replicates to a standby asynchronously, and says it does so
// synchronously otherwise.
func TestWarnsOfAsyncStandbys(t *testing.T) {
	for _, mode := range []pgtest.Mode{pgtest.Async, pgtest.Sync} {
		t.Run(mode.String(), func(t *testing.T) {
			p := pgtest.StartPair(t, mode)
			msgs := make(chan string, 64)
			b, err := postgres.New(p.DSN(), postgres.WithLogger(slog.New(logRecorder{msgs: msgs, all: true})))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			s, err := b.Open(t.Context(), backend.SessionOptions{TTL: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(t.Context())
			want := map[pgtest.Mode]string{pgtest.Async: "replicates to standbys asynchronously", pgtest.Sync: "replicates to its standbys synchronously"}
			timeout := time.After(opTimeout)
			for {
				select {
				case m := <-msgs:
					for mo, w := range want {
						if strings.Contains(m, w) {
							if mo != mode {
								t.Fatalf("%s standby: logged %q", mode, m)
							}
							return
						}
					}
				case <-timeout:
					t.Fatalf("%s standby: nothing said of the replication within %v", mode, opTimeout)
				}
			}
		})
	}
}

// TestRenewalOnNewServerEndsLostHoldings: a session whose row the new
// primary has, but not the candidacy of a lease it was granted on the old
// one (an asynchronous standby that missed that commit), renews there:
// the holding must have ended by the time that renewal returns, since the
// renewal is what keeps its term valid, and the new server's queue no
// longer has it. A holding the new server does have stays, and a
// candidacy released on the old server only is deleted. The three
// candidacies, of three names, have the same token.
//
// Kills the mutant that leaves the check to the monitor's next read of
// the session (its behaviour before: the renewal counted while that read
// was still to come, or hung on a connection to the old server), and the
// one that tells the session's candidacies apart by their tokens alone
// (its behaviour before: lost's candidacy looked present, as kept's has
// the same token, and given's looked known).
func TestRenewalOnNewServerEndsLostHoldings(t *testing.T) {
	p := pgtest.StartPair(t, pgtest.Async)
	b := newBackendIn(t, p.DSN(), "simba")
	// Long enough that the standby's copy of the session is still alive
	// when it is promoted.
	s := open(t, b, 30*time.Second)
	kept, err := s.Acquire(ctxT(t), "kept")
	if err != nil {
		t.Fatal(err)
	}
	given, err := s.Acquire(ctxT(t), "given")
	if err != nil {
		t.Fatal(err)
	}
	p.Standby.WaitReplayed()
	p.Standby.Link().Blackhole() // from now on the standby receives nothing
	lost, err := s.Acquire(ctxT(t), "lost")
	if err != nil {
		t.Fatal(err)
	}
	if err := given.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	p.Primary.Kill()
	p.Failover()
	if !eventually(opTimeout, func() bool { _, err = s.KeepAlive(ctxT(t)); return err == nil }) {
		t.Fatalf("no renewal on the promoted standby within %v: %v", opTimeout, err)
	}
	select {
	case <-lost.Lost():
	default:
		t.Fatalf("a renewal on timeline %d returned while the holding of %q (token %d), whose candidacy that server lacks, had not ended", p.Standby.Timeline(), lost.Name(), lost.Token())
	}
	// The candidacy released on the old server only goes too, and only
	// it: all three have token 1.
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var left []string
	if !eventually(opTimeout, func() bool {
		err = conn.QueryRow(ctx, "SELECT ARRAY(SELECT name || '/' || token FROM simba.candidacies WHERE session::text = $1 ORDER BY name)", s.ID()).Scan(&left)
		return err == nil && slices.Equal(left, []string{"kept/1"})
	}) {
		t.Fatalf("the new server has the candidacies %q of the session (%v), want only kept/1", left, err)
	}
	select {
	case <-kept.Lost():
		t.Fatalf("the holding of %q (token %d), whose candidacy the new server has, ended", kept.Name(), kept.Token())
	default:
	}
}
