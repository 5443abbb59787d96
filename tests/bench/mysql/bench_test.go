package mysqlbench_test

import (
	"context"
	"database/sql"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba"
	simbamysql "github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/mytest"
	"github.com/simba-go/simba/tests/internal/handoffbench"
	"github.com/simba-go/simba/tests/internal/mypeers"
)

// benchEnv turns on TestBenchmarkReport, which measures simba on MySQL
// (MariaDB) side by side with the peers teams use today
// (tests/internal/mypeers: a GET_LOCK elector and a ShedLock-style lock
// table) on one server and prints a Markdown report: the graceful
// hand-off, and overlap and fail-over when the holder's link is cut, when
// the server kills its connections and when it crashes. It takes about
// ten minutes. Run it without the race detector, with a server:
//
//	cd tests && ../scripts/with-mariadb.sh env SIMBA_MYSQL_BENCH=1 \
//		go test -run '^TestBenchmarkReport$' -v -count=1 -timeout 40m ./bench/mysql/
//
// SIMBA_MYSQL_BENCH=1 (or all) runs every section; or name them,
// comma-separated: handoff, cut, kill, crash. With SIMBA_MYSQL_BENCH_OUT=file
// it also writes the report to file; SIMBA_BENCH_ROUNDS=n shortens the
// hand-off rounds.
//
// simba runs with the peers' TTL (renewals every TTL/3, the peers'
// interval), each client on a backend of its own (mysql.New: its own
// pool and bells connection), in one database of the run's own, with a
// table prefix per section.
const benchEnv = "SIMBA_MYSQL_BENCH"

// Parameters of the report: those of the PostgreSQL benchmark
// (tests/bench/postgres), river's defaults divided by 20, so that a round
// lasts about a second. The lock table extends every interval and its
// contenders try every interval plus a jitter; the GET_LOCK elector pings
// every interval and its contenders block in GET_LOCK for getLockWait at a
// time.
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

	// getLockWait is how long a GET_LOCK contender blocks in the server
	// at a time: a release wakes it at once.
	getLockWait = time.Second

	// keepaliveCull stands in, on the GET_LOCK elector's connections, for
	// the server's detection of a dead peer (TCP keepalives): the proxy
	// keeps the server's side of a cut link open, so without it the
	// server would hold the lock of a cut holder until the link heals. It
	// is the session's wait_timeout, which MariaDB takes in whole seconds:
	// one second, the peer TTL rounded up.
	keepaliveCull = time.Second

	// survived bounds the wait for a new leader in an overlap round: a
	// holder whose leadership outlives the fault (a lock row or a
	// session row outlives a killed connection) keeps it past this.
	survived = 5 * time.Second
)

// opTimeout bounds calls expected to succeed promptly.
const opTimeout = 20 * time.Second

// handOffSettles are the pauses between the waiter starting to wait and
// the hand-off.
var handOffSettles = []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 150 * time.Millisecond}

// bench is one run's server, database and admin pool.
type bench struct {
	dsn   string // the run's database, as the DSN's user
	db    string // its name
	tag   string // a random tag of the run's users and named locks
	admin *sql.DB
}

func TestBenchmarkReport(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skipf("set %s=1 to run the benchmarks", benchEnv)
	}
	db := mytest.Database(t)
	b := &bench{dsn: mytest.DSNFor(t, db), db: db, tag: fmt.Sprintf("%04x", rand.Uint32()&0xffff)}
	b.admin = openDB(t, b.dsn)
	var version string
	var flush, binlog int
	if err := b.admin.QueryRow("SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@log_bin").Scan(&version, &flush, &binlog); err != nil {
		t.Fatal(err)
	}
	var report strings.Builder
	fmt.Fprintf(&report, "MariaDB %s (Debian's; innodb_flush_log_at_trx_commit = %d, binary log %s), loopback, GOMAXPROCS %d, load average at the start %s.\n\n",
		version, flush, map[int]string{0: "off", 1: "on"}[binlog], runtime.GOMAXPROCS(0), handoffbench.LoadAverage())
	fmt.Fprintf(&report, "%s\n\n", handoffbench.Busy(t))
	fmt.Fprintf(&report, "Peers (tests/internal/mypeers), the PostgreSQL benchmark's parameters: interval %v (the GET_LOCK holder's pings; the lock table's extensions, and its contenders' tries, + jitter up to %v), lock TTL %v, statement timeout %v, first backoff %v, 5 failed extensions before the lock table's holder gives up; GET_LOCK contenders block in `GET_LOCK(name, %v)`, their connections carry `wait_timeout = %v`.\n\n",
		peerInterval, peerJitter, peerTTL, peerTimeout, peerBackoff, getLockWait.Seconds(), keepaliveCull.Seconds())
	fmt.Fprintf(&report, "simba: `simba.WithTTL(%v)` (renewals every TTL/3), each client on a `mysql.New` backend of its own (its own pool and bells connection), one table prefix per section.\n\n", peerTTL)
	if section("handoff") {
		b.benchHandOff(t, &report)
	}
	if section("cut") {
		b.benchOverlap(t, cutFault, &report)
	}
	if section("kill") {
		b.benchOverlap(t, killFault, &report)
	}
	if section("crash") {
		b.benchOverlap(t, crashFault, &report)
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

// openDB opens a pool on dsn, closed when the test ends.
func openDB(t *testing.T, dsn string) *sql.DB {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// config returns the run's DSN as user (password the same; "" keeps the
// DSN's user), through the proxy px if not nil.
func (b *bench) config(t *testing.T, user string, px *faultproxy.Proxy) *mysql.Config {
	cfg, err := mysql.ParseDSN(b.dsn)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		cfg.User, cfg.Passwd = user, user
	}
	if px != nil {
		cfg.Addr = px.Addr()
	}
	return cfg
}

// user creates a server user of the run's own, named from name, with every
// privilege on the run's database, dropped when the test ends; a holder's
// connections are told apart by their user (KILL by
// information_schema.PROCESSLIST.USER).
func (b *bench) user(t *testing.T, name string) (string, error) {
	u := "sb" + b.tag + "_" + name
	t.Cleanup(func() { b.admin.Exec("DROP USER IF EXISTS '" + u + "'@'%'") })
	for _, q := range []string{
		"CREATE USER '" + u + "'@'%' IDENTIFIED BY '" + u + "'",
		"GRANT ALL PRIVILEGES ON `" + b.db + "`.* TO '" + u + "'@'%'",
	} {
		if _, err := b.admin.Exec(q); err != nil {
			return "", fmt.Errorf("%s: %w", q, err)
		}
	}
	return u, nil
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
	// make returns contender id of the election called election,
	// connecting as user ("": the DSN's) through px (nil: direct),
	// reporting its leadership to onLead.
	make func(t *testing.T, election, id, user string, px *faultproxy.Proxy, onLead func(*mypeers.Leadership)) elector
}

// peers returns the two peers, each call with a lock table of its own;
// for the hand-off (handOff), also the GET_LOCK elector that tries
// GET_LOCK(name, 0) every interval instead of blocking. closePools closes
// the lock table's pools, once its electors have stopped.
func (b *bench) peers(t *testing.T, handOff bool) (ps []peer, closePools func()) {
	table := fmt.Sprintf("bench_lock_%08x", rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := mypeers.CreateLockTable(ctx, b.admin, table); err != nil {
		t.Fatal(err)
	}
	getLock := func(name string, wait time.Duration) peer {
		return peer{name: name, make: func(t *testing.T, election, id, user string, px *faultproxy.Proxy, onLead func(*mypeers.Leadership)) elector {
			cfg := b.config(t, user, px)
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params["wait_timeout"] = strconv.Itoa(int(keepaliveCull / time.Second))
			e, err := mypeers.NewGetLock(mypeers.GetLockConfig{Conn: cfg, Name: b.lockName(election), Wait: wait,
				Interval: peerInterval, Timeout: peerTimeout, OnLead: onLead})
			if err != nil {
				t.Fatal(err)
			}
			return e
		}}
	}
	pools := map[string]*sql.DB{}
	var mu sync.Mutex
	lockTable := peer{name: "lock table", make: func(t *testing.T, election, id, user string, px *faultproxy.Proxy, onLead func(*mypeers.Leadership)) elector {
		cfg := b.config(t, user, px)
		mu.Lock()
		pool, ok := pools[cfg.FormatDSN()]
		if !ok {
			var err error
			if pool, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
				t.Fatal(err)
			}
			pools[cfg.FormatDSN()] = pool
		}
		mu.Unlock()
		e, err := mypeers.NewLockTable(mypeers.LockTableConfig{
			DB: pool, Table: table, Name: election, ID: id,
			Interval: peerInterval, Retry: peerInterval, Jitter: peerJitter, TTL: peerTTL, Timeout: peerTimeout, Backoff: peerBackoff,
			OnLead: onLead,
		})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}}
	ps = []peer{getLock("GET_LOCK", getLockWait)}
	if handOff {
		ps = append(ps, getLock("GET_LOCK, trying every interval", 0))
	}
	return append(ps, lockTable), func() {
		mu.Lock()
		defer mu.Unlock()
		for _, pool := range pools {
			pool.Close()
		}
	}
}

// lockName is the named lock of an election: named locks are the
// server's, so the run's database is in it (by a hash: at most 64
// characters).
func (b *bench) lockName(election string) string {
	n := fmt.Sprintf("sb-%08x-%s", crc32.ChecksumIEEE([]byte(b.db)), election)
	return n[:min(len(n), 64)]
}

// benchHandOff plays the graceful hand-off rounds of simba and the peers.
func (b *bench) benchHandOff(t *testing.T, report *strings.Builder) {
	cfg := handoffbench.Sized(handoffbench.Config{Settles: handOffSettles, Warmup: handOffWarmup, Rounds: handOffRounds})
	fmt.Fprintf(report, "### Graceful hand-off (%d rounds after %d warm-up rounds, sides alternating)\n\n", cfg.Rounds, cfg.Warmup)
	fmt.Fprintln(report, "Peers: the holder's `Resign` → the waiter learning it leads. "+
		"GET_LOCK: `RELEASE_LOCK` on the holder's connection; the waiter, blocked in `GET_LOCK(name, 1)` on its own, gets the lock from the server at once "+
		"(the variant trying every interval runs `GET_LOCK(name, 0)` every interval, jittered in [interval/2, interval]). "+
		"Lock table: the holder sets `lock_until = NOW(3)`; the waiter tries its conditional UPDATE every interval plus a random jitter, with nothing to wake it. "+
		"simba: `LeaderTask.Stop()` on the holder → the next holder's task running. "+
		"Settle: pause between the waiter starting (its `Run` or `RunWhileLeader` called: connecting, queueing) and the hand-off. "+
		"Breakdown: a wrapping backend times the release call and the waiter's Acquire; "+
		"the notification is the start of the first read, by a poller of the benchmark on a connection of its own (reads back to back, each a fraction of a millisecond), that finds the holder's candidacy row deleted "+
		"(MySQL has no notification: the waiter itself is woken by the holder's bell, a named lock the holder frees right after its release commits).")
	fmt.Fprintln(report)
	on, stopOn := b.simbaHandOffSide(t, "handoff_on_", "simba (status on)", handoffbench.Reference, true)
	off, stopOff := b.simbaHandOffSide(t, "handoff_off_", "simba (status off)", handoffbench.Simba, false)
	sides := []handoffbench.Side{on, off}
	stops := []func() error{stopOn, stopOff}
	ps, closePools := b.peers(t, true)
	defer closePools()
	for _, p := range ps {
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
	fmt.Fprintln(report, "simba (status on) against each peer, p50 and p99 (below 1: simba's hand-off is faster):")
	fmt.Fprintln(report)
	fmt.Fprint(report, "| settle |")
	for _, s := range sides[2:] {
		fmt.Fprintf(report, " %s p50 | p99 |", s.Name)
	}
	fmt.Fprint(report, "\n|---|")
	for range sides[2:] {
		fmt.Fprint(report, "---:|---:|")
	}
	fmt.Fprintln(report)
	for si, settle := range cfg.Settles {
		fmt.Fprintf(report, "| %v |", settle)
		for i := range sides[2:] {
			for _, q := range []float64{0.5, 0.99} {
				mine, theirs := handoffbench.Quantile(res.Totals(si, 0), q), handoffbench.Quantile(res.Totals(si, 2+i), q)
				fmt.Fprintf(report, " %.2f |", float64(mine)/float64(theirs))
			}
		}
		fmt.Fprintln(report)
	}
	fmt.Fprintln(report)
	lt := len(sides) - 1 // the lock table
	for si, settle := range cfg.Settles {
		mine, theirs := handoffbench.Quantile(res.Totals(si, 0), 0.5), handoffbench.Quantile(res.Totals(si, lt), 0.5)
		if mine > theirs {
			t.Errorf("settle %v: simba's hand-off p50 %v is above the lock table's %v", settle, mine, theirs)
		}
	}
}

// peerHandOffSide hands one election of peer p over between two
// contender slots, a new elector for the waiter each round (an elector
// runs once).
func peerHandOffSide(t *testing.T, p peer) (handoffbench.Side, func() error) {
	election := "handoff-" + strings.NewReplacer(" ", "-", ",", "").Replace(p.name)
	leads := make(chan *mypeers.Leadership, 4)
	n := 0
	mk := func() running {
		n++
		return start(p.make(t, election, fmt.Sprintf("c%d", n), "", nil, func(l *mypeers.Leadership) { leads <- l }))
	}
	holder := mk()
	if _, err := await.Within(leads, opTimeout, "%s: no first leader", p.name); err != nil {
		t.Fatal(err)
	}
	once := func(settle time.Duration) (handoffbench.Round, error) {
		waiter := mk()
		time.Sleep(settle)
		t0 := time.Now()
		if err := holder.resign(); err != nil {
			return handoffbench.Round{}, err
		}
		l, err := await.Within(leads, opTimeout, "no leader after the Resign")
		if err != nil {
			return handoffbench.Round{}, err
		}
		holder = waiter
		return handoffbench.Round{Total: l.Start.Sub(t0)}, nil
	}
	return handoffbench.Side{Name: p.name, Role: handoffbench.Peer, Once: once}, func() error { return holder.resign() }
}

// fault is one of the overlap benchmarks' faults.
type fault struct {
	name  string
	title string
	doc   string
	// apply faults the holder whose connections are user's and go
	// through px; heal ends it (nothing for a kill).
	apply func(b *bench, user string, px *faultproxy.Proxy) error
	heal  func(px *faultproxy.Proxy)
}

var cutFault = fault{
	name:  "cut",
	title: "Link cut between the holder and the server",
	doc: "The holder's link goes silent both ways through the project's fault proxy (internal/faultproxy, Blackhole), at a random instant 0.2–1.2 s after the previous round. " +
		"The proxy keeps the server's side of the link open, so the server learns nothing of the cut by itself: " +
		fmt.Sprintf("the GET_LOCK elector's connections carry `wait_timeout = %v` as the stand-in for the server's dead-peer detection (TCP keepalives), which frees the lock. ", keepaliveCull.Seconds()) +
		"The link heals once the new leader runs and the old one stopped believing.",
	apply: func(b *bench, user string, px *faultproxy.Proxy) error {
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
	apply: func(b *bench, user string, px *faultproxy.Proxy) error {
		px.Refuse()
		return nil
	},
	heal: func(px *faultproxy.Proxy) { px.Accept() },
}

var killFault = fault{
	name:  "kill",
	title: "The server kills the holder's connections (`KILL CONNECTION`, as a DBA or an idle cull does)",
	doc: "Every connection of the holder (by its user, each contender connecting as a user of its own) is ended by `KILL CONNECTION` from another connection, " +
		"at a random instant 0.2–1.2 s after the previous round; the holder reconnects by itself.",
	apply: func(b *bench, user string, px *faultproxy.Proxy) error {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		n, err := mytest.KillUser(ctx, b.admin, user)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no connection of user %s to kill", user)
		}
		return nil
	},
	heal: func(*faultproxy.Proxy) {},
}

// reading is one way to read when an old leader stopped believing it
// leads.
type reading struct {
	name string
	end  func(*mypeers.Leadership) time.Time
}

// overlapStats is one side's results under one fault, for each reading.
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
	terms   []check.Term // simba's terms, for check.Terms
}

// benchOverlap plays the overlap rounds of simba and the peers under
// fault f: pairs of contenders, each through a proxy of its own and as a
// user of its own, in parallel.
func (b *bench) benchOverlap(t *testing.T, f fault, report *strings.Builder) {
	fmt.Fprintf(report, "### %s: overlap and fail-over (%d pairs × %d rounds per side)\n\n", f.title, overlapPairs, overlapPerPair)
	fmt.Fprintln(report, f.doc+
		" A round overlaps when the old leader still believed it led after the new one started (the new leader's `Leadership.Start` before the old one's end). "+
		"GET_LOCK: the old leader stops believing when a ping on its connection fails. "+
		"Lock table, its loop: when an extension finds the lock no longer its own, or after 5 failed extensions in a row. "+
		"Lock table, local TTL: the same, or as soon as the TTL has passed since the last successful extension it received, whichever is first (ShedLock has no such check; a careful user's addition). "+
		"simba: the old term's `Valid()` (its `Deadline`), and its task's ctx end, against the new term's `Start`. "+
		"Fail-over: the fault → the new leader.")
	fmt.Fprintln(report)
	var all []*overlapStats
	simbaStats := &overlapStats{peer: "simba", readings: []reading{{", old term's Valid()", nil}, {", old task's ctx end", nil}}}
	for _, r := range simbaStats.readings {
		simbaStats.overlaps = append(simbaStats.overlaps, &handoffbench.Overlap{Side: "simba" + r.name})
	}
	prefix := "ov_" + f.name + "_"
	var wg sync.WaitGroup
	for pair := range overlapPairs {
		wg.Go(func() { b.simbaOverlap(t, prefix, f, pair, simbaStats) })
	}
	wg.Wait()
	all = append(all, simbaStats)
	ps, closePools := b.peers(t, false)
	defer closePools()
	for pi, p := range ps {
		st := &overlapStats{peer: p.name, readings: []reading{{"", (*mypeers.Leadership).End}}}
		if p.name == "lock table" {
			st.readings = []reading{{", its loop", (*mypeers.Leadership).End}, {", local TTL", (*mypeers.Leadership).TTLEnd}}
		}
		for _, r := range st.readings {
			st.overlaps = append(st.overlaps, &handoffbench.Overlap{Side: p.name + r.name})
		}
		for pair := range overlapPairs {
			wg.Go(func() { b.peerOverlap(t, p, pi, f, pair, st) })
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
	errs := check.Terms(simbaStats.terms)
	fmt.Fprintf(report, "simba: internal/check.Terms over its %d terms (at most one valid term per election at any instant, tokens increasing): %d violations.\n\n", len(simbaStats.terms), len(errs))
	for _, err := range errs {
		t.Errorf("simba, %s: %v", f.name, err)
	}
	if _, over := simbaStats.overlaps[0].Rounds(); over > 0 {
		t.Errorf("simba: %d %s rounds overlapped", over, f.name)
	}
}

// newProxy returns a fault proxy to the server, closed when the test ends.
func (b *bench) newProxy(t *testing.T) (*faultproxy.Proxy, error) {
	px, err := faultproxy.New(b.config(t, "", nil).Addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { px.Close() })
	return px, nil
}

// peerOverlap plays one pair's rounds of peer p (the pi-th) under fault f.
func (b *bench) peerOverlap(t *testing.T, p peer, pi int, f fault, pair int, st *overlapStats) {
	type spell struct {
		who int
		l   *mypeers.Leadership
	}
	leads := make(chan spell, 16)
	election := fmt.Sprintf("%s-%s-%d", f.name, strings.ReplaceAll(p.name, " ", "-"), pair)
	var proxies [2]*faultproxy.Proxy
	var users [2]string
	var rs [2]running
	for i := range rs {
		px, err := b.newProxy(t)
		if err != nil {
			t.Error(err)
			return
		}
		proxies[i] = px
		if users[i], err = b.user(t, fmt.Sprintf("%s%d_%d%c", f.name, pi, pair, 'a'+i)); err != nil {
			t.Error(err)
			return
		}
		rs[i] = start(p.make(t, election, fmt.Sprint(i), users[i], px, func(l *mypeers.Leadership) { leads <- spell{i, l} }))
	}
	defer func() {
		for i, r := range rs {
			proxies[i].Heal()
			proxies[i].Accept()
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
		if err := f.apply(b, users[h], proxies[h]); err != nil {
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

// simbaBackend returns a backend with the table prefix, connecting as
// user through px (nil: direct). The caller closes it, after its client.
func (b *bench) simbaBackend(t *testing.T, prefix, user string, px *faultproxy.Proxy) (*simbamysql.Backend, error) {
	return simbamysql.New(b.config(t, user, px).FormatDSN(), simbamysql.WithTablePrefix(prefix))
}

// closeClient closes c, waiting at most opTimeout.
func closeClient(t *testing.T, c *simba.Client, name string) {
	if _, err := await.Within(await.Returned(c.Close), opTimeout, "%s: Close did not return", name); err != nil {
		t.Error(err)
	}
}

// simbaHandOffSide is simba's side of the hand-off: two clients on
// backends wrapped for the breakdown, with status records on or off.
func (b *bench) simbaHandOffSide(t *testing.T, prefix, name string, role handoffbench.Role, status bool) (handoffbench.Side, func() error) {
	pair := handoffbench.SimbaPair{Election: "handoff", Timeout: opTimeout, Notice: b.deleteWatcher(t, prefix)}
	for i := range pair.Clients {
		pair.Probes[i] = new(handoffbench.Probe)
		be, err := b.simbaBackend(t, prefix, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Close() }) // after the client's Close
		c, err := simba.New(handoffbench.Wrap(be, pair.Probes[i]), simba.WithTTL(peerTTL), simba.WithStatus(status))
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

// deleteWatcher returns the independent watcher of the breakdown: armed
// for a candidacy (name, token), it reads, on a connection of its own and
// back to back, whether the row is still there, and reports the start of
// the first read that finds it gone.
func (b *bench) deleteWatcher(t *testing.T, prefix string) handoffbench.Notice {
	cfg := b.config(t, "", nil)
	cfg.InterpolateParams = true // one round trip per read
	db := openDB(t, cfg.FormatDSN())
	query := "SELECT COUNT(*) FROM `" + prefix + "candidacies` WHERE name = ? AND token = ?"
	return func(ctx context.Context, name string, token uint64) (<-chan time.Time, error) {
		conn, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		var n int
		if err := conn.QueryRowContext(ctx, query, name, int64(token)).Scan(&n); err != nil || n != 1 {
			conn.Close()
			return nil, fmt.Errorf("the candidacy %s %d: %d rows (%v), want 1", name, token, n, err)
		}
		ch := make(chan time.Time, 1)
		go func() {
			defer conn.Close()
			for ctx.Err() == nil {
				at := time.Now()
				if err := conn.QueryRowContext(ctx, query, name, int64(token)).Scan(&n); err != nil {
					return
				}
				if n == 0 {
					ch <- at
					return
				}
			}
		}()
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
func (b *bench) simbaOverlap(t *testing.T, prefix string, f fault, pair int, st *overlapStats) {
	election := fmt.Sprintf("%s-%d", f.name, pair)
	terms := make(chan *simbaTerm, 16)
	var all []*simbaTerm
	defer func() { // after the clients' Close: every term has ended
		for drained := false; !drained; {
			select {
			case s := <-terms:
				all = append(all, s)
			default:
				drained = true
			}
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		for _, s := range all {
			st.terms = append(st.terms, check.Term{Name: s.term.Name(), Token: s.term.Token(), Start: s.term.Start(), End: s.term.Deadline()})
		}
	}()
	var proxies [2]*faultproxy.Proxy
	var users [2]string
	var clients [2]*simba.Client
	for i := range clients {
		px, err := b.newProxy(t)
		if err != nil {
			t.Error(err)
			return
		}
		proxies[i] = px
		if users[i], err = b.user(t, fmt.Sprintf("%ss_%d%c", f.name, pair, 'a'+i)); err != nil {
			t.Error(err)
			return
		}
		be, err := b.simbaBackend(t, prefix, users[i], px)
		if err != nil {
			t.Error(err)
			return
		}
		defer be.Close() // after the client's Close: its connections go with the pair
		c, err := simba.New(be, simba.WithTTL(peerTTL))
		if err != nil {
			t.Error(err)
			return
		}
		defer closeClient(t, c, users[i])
		defer func() { px.Heal(); px.Accept() }() // before the Close
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
	all = append(all, holder)
	for round := range overlapPerPair {
		time.Sleep(200*time.Millisecond + rand.N(time.Second))
		h := holder.who
		cut := time.Now()
		if err := f.apply(b, users[h], proxies[h]); err != nil {
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
		all = append(all, next)
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
