package postgresbench_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/pgtest"
	"github.com/simba-go/simba/tests/internal/handoffbench"
	"github.com/simba-go/simba/tests/internal/pgpeers"
)

// benchEnv turns on TestBenchmarkReport, which measures simba on
// PostgreSQL side by side with the peers teams use today
// (tests/internal/pgpeers: an advisory-lock elector and a leader-table elector
// modelled on river's) on one server and prints a Markdown report: the
// graceful hand-off, and overlap and fail-over when the holder's link is
// cut, when the server ends its connections and when it crashes. It
// takes about ten minutes. Run it without the race detector, with a server:
//
//	cd tests && ../scripts/with-postgres-redis.sh env SIMBA_PG_BENCH=1 \
//		go test -run '^TestBenchmarkReport$' -v -count=1 -timeout 30m ./bench/postgres/
//
// SIMBA_PG_BENCH=1 (or all) runs every section; or name them,
// comma-separated: handoff, durable (the hand-off on a server of the
// benchmark's own that commits durably), cut, terminate, crash. With SIMBA_PG_BENCH_OUT=file it
// also writes the report to file; SIMBA_BENCH_ROUNDS=n shortens the
// hand-off rounds.
//
// simba runs with the peers' TTL (renewals every TTL/3, the peers'
// interval), each client on a backend of its own in one schema.
const benchEnv = "SIMBA_PG_BENCH"

// Parameters of the report. The peers' intervals are river's defaults
// divided by 20 (5 s interval, 1 s jitter, TTL interval + 10 s, 5 s per
// statement, a 1 s first backoff), so that a round lasts about a second;
// the advisory lock uses the same interval for its tries and pings.
const (
	handOffRounds = 200
	handOffWarmup = 20

	overlapPairs   = 10
	overlapPerPair = 5 // rounds: 50 per side and fault

	peerInterval = 250 * time.Millisecond
	peerJitter   = 50 * time.Millisecond
	peerTTL      = 750 * time.Millisecond
	peerTimeout  = 250 * time.Millisecond
	peerBackoff  = 50 * time.Millisecond

	// keepaliveCull stands in, on the advisory lock's connections, for the
	// server's detection of a dead peer (TCP keepalives): the proxy keeps
	// the server's side of a cut link open, so without it the server
	// would hold the lock of a cut holder until the link heals. It is the
	// server's idle_session_timeout, one peer TTL.
	keepaliveCull = peerTTL

	// survived bounds the wait for a new leader in an overlap round: a
	// holder whose leadership outlives the fault (a leader row outlives a
	// terminated connection) keeps it past this.
	survived = 5 * time.Second
)

// opTimeout bounds calls expected to succeed promptly (as in
// backend/postgres's tests).
const opTimeout = 20 * time.Second

// handOffSettles are the pauses between the waiter starting to wait and
// the hand-off.
var handOffSettles = []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 150 * time.Millisecond}

func TestBenchmarkReport(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skipf("set %s=1 to run the benchmarks", benchEnv)
	}
	dsn := pgtest.DSN(t)
	admin := benchPool(t, dsn, "simba-bench-admin", nil)
	var version string
	if err := admin.QueryRow(context.Background(), "SHOW server_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	var report strings.Builder
	fmt.Fprintf(&report, "PostgreSQL %s (Debian's, started by scripts/with-postgres-redis.sh: fsync off, synchronous_commit off), loopback, GOMAXPROCS %d, load average at the start %s.\n\n",
		version, runtime.GOMAXPROCS(0), handoffbench.LoadAverage())
	fmt.Fprintf(&report, "%s\n\n", handoffbench.Busy(t))
	fmt.Fprintf(&report, "Peers (tests/internal/pgpeers), river's defaults divided by 20: interval %v (+ jitter up to %v for the leader table's waiters), leader TTL %v, statement timeout %v, first backoff %v, 5 re-election errors before the leader table's leader gives up.\n\n",
		peerInterval, peerJitter, peerTTL, peerTimeout, peerBackoff)
	fmt.Fprintf(&report, "simba: `simba.WithTTL(%v)` (renewals every TTL/3), each client on a `postgres.NewFromPool` backend of its own (its own pool), one schema per section.\n\n", peerTTL)
	if section("handoff") {
		benchHandOff(t, dsn, &report)
	}
	if section("durable") {
		benchDurable(t, &report)
	}
	if section("cut") {
		benchOverlap(t, dsn, admin, cutFault, &report)
	}
	if section("terminate") {
		benchOverlap(t, dsn, admin, terminateFault, &report)
	}
	if section("crash") {
		benchOverlap(t, dsn, admin, crashFault, &report)
	}
	fmt.Fprintf(&report, "Load average at the end: %s.\n", handoffbench.LoadAverage())
	t.Logf("report:\n\n%s", report.String())
	if path := os.Getenv(benchEnv + "_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// section reports whether the benchmark section name is selected: the
// environment variable is "1" or "all" (every section), or a
// comma-separated list of sections.
func section(name string) bool {
	v := os.Getenv(benchEnv)
	return v == "1" || v == "all" || slices.Contains(strings.Split(v, ","), name)
}

// connConfig parses dsn for a connection named app (application_name),
// to addr ("host:port") if not empty.
func connConfig(t *testing.T, dsn, app, addr string) *pgx.ConnConfig {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	if addr != "" {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Host, cfg.Port, cfg.Fallbacks = host, uint16(p), nil
	}
	return cfg
}

// benchPool returns a pool of connections named app, through the proxy px
// if not nil, closed when the test ends.
func benchPool(t *testing.T, dsn, app string, px *faultproxy.Proxy) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	addr := ""
	if px != nil {
		addr = px.Addr()
	}
	cfg.ConnConfig = connConfig(t, dsn, app, addr)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// elector is what the benchmark needs of a peer.
type elector interface {
	Run(context.Context) error
	Resign(context.Context) error
}

// running is an elector whose Run runs in a goroutine.
type running struct {
	e   elector
	ran <-chan error
}

func start(e elector) running {
	return running{e: e, ran: await.Returned(func() error { return e.Run(context.Background()) })}
}

// resign resigns r and waits for its Run to return.
func (r running) resign() error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := r.e.Resign(ctx); err != nil {
		return err
	}
	err, werr := await.Within(r.ran, opTimeout, "Run did not return after Resign")
	if werr != nil {
		return werr
	}
	return err
}

// peer makes the electors of one kind of peer.
type peer struct {
	name string
	// make returns contender id of the election called election, its
	// connections named app and made through px (nil: direct), reporting
	// its leadership to onLead.
	make func(t *testing.T, election, id, app string, px *faultproxy.Proxy, onLead func(*pgpeers.Leadership)) elector
}

// peers returns the two peers, on the server of dsn, each call with a
// leader table of its own; for the hand-off (handOff), also the leader
// table without river's random sleep after a resignation's NOTIFY.
func peers(t *testing.T, dsn string, admin *pgxpool.Pool, handOff bool) []peer {
	table := fmt.Sprintf("bench_leader_%08x", rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := pgpeers.CreateTable(ctx, admin, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE "+table) })
	advisory := peer{name: "advisory lock", make: func(t *testing.T, election, id, app string, px *faultproxy.Proxy, onLead func(*pgpeers.Leadership)) elector {
		addr := ""
		if px != nil {
			addr = px.Addr()
		}
		cfg := connConfig(t, dsn, app, addr)
		cfg.RuntimeParams["idle_session_timeout"] = strconv.FormatInt(keepaliveCull.Milliseconds(), 10)
		key := int64(crc(election))
		e, err := pgpeers.NewAdvisoryLock(pgpeers.AdvisoryConfig{Conn: cfg, Key: key, Interval: peerInterval, Timeout: peerTimeout, OnLead: onLead})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}}
	pools := map[string]*pgxpool.Pool{}
	var mu sync.Mutex
	leaderTable := func(name string, noWakeJitter bool) peer {
		return peer{name: name, make: func(t *testing.T, election, id, app string, px *faultproxy.Proxy, onLead func(*pgpeers.Leadership)) elector {
			mu.Lock()
			pool, ok := pools[app]
			if !ok {
				pool = benchPool(t, dsn, app, px)
				pools[app] = pool
			}
			mu.Unlock()
			e, err := pgpeers.NewLeaderTable(pgpeers.TableConfig{
				Pool: pool, Table: table, Name: election, ID: id,
				Interval: peerInterval, Jitter: peerJitter, TTL: peerTTL, Timeout: peerTimeout, Backoff: peerBackoff,
				NoWakeJitter: noWakeJitter, OnLead: onLead,
			})
			if err != nil {
				t.Fatal(err)
			}
			return e
		}}
	}
	ps := []peer{advisory, leaderTable("leader table", false)}
	if handOff {
		ps = append(ps, leaderTable("leader table, no wake jitter", true))
	}
	return ps
}

// crc is a small stable hash of s, the advisory lock's key of an election.
func crc(s string) uint32 {
	h := uint32(2166136261)
	for i := range len(s) {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// benchHandOff plays the graceful hand-off rounds of the peers.
func benchHandOff(t *testing.T, dsn string, report *strings.Builder) {
	admin := benchPool(t, dsn, "simba-bench-handoff-admin", nil)
	cfg := handoffbench.Sized(handoffbench.Config{Settles: handOffSettles, Warmup: handOffWarmup, Rounds: handOffRounds})
	fmt.Fprintf(report, "### Graceful hand-off (%d rounds after %d warm-up rounds, sides alternating)\n\n", cfg.Rounds, cfg.Warmup)
	fmt.Fprintln(report, "Peers: the holder's `Resign` → the waiter learning it leads. "+
		"Advisory lock: `pg_advisory_unlock` on the holder's connection; the waiter tries `pg_try_advisory_lock` every interval (jittered, in [interval/2, interval]). "+
		"Leader table: the holder deletes its row and NOTIFYs in one statement; the waiter, LISTENing, sleeps a random 0–50 ms as river does, then elects (the variant without that sleep elects at once). "+
		"simba: `LeaderTask.Stop()` on the holder → the next holder's task running. "+
		"Settle: pause between the waiter starting (its `Run` or `RunWhileLeader` called: connecting, LISTENing, queueing) and the hand-off. "+
		"Breakdown: a wrapping backend times the release call and the waiter's Acquire; "+
		"the notification is when a listener of the benchmark, on a connection of its own, sees the holder's candidacy row deleted (the schema's NOTIFY, then a read).")
	fmt.Fprintln(report)
	schema := pgtest.Schema(t)
	on, stopOn := simbaHandOffSide(t, dsn, schema, "simba (status on)", handoffbench.Reference, true)
	off, stopOff := simbaHandOffSide(t, dsn, schema, "simba (status off)", handoffbench.Simba, false)
	sides := []handoffbench.Side{on, off}
	stops := []func() error{stopOn, stopOff}
	for _, p := range peers(t, dsn, admin, true) {
		side, stop := peerHandOffSide(t, p)
		sides = append(sides, side)
		stops = append(stops, stop)
	}
	res, err := handoffbench.Run(cfg, sides)
	if err != nil {
		t.Fatal(err)
	}
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}
	res.Markdown(report)
	fmt.Fprintln(report)
}

// peerHandOffSide hands one election of peer p over between two
// contender slots, a new elector for the waiter each round (an elector
// runs once).
func peerHandOffSide(t *testing.T, p peer) (handoffbench.Side, func() error) {
	election := "handoff-" + strings.ReplaceAll(p.name, " ", "-")
	leads := make(chan *pgpeers.Leadership, 4)
	n := 0
	mk := func(slot int) running {
		n++
		return start(p.make(t, election, fmt.Sprintf("c%d", n), fmt.Sprintf("simba-bench-handoff-%s-%d", election, slot), nil,
			func(l *pgpeers.Leadership) { leads <- l }))
	}
	holder := mk(0)
	slot := 0
	if _, err := await.Within(leads, opTimeout, "%s: no first leader", p.name); err != nil {
		t.Fatal(err)
	}
	once := func(settle time.Duration) (handoffbench.Round, error) {
		waiter := mk(1 - slot)
		time.Sleep(settle)
		t0 := time.Now()
		if err := holder.resign(); err != nil {
			return handoffbench.Round{}, err
		}
		l, err := await.Within(leads, opTimeout, "no leader after the Resign")
		if err != nil {
			return handoffbench.Round{}, err
		}
		holder, slot = waiter, 1-slot
		return handoffbench.Round{Total: l.Start.Sub(t0)}, nil
	}
	return handoffbench.Side{Name: p.name, Role: handoffbench.Peer, Once: once}, func() error { return holder.resign() }
}

// fault is one of the overlap benchmarks' faults.
type fault struct {
	name  string
	title string
	doc   string
	// apply faults the holder whose connections are named app and go
	// through px; heal ends it (nothing for a terminate).
	apply func(t *testing.T, admin *pgxpool.Pool, app string, px *faultproxy.Proxy) error
	heal  func(px *faultproxy.Proxy)
}

var cutFault = fault{
	name:  "cut",
	title: "Link cut between the holder and the server",
	doc: "The holder's link goes silent both ways through the project's fault proxy (internal/faultproxy, Blackhole), at a random instant 0.2–1.2 s after the previous round. " +
		"The proxy keeps the server's side of the link open, so the server learns nothing of the cut by itself: " +
		fmt.Sprintf("the advisory lock's connections carry `idle_session_timeout = %v` as the stand-in for the server's dead-peer detection (TCP keepalives), which frees the lock. ", keepaliveCull) +
		"The link heals once the new leader runs and the old one stopped believing.",
	apply: func(t *testing.T, admin *pgxpool.Pool, app string, px *faultproxy.Proxy) error {
		px.Blackhole()
		return nil
	},
	heal: func(px *faultproxy.Proxy) { px.Heal() },
}

var crashFault = fault{
	name:  "crash",
	title: "The holder crashes, as the server sees it (its connections reset, new ones refused)",
	doc: "The holder's proxy resets every connection and refuses new ones (internal/faultproxy, Refuse), as when the holder's process dies and its kernel closes its sockets, " +
		"at a random instant 0.2–1.2 s after the previous round; it accepts again once the new leader runs and the old one stopped believing. " +
		"The fail-over is the figure of a crash; the overlap columns are what a holder that outlives the reset of its connections believes (a crashed one believes nothing).",
	apply: func(t *testing.T, admin *pgxpool.Pool, app string, px *faultproxy.Proxy) error {
		px.Refuse()
		return nil
	},
	heal: func(px *faultproxy.Proxy) { px.Accept() },
}

var terminateFault = fault{
	name:  "terminate",
	title: "The server ends the holder's connections (`pg_terminate_backend`, as an idle cull)",
	doc: "Every backend of the holder (by application_name) is ended by `pg_terminate_backend` from another connection, " +
		"at a random instant 0.2–1.2 s after the previous round; the holder reconnects by itself.",
	apply: func(t *testing.T, admin *pgxpool.Pool, app string, px *faultproxy.Proxy) error {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		n, err := pgtest.Terminate(ctx, admin, app)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no backend named %s to terminate", app)
		}
		return nil
	},
	heal: func(*faultproxy.Proxy) {},
}

// reading is one way to read when an old leader stopped believing it
// leads.
type reading struct {
	name string
	end  func(*pgpeers.Leadership) time.Time
}

// overlapStats is one peer's results under one fault, for each reading.
type overlapStats struct {
	peer     string
	readings []reading
	overlaps []*handoffbench.Overlap
	mu       sync.Mutex
	kept     int // rounds in which the holder kept leading through the fault
	// stalled: rounds in which the holder gave up and no one led within
	// survived (a peer's liveness failure, reported; for simba an error).
	// The pair plays no more rounds after one.
	stalled int
}

// benchOverlap plays the overlap rounds of the peers under fault f: pairs
// of contenders, each through a proxy of its own, in parallel.
func benchOverlap(t *testing.T, dsn string, admin *pgxpool.Pool, f fault, report *strings.Builder) {
	fmt.Fprintf(report, "### %s: overlap and fail-over (%d pairs × %d rounds per side)\n\n", f.title, overlapPairs, overlapPerPair)
	fmt.Fprintln(report, f.doc+
		" A round overlaps when the old leader still believed it led after the new one started (the new leader's `Leadership.Start` before the old one's end). "+
		"Advisory lock: the old leader stops believing when a ping on its connection fails. "+
		"Leader table, river's loop: when a re-election finds the row taken, or after 5 failed re-elections in a row. "+
		"Leader table, local TTL: the same, or as soon as the TTL has passed since the last successful re-election it received, whichever is first (river has no such check; a careful user's addition). "+
		"simba: the old term's `Valid()` (its `Deadline`), and its task's ctx end, against the new term's `Start`. "+
		"Fail-over: the fault → the new leader.")
	fmt.Fprintln(report)
	var all []*overlapStats
	simbaStats := &overlapStats{peer: "simba", readings: []reading{{", old term's Valid()", nil}, {", old task's ctx end", nil}}}
	for _, r := range simbaStats.readings {
		simbaStats.overlaps = append(simbaStats.overlaps, &handoffbench.Overlap{Side: "simba" + r.name})
	}
	schema := pgtest.Schema(t)
	var wg sync.WaitGroup
	for pair := range overlapPairs {
		wg.Go(func() { simbaOverlap(t, dsn, schema, admin, f, pair, simbaStats) })
	}
	wg.Wait()
	all = append(all, simbaStats)
	for _, p := range peers(t, dsn, admin, false) {
		st := &overlapStats{peer: p.name, readings: []reading{{"", (*pgpeers.Leadership).End}}}
		if p.name == "leader table" {
			st.readings = []reading{{", river's loop", (*pgpeers.Leadership).End}, {", local TTL", (*pgpeers.Leadership).TTLEnd}}
		}
		for _, r := range st.readings {
			st.overlaps = append(st.overlaps, &handoffbench.Overlap{Side: p.name + r.name})
		}
		for pair := range overlapPairs {
			wg.Go(func() { peerOverlap(t, admin, p, f, pair, st) })
		}
		wg.Wait()
		all = append(all, st)
	}
	var rows []*handoffbench.Overlap
	for _, st := range all {
		for _, o := range st.overlaps {
			if n, _ := o.Rounds(); n > 0 {
				rows = append(rows, o)
			}
		}
	}
	handoffbench.OverlapMarkdown(report, rows...)
	fmt.Fprintln(report)
	for _, st := range all {
		if st.kept > 0 {
			fmt.Fprintf(report, "%s: in %d of %d rounds the holder kept leading through the fault (no new leader within %v): no fail-over, so no row in the table for the rounds it kept.\n\n",
				st.peer, st.kept, overlapPairs*overlapPerPair, survived)
		}
		if st.stalled > 0 {
			fmt.Fprintf(report, "%s: in %d rounds the holder stopped leading and no one led within %v (no fail-over: a liveness failure); its pair played no more rounds.\n\n",
				st.peer, st.stalled, survived)
		}
	}
	if _, over := simbaStats.overlaps[0].Rounds(); over > 0 {
		t.Errorf("simba: %d %s rounds overlapped", over, f.name)
	}
}

// peerOverlap plays one pair's rounds of peer p under fault f.
func peerOverlap(t *testing.T, admin *pgxpool.Pool, p peer, f fault, pair int, st *overlapStats) {
	type spell struct {
		who int
		l   *pgpeers.Leadership
	}
	leads := make(chan spell, 16)
	election := fmt.Sprintf("%s-%s-%d", f.name, strings.ReplaceAll(p.name, " ", "-"), pair)
	var proxies [2]*faultproxy.Proxy
	var apps [2]string
	var rs [2]running
	for i := range rs {
		px, err := faultproxy.New(admin.Config().ConnConfig.Host + ":" + strconv.Itoa(int(admin.Config().ConnConfig.Port)))
		if err != nil {
			t.Error(err)
			return
		}
		defer px.Close()
		proxies[i] = px
		apps[i] = fmt.Sprintf("simba-bench-%s-%c", election, 'a'+i)
		rs[i] = start(p.make(t, election, fmt.Sprint(i), apps[i], px, func(l *pgpeers.Leadership) { leads <- spell{i, l} }))
	}
	defer func() {
		for i, r := range rs {
			proxies[i].Heal()
			if err := r.resign(); err != nil {
				t.Errorf("%s: contender %d: %v", election, i, err)
			}
		}
	}()
	holder, err := await.Within(leads, opTimeout, "%s: no first leader", election)
	if err != nil {
		t.Error(err)
		return
	}
	for round := range overlapPerPair {
		time.Sleep(200*time.Millisecond + rand.N(time.Second))
		h := holder.who
		cut := time.Now()
		if err := f.apply(t, admin, apps[h], proxies[h]); err != nil {
			t.Errorf("%s round %d: %v", election, round, err)
			return
		}
		var next spell
		select {
		case next = <-leads:
		case <-time.After(survived):
			select {
			case <-holder.l.Done():
				t.Logf("%s round %d: the holder stopped leading and no one leads after %v", election, round, survived)
				st.mu.Lock()
				st.stalled++
				st.mu.Unlock()
				return
			default:
			}
			f.heal(proxies[h])
			st.mu.Lock()
			st.kept++
			st.mu.Unlock()
			continue
		}
		if _, err := await.Within(holder.l.Done(), opTimeout, "%s round %d: the old leader still believes it leads", election, round); err != nil {
			t.Error(err)
			return
		}
		for i, r := range st.readings {
			st.overlaps[i].Add(cut, next.l.Start, r.end(holder.l))
		}
		f.heal(proxies[h])
		holder = next
	}
}

// simbaBackend returns a backend in schema on a pool of its own, its
// connections named app and made through px (nil: direct), closed when
// the test ends.
func simbaBackend(t *testing.T, dsn, schema, app string, px *faultproxy.Proxy) *postgres.Backend {
	b, err := postgres.NewFromPool(benchPool(t, dsn, app, px), postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// closeClient closes c, waiting at most opTimeout.
func closeClient(t *testing.T, c *simba.Client, name string) {
	if _, err := await.Within(await.Returned(c.Close), opTimeout, "%s: Close did not return", name); err != nil {
		t.Error(err)
	}
}

// simbaHandOffSide is simba's side of the hand-off: two clients on
// backends wrapped for the breakdown, with status records on or off.
func simbaHandOffSide(t *testing.T, dsn, schema, name string, role handoffbench.Role, status bool) (handoffbench.Side, func() error) {
	return simbaHandOffSideTTL(t, dsn, schema, name, role, status, peerTTL)
}

// simbaHandOffSideTTL is simbaHandOffSide with the clients' TTL.
func simbaHandOffSideTTL(t *testing.T, dsn, schema, name string, role handoffbench.Role, status bool, ttl time.Duration) (handoffbench.Side, func() error) {
	election := fmt.Sprintf("handoff-%v", status)
	pair := handoffbench.SimbaPair{Election: election, Timeout: opTimeout, Notice: deleteWatcher(t, dsn, schema)}
	for i := range pair.Clients {
		b := simbaBackend(t, dsn, schema, fmt.Sprintf("simba-bench-handoff-%v-%d", status, i), nil)
		pair.Probes[i] = new(handoffbench.Probe)
		c, err := simba.New(handoffbench.Wrap(b, pair.Probes[i]), simba.WithTTL(ttl), simba.WithStatus(status))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeClient(t, c, name) })
		pair.Clients[i] = c
	}
	side, stop, err := handoffbench.SimbaSide(name, role, pair)
	if err != nil {
		t.Fatal(err)
	}
	return side, stop
}

// deleteWatcher returns the independent watcher of the breakdown: a LISTEN
// on the schema's NOTIFY channel, on a connection of its own, that on each
// notification of a lease name reads whether the candidacy (name, token)
// asked for is gone, and then reports the notification's arrival.
func deleteWatcher(t *testing.T, dsn, schema string) handoffbench.Notice {
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{"simba." + schema}.Sanitize()); err != nil {
		cancel()
		t.Fatal(err)
	}
	reader := benchPool(t, dsn, "simba-bench-watcher", nil)
	candidacies := pgx.Identifier{schema, "candidacies"}.Sanitize()
	type key struct {
		name  string
		token uint64
	}
	var mu sync.Mutex
	want := map[key]chan time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			at := time.Now()
			name, ok := strings.CutPrefix(n.Payload, "c ")
			if !ok {
				continue
			}
			mu.Lock()
			var keys []key
			for k := range want {
				if k.name == name {
					keys = append(keys, k)
				}
			}
			mu.Unlock()
			for _, k := range keys {
				var held bool
				if err := reader.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+candidacies+" WHERE name = $1 AND token = $2)", k.name, int64(k.token)).Scan(&held); err != nil || held {
					continue
				}
				mu.Lock()
				if ch, ok := want[k]; ok {
					ch <- at
					delete(want, k)
				}
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		conn.Close(context.Background())
	})
	return func(ctx context.Context, name string, token uint64) (<-chan time.Time, error) {
		ch := make(chan time.Time, 1)
		mu.Lock()
		want[key{name, token}] = ch
		mu.Unlock()
		return ch, nil
	}
}

// simbaTerm is one term as its task saw it.
type simbaTerm struct {
	who     int
	term    *simba.Term
	ended   chan struct{} // closed when the task's ctx ended
	endedAt time.Time
}

// simbaOverlap plays one pair's rounds of simba nodes under fault f.
func simbaOverlap(t *testing.T, dsn, schema string, admin *pgxpool.Pool, f fault, pair int, st *overlapStats) {
	election := fmt.Sprintf("%s-%d", f.name, pair)
	terms := make(chan *simbaTerm, 16)
	var proxies [2]*faultproxy.Proxy
	var apps [2]string
	var clients [2]*simba.Client
	for i := range clients {
		px, err := faultproxy.New(admin.Config().ConnConfig.Host + ":" + strconv.Itoa(int(admin.Config().ConnConfig.Port)))
		if err != nil {
			t.Error(err)
			return
		}
		defer px.Close()
		proxies[i] = px
		apps[i] = fmt.Sprintf("simba-bench-simba-%s-%c", election, 'a'+i)
		c, err := simba.New(simbaBackend(t, dsn, schema, apps[i], px), simba.WithTTL(peerTTL))
		if err != nil {
			t.Error(err)
			return
		}
		defer closeClient(t, c, apps[i])
		defer px.Heal() // before the Close
		clients[i] = c
		if _, err := c.Election(election).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			s := &simbaTerm{who: i, term: term, ended: make(chan struct{})}
			terms <- s
			<-ctx.Done()
			s.endedAt = time.Now()
			close(s.ended)
			return nil
		}); err != nil {
			t.Error(err)
			return
		}
	}
	holder, err := await.Within(terms, opTimeout, "%s: no first term", election)
	if err != nil {
		t.Error(err)
		return
	}
	for round := range overlapPerPair {
		time.Sleep(200*time.Millisecond + rand.N(time.Second))
		h := holder.who
		cut := time.Now()
		if err := f.apply(t, admin, apps[h], proxies[h]); err != nil {
			t.Errorf("%s round %d: %v", election, round, err)
			return
		}
		var next *simbaTerm
		select {
		case next = <-terms:
		case <-time.After(survived):
			select {
			case <-holder.ended:
				t.Errorf("%s round %d: the holder's term ended and no one leads after %v", election, round, survived)
				return
			default:
			}
			f.heal(proxies[h])
			st.mu.Lock()
			st.kept++
			st.mu.Unlock()
			continue
		}
		if _, err := await.Within(holder.ended, opTimeout, "%s round %d: the old term's task still runs", election, round); err != nil {
			t.Error(err)
			return
		}
		if next.term.Token() <= holder.term.Token() {
			t.Errorf("%s round %d: token %d after %d", election, round, next.term.Token(), holder.term.Token())
		}
		st.overlaps[0].Add(cut, next.term.Start(), holder.term.Deadline())
		st.overlaps[1].Add(cut, next.term.Start(), holder.endedAt)
		f.heal(proxies[h])
		holder = next
	}
}
