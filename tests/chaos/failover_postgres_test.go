package chaos

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/internal/pgtest"
	"github.com/simba-go/simba/internal/plant"
)

// TestPostgresFailover plays a fault schedule on a replicated PostgreSQL
// server (pgtest.StartPair: a primary, a streaming standby, and the VIP
// the clients reach the primary through, each client through a fault
// proxy of its own), in both replication modes. Its server faults are
// failovers (pgFailoverWorld.failover): the holder of the election hands
// it off, the primary crashes, sometimes with the new holder's link (a
// zone lost), the standby is promoted and takes the VIP, and a standby of
// the new primary is made, so that the schedule fails over again. With
// the asynchronous standby, its replication is cut first, and it misses
// the hand-off's commits. The invariants are checked across the failovers,
// against what each server granted (the grant watch follows the VIP).
//
// Then, on the asynchronous standby, the planted bugs of the failover code
// (keep-chain-on-failover: no hold after a change of server;
// untimed-tokens: tokens not qualified by the timeline) must show as
// overlapping terms (I1) or tokens handed out twice (I2), in zone losses
// during the replication cut (failoverBugs).
func TestPostgresFailover(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgtest.Mode{pgtest.Async, pgtest.Sync} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			w := startPGFailover(t, mode)
			seed := scheduleSeed(t)
			t.Run("Faults", func(t *testing.T) { testFailoverFaults(t, w, seed) })
			if mode != pgtest.Async {
				return // nothing acknowledged is lost: the bugs have nothing to show
			}
			t.Run("PlantedBug", func(t *testing.T) {
				for _, c := range failoverBugs {
					t.Run(c.plant, func(t *testing.T) {
						plant.Require(t, c.plant) // the clients are this test binary
						testControl(t, w, seed, c)
					})
				}
			})
		})
	}
}

// failoverBugs are the planted bugs of backend/postgres's failover code,
// each shown by failovers that take the holder down with the old primary
// (hitHolders with faultRestart), its term granted during the replication
// cut (the failover hands the election off first, and moves a group's
// partitions).
var failoverBugs = []controlSpec{
	// The chain of clock samples runs through the change of server and no
	// grant is held back: the new primary's copy of the holder's session,
	// older than its last renewals, looks expired, and a waiter is granted
	// while the holder's term runs by its own clock. Both terms show
	// (I1); the watch may see the grant before the old holder's run
	// exited (I7), or a task told valid after the old server's grant was
	// over (I4).
	{plant: "keep-chain-on-failover", fenced: true, hit: faultRestart, rounds: 4, want: "I1:", also: []string{"I4:", "I7:"},
		what: "with the clock chain kept across the failover, the overlapping terms"},
	// Tokens not qualified by the timeline: the new primary's counters miss
	// the bumps of the cut, and hand the tokens granted then out again
	// (I2). Session ids may be handed out again too, and the watch may
	// take the old grant of a token for the new one (I4, I7).
	{plant: "untimed-tokens", fenced: true, hit: faultRestart, rounds: 4, want: "I2:", also: []string{"I1:", "I3:", "I4:", "I7:"},
		what: "with tokens not qualified by the timeline, the tokens handed out twice"},
}

// testFailoverFaults plays a seeded schedule with failovers against w
// (failoverSchedule), checks the invariants, and logs the figures of each
// failover.
func testFailoverFaults(t *testing.T, w *pgFailoverWorld, seed uint64) {
	length := scheduleDuration(t, w)
	schedule := failoverSchedule(seed, length, ttl)
	t.Logf("seed %d: %d faults over %v; replay with -chaos.seed=%d", seed, len(schedule), length, seed)
	r := newRun(t, w, runConfig{seed: seed, duration: length, fenced: true, children: clients, ttl: ttl, coverage: true})
	from := w.recorded()
	for _, f := range schedule {
		r.logf("scheduled: %v", f)
	}
	healed := r.play(schedule)
	s, errs := r.finish(healed)
	r.report(s, errs)
	w.logFailovers(t, r, from)
}

// failoverEvery is the time between the failovers of a schedule: enough
// for a standby of the new primary to be made in between, on a loaded
// machine.
const failoverEvery = 10 * time.Second

// failoverSchedule draws a schedule from seed, as newSchedule does but for
// the server faults, which are failovers: the first 2–3s in, then one every
// failoverEvery (and up to a second) while 2s remain, taking the holder
// down with the old primary (Holder) every other time, each keeping the
// old primary's clients cut off 0–1×TTL.
func failoverSchedule(seed uint64, length, ttl time.Duration) []fault {
	out := newSchedule(seed, length, ttl, clients, false)
	rng := mrand.New(mrand.NewPCG(seed, 0xfa11))
	zone := rng.IntN(2) == 0
	for at := 2 * time.Second; at < length-2*time.Second; at += failoverEvery {
		out = append(out, fault{At: at + time.Duration(rng.Int64N(int64(time.Second))), Kind: faultRestart, Holder: zone, Member: -1,
			For: time.Duration(rng.Int64N(int64(ttl) + 1))})
		zone = !zone
	}
	slices.SortStableFunc(out, func(a, b fault) int { return cmp.Compare(a.At, b.At) })
	return out
}

// pgFailoverWorld is a replicated PostgreSQL server, a pgtest.Pair in one
// replication mode. Its clients' links, the harness's statements and the
// grant watch reach the primary through the pair's VIP (postgresWorld's,
// with the VIP's DSN); its server faults are failovers.
type pgFailoverWorld struct {
	*postgresWorld
	tb   testing.TB // a softTB: the servers' failures on the faults' goroutines panic with a fatalf, which soft returns
	mode pgtest.Mode

	mu        sync.Mutex
	pair      *pgtest.Pair // Primary and Standby change at each failover
	failovers []*failoverRecord
}

// failoverRecord is one failover, for the figures.
type failoverRecord struct {
	what     string
	at       time.Time // the old primary killed
	moved    time.Time // the standby promoted and the VIP moved to it
	rebuilt  time.Time // a standby of the new primary streaming (zero: not yet, or failed)
	timeline int64     // of the new primary
	zone     string    // the client cut off with the old primary, if any
}

// startPGFailover starts a pair in mode, or skips t when PostgreSQL is not
// installed (fails it under SIMBA_REQUIRE_SERVERS=1): unlike TestPostgres,
// a shared server is no stand-in.
func startPGFailover(t *testing.T, mode pgtest.Mode) *pgFailoverWorld {
	tb := softTB{t}
	var pair *pgtest.Pair
	if err := soft("starting a primary and a standby", func() { pair = pgtest.StartPair(tb, mode) }); err != nil {
		t.Fatal(err)
	}
	var b [3]byte
	rand.Read(b[:])
	// srv is set: the schemas go with the servers' directories.
	p := &postgresWorld{dsn: pair.DSN(), srv: pair.Primary, id: hex.EncodeToString(b[:])}
	t.Cleanup(p.close)
	return &pgFailoverWorld{postgresWorld: p, tb: tb, mode: mode, pair: pair}
}

// shortRun: two failovers (failoverSchedule).
func (w *pgFailoverWorld) shortRun() time.Duration { return 20 * time.Second }

// controlTTL: the keep-chain-on-failover control runs with a TTL of 4s.
// The bug shows when the new primary grants the election while the holder
// cut off with the old one still runs its term, which ends a drift margin
// before its last renewal's TTL (on the old primary, during the
// replication cut) is over, while the new primary's copy of its session
// expires a TTL after the last renewal that reached the standby: the
// window is the renewals of the cut less the margin, less how late the
// promotion, the clients' reconnections and the waiter's read come. At
// 2s (a renewal every 667ms, a cut of 0.85–1.35 s) that left 0.5–1.1 s,
// which a loaded machine used up: beside two busy loops, the overlaps
// it showed were 18–199 ms, and one run in four showed none in 3 runs of
// 4 failovers (as did the chaos run at -parallel 3). At 4s (and the cut
// scaled with it, see failover), beside the same loops, the first
// failover showed it in 4 runs of 4, overlapping by 0.66–1.73 s.
func (w *pgFailoverWorld) controlTTL(c controlSpec) time.Duration {
	if c.plant == "keep-chain-on-failover" {
		return 4 * time.Second
	}
	return ttl
}

// stopServer fails over, without acting on any client (see failover).
func (w *pgFailoverWorld) stopServer(member int) (what, kind string, start func() error, err error) {
	return w.failover(nil, fault{Member: member})
}

// failover fails the pair over, as an operator (or Patroni) would when
// the primary crashes:
//
//   - in the async mode, the standby's replication link is cut: from then
//     on it misses the primary's commits;
//   - r's election is handed off (its holder told to stop it) and another
//     client told to stop its group, so that terms and partitions change
//     hands on the primary (and, in the async mode, off the standby); the
//     election's next holder is awaited, up to 3×TTL (the run's TTL);
//   - after TTL/4–TTL/2 more, the primary crashes (pgtest.Server.Kill) and,
//     if f.Holder, the link of the election's holder is cut at the same
//     instant (a zone lost);
//   - the standby is promoted and the VIP moved to it (pgtest.Pair.Failover),
//     which resets every connection through it.
//
// The returned start, once the fault's time is over, heals the holder's
// link and makes a standby of the new primary in the same mode
// (pgtest.StartStandby), which the next failover promotes. The old
// primary stays down. With no run (stopServer), nothing is done to the
// clients.
func (w *pgFailoverWorld) failover(r *run, f fault) (what, kind string, start func() error, err error) {
	w.mu.Lock()
	pair := w.pair
	old, sb := pair.Primary, pair.Standby
	w.mu.Unlock()
	rec := &failoverRecord{}
	var did []string
	if w.mode == pgtest.Async {
		sb.Link().Blackhole()
		did = append(did, "replication cut")
	}
	d := ttl // the clients' TTL
	if r != nil {
		d = r.cfg.ttl
		did = append(did, r.handOff(3*d))
	}
	time.Sleep(d/4 + mrand.N(d/4))
	heal := func() {}
	if r != nil && f.Holder {
		rec.zone, heal = r.cutHolder()
		if rec.zone == "" {
			did = append(did, "no holder free to cut off with the primary")
		}
	}
	if err := soft("killing the primary", old.Kill); err != nil {
		heal()
		return "", "", nil, err
	}
	rec.at = time.Now()
	if err := soft("promoting the standby", pair.Failover); err != nil {
		heal()
		return "", "", nil, err
	}
	rec.moved = time.Now()
	if err := soft("reading the new primary's timeline", func() { rec.timeline = sb.Timeline() }); err != nil {
		heal()
		return "", "", nil, err
	}
	kind = "failover, " + w.mode.String()
	if rec.zone != "" {
		kind += ", zone lost"
		did = append(did, rec.zone+" cut off with it")
	}
	rec.what = fmt.Sprintf("primary crashed (%s), standby promoted to timeline %d and the VIP moved to it in %v",
		strings.Join(did, "; "), rec.timeline, rec.moved.Sub(rec.at).Round(time.Millisecond))
	w.mu.Lock()
	w.failovers = append(w.failovers, rec)
	w.mu.Unlock()
	start = func() error {
		heal()
		var next *pgtest.Standby
		if err := soft("starting a standby of the new primary", func() { next = pgtest.StartStandby(w.tb, sb.Server, w.mode) }); err != nil {
			return err
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		pair.Primary, pair.Standby = sb.Server, next
		rec.rebuilt = time.Now()
		return nil
	}
	return rec.what, kind, start, nil
}

// recorded returns the number of failovers so far.
func (w *pgFailoverWorld) recorded() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.failovers)
}

// logFailovers logs the figures of r's failovers, those recorded from
// index from: for each, how long the VIP took to move, and the first term
// of any lease, and of the election, that began after the old primary
// crashed (the fail-over time as the clients see it).
func (w *pgFailoverWorld) logFailovers(t *testing.T, r *run, from int) {
	w.mu.Lock()
	recs := append([]*failoverRecord(nil), w.failovers[from:]...)
	w.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	var lines []string
	for i, rec := range recs {
		next := func(lease string) string {
			var first *termRecord
			for _, tr := range r.terms {
				if tr.start.After(rec.at) && (lease == "" || tr.lease == lease) && (first == nil || tr.start.Before(first.start)) {
					first = tr
				}
			}
			if first == nil {
				return "none"
			}
			return fmt.Sprintf("%v (%s, token %d)", first.start.Sub(rec.at).Round(time.Millisecond), first.lease, first.token)
		}
		rebuilt := "not rebuilt"
		if !rec.rebuilt.IsZero() {
			rebuilt = fmt.Sprintf("a standby of it streaming %v after", rec.rebuilt.Sub(rec.at).Round(time.Millisecond))
		}
		lines = append(lines, fmt.Sprintf("failover %d at %+.3fs: %s; first grant after it %s, of %s %s; %s",
			i+1, rec.at.Sub(r.begin).Seconds(), rec.what, next(""), election, next(election), rebuilt))
	}
	t.Logf("%d failovers (%s standby):\n%s", len(recs), w.mode, strings.Join(lines, "\n"))
}

// handOff tells the holder of r's election to stop it (and start it again
// once done), and the client of the next slot to stop its group, so that
// terms change hands; it waits up to d for another client to hold the
// election, and says what it did.
func (r *run) handOff(d time.Duration) string {
	r.mu.Lock()
	slot, ok := r.holderLocked()
	var was *child
	if ok {
		was = r.slots[slot]
	}
	r.mu.Unlock()
	if !ok {
		return "no holder to hand off"
	}
	r.apply(fault{At: time.Since(r.begin), Kind: faultStop, Holder: true})
	r.apply(fault{At: time.Since(r.begin), Kind: faultStop, Group: true, Slot: (slot + 1) % len(r.slots)})
	begun := time.Now()
	for time.Since(begun) < d {
		r.mu.Lock()
		s, ok := r.holderLocked()
		next := r.slots[s]
		r.mu.Unlock()
		if ok && next != was {
			return fmt.Sprintf("%s handed %s off to %s in %v", was.name, election, next.name, time.Since(begun).Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Sprintf("%s told to hand %s off: no other holder within %v", was.name, election, d)
}

// cutHolder blackholes the link of the election's holder, if it is under
// no other fault (its slot is then busy), and returns its name and the
// function that heals it; or "" and a function that does nothing.
func (r *run) cutHolder() (string, func()) {
	r.mu.Lock()
	slot, ok := r.holderLocked()
	if !ok || r.busy[slot] {
		r.mu.Unlock()
		return "", func() {}
	}
	r.busy[slot] = true
	c := r.slots[slot]
	r.mu.Unlock()
	c.link.blackhole()
	r.count("blackhole of a holder with the primary (zone lost)")
	return c.name, func() {
		c.link.heal()
		r.free(slot)
		r.logf("%s's link healed (its zone back)", c.name)
	}
}

// pgTimelineSQL is the server's timeline, as backend/postgres reads it
// (its timelineSQL): from the name of the WAL file it writes.
const pgTimelineSQL = `SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint`

// readTimeline reads the timeline of the server conn reaches, the first
// poll on it sent at sent, and takes in a change of server.
func (w *pgGrantWatch) readTimeline(ctx context.Context, conn *pgx.Conn, sent time.Time) error {
	var tl int64
	if err := conn.QueryRow(ctx, pgTimelineSQL).Scan(&tl); err != nil {
		return fmt.Errorf("reading the server's timeline: %w", err)
	}
	if w.timeline != 0 && tl != w.timeline {
		w.serverChanged(tl, sent)
	}
	w.tlConn, w.timeline = conn, tl
	return nil
}

// serverChanged takes in a failover: the watch reaches a server on
// timeline tl, after w.timeline, its first poll there sent at sent.
//
// The old server committed nothing after the VIP left it, and so before
// sent: a holding open there lasted until its session expired, at
// sent + its TTL at the latest. Such a grant is carried: if the new
// server holds the same candidacy, the grant goes on there; if it does not
// have it, or its session there has expired, the grant ends at that bound
// (or when seen, if later), not marked Expired. No end of a grant open at
// a change comes before its bound (floors). A candidacy waiting on the old
// server, and any token the old server issued after the last poll, may
// have held unseen there: blind ranges. The new server's candidacies are
// then taken in afresh (start: the last poll's send, before the new
// server took writes).
func (w *pgGrantWatch) serverChanged(tl int64, sent time.Time) {
	w.log.notef("server: the grant watch reaches a server on timeline %d, after timeline %d: a failover", tl, w.timeline)
	if w.floors == nil {
		w.floors, w.carried = map[grantKey]time.Time{}, map[grantKey]time.Duration{}
	}
	w.changed = sent
	for k, ttl := range w.carried { // still undecided from an earlier change
		w.floors[k] = later(w.floors[k], sent.Add(ttl))
	}
	for name, q := range w.names {
		for token, c := range q.cands {
			k := grantKey{name, token}
			switch {
			case c.held && !c.over:
				w.carried[k] = c.ttl
				w.floors[k] = later(w.floors[k], sent.Add(c.ttl))
			case !c.over:
				w.log.missed(token-1, token, fmt.Sprintf("candidacy %d of %s was waiting when the server failed over", token, name))
			}
		}
		if hi := uint64(w.timeline)<<32 - 1; hi > q.last {
			w.log.missed(q.last, hi, fmt.Sprintf("tokens of %s that timeline %d may have issued after the last poll", name, w.timeline))
		}
		q.cands = map[uint64]*pgCandidacy{}
	}
}

// seen returns the instant a grant seen begun at got, of a session with
// the TTL ttl, counts as seen for check.HandOffOrder: got, or 1.1 × ttl
// after the last change of server if later. Within that time a client
// holds back the grant of a candidacy that the new server shows first in
// its queue (backend/postgres's holdBack): the server's queue is not yet
// a grant, and the runs of the old server's terms (promised their terms
// until sent + ttl at the latest) may still go on. Across a failover the
// hand-off order is so checked only loosely; overlapping terms are
// check.Terms's (I1).
func (w *pgGrantWatch) seen(got time.Time, ttl time.Duration) time.Time {
	if w.changed.IsZero() {
		return got
	}
	return later(got, w.changed.Add(ttl*11/10))
}

// settleCarried ends the grants of name carried over a change of server
// that the new server, as q shows it, does not go on with: candidacies
// gone, or over there. A carried candidacy held there goes on; one waiting
// behind an older one is left undecided.
func (w *pgGrantWatch) settleCarried(name string, q *pgQueue, got time.Time) {
	for k := range w.carried {
		if k.name != name {
			continue
		}
		switch c := q.cands[k.token]; {
		case c != nil && c.held && !c.over:
			delete(w.carried, k)
		case c == nil || c.over:
			delete(w.carried, k)
			w.end(name, k.token, got)
		}
	}
}

// end records the end of the grant of name with token, seen at at, or at
// its floor if later.
func (w *pgGrantWatch) end(name string, token uint64, at time.Time) {
	w.log.end(name, token, later(at, w.floors[grantKey{name, token}]))
}

// expire records the expiry of the grant of name with token at at, by the
// server's clock; before its floor, the grant ends at the floor instead,
// not marked Expired: the server's copy of the session is older than the
// renewals its holder had answered by the old one.
func (w *pgGrantWatch) expire(name string, token uint64, at time.Time) {
	if f, ok := w.floors[grantKey{name, token}]; ok && at.Before(f) {
		w.log.end(name, token, f)
		return
	}
	w.log.expire(name, token, at)
}

// firstIssued returns the first token a counter moving from last to l may
// have handed out: last + 1, or the first token of l's timeline if l is on
// a later one than last (backend/postgres qualifies tokens by the
// timeline: GREATEST(last + 1, (timeline − 1) << 32)).
func firstIssued(last, l uint64) uint64 {
	if base := l &^ (1<<32 - 1); base > last {
		return base
	}
	return last + 1
}
