package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/pgtest"
)

// TestCrashLosesAsyncRelease: a release without records commits with
// synchronous_commit off, so a crash of the server right after it
// returns, before its WAL reached the disk, loses it: the released
// candidacy comes back, ahead of the waiter that was granted meanwhile. On
// a server of the test's own that commits durably (fsync on), with no
// renewal in flight: holder a releases, waiter b is granted at once, and
// the server is killed (SIGSTOP then SIGKILL) the moment b's Acquire
// returns, then started again; a round counts when the release was lost
// (the walwriter, within wal_writer_delay, may have flushed it first;
// such rounds are tried again). Then:
//
//   - no two holders: b still holds by its own account, and the server
//     refuses b's fenced writes while the lost candidacy is ahead (nobody
//     else believes it holds: a released its term), and a third waiter c
//     is not granted;
//   - a's next renewal deletes the candidacy again, in its own statement;
//     b's fenced writes are accepted from then on;
//   - not stuck: once b releases, c is granted within a few seconds, long
//     before a's session (renewed throughout) would expire;
//   - tokens increase: c's above b's above a's.
//
// The release with records (records=true) commits so too, and the same
// crash loses its records with it; a's next renewal runs the release
// again first, durably, which writes them again, as they were: the value,
// the token, and the version readers saw before the crash, which was
// drawn when the candidacy registered, durably. The sequence is made to
// WAL-log at the next nextval, as one in 32 does, so that a release
// drawing its version from the sequence would have lost the sequence's
// advance with it: the next version handed out after the restart must be
// above the one readers saw (with such a release, it was the same one).
//
// With the planted bug keep-async-release (the renewals do not delete the
// released candidacies again), the candidacy stays ahead of the queue
// while a lives, and the test fails (SIMBA_PLANT=keep-async-release).
// Two mutants of the release with records, tried by hand, fail
// records=true: the renewal without the releases' redo (redoRelease:
// "status/x1 after a's renewal redid the lost release: <nil>"), and the
// release drawing its
// version from the sequence rather than Register's ("record versions
// after the crash start again at 3, at or below 3, the version of the
// released record ... that readers saw").
func TestCrashLosesAsyncRelease(t *testing.T) {
	for _, records := range []bool{false, true} {
		t.Run(fmt.Sprintf("records=%v", records), func(t *testing.T) { crashAfterRelease(t, records) })
	}
}

func crashAfterRelease(t *testing.T, records bool) {
	const ttl = 9 * time.Second
	srv := pgtest.StartServer(t, pgtest.WithDurableCommits())
	schema := "simba"
	var bs [3]*postgres.Backend
	var ss [3]backend.Session
	for i := range bs {
		bs[i] = newBackendIn(t, srv.DSN(), schema)
		ss[i] = open(t, bs[i], ttl)
	}
	a, b, c := ss[0], ss[1], ss[2]
	q := pgx.Identifier{schema}.Sanitize()
	admin := func() *pgx.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		cn, err := pgx.Connect(ctx, srv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		return cn
	}
	// The WAL writer flushes an asynchronous commit within
	// wal_writer_delay (200 ms), and at once when it was hibernating: at
	// 10 s it neither hibernates nor flushes within an attempt, so that the
	// crash, milliseconds after the release, finds it unflushed unless a
	// durable commit (a renewal) flushed it, which the attempts avoid. On
	// a loaded machine the default let most attempts' releases survive.
	cn := admin()
	for _, stmt := range []string{"ALTER SYSTEM SET wal_writer_delay = '10s'", "SELECT pg_reload_conf()"} {
		if _, err := cn.Exec(ctxT(t), stmt); err != nil {
			t.Fatal(err)
		}
	}
	cn.Close(context.Background())
	// The sessions' renewals, every TTL/3 as a client's (retried soon
	// after a failure), run through the crash; a's successes are told.
	// a's wait while holdA is set: from the crash until the test has read
	// whether the crash lost the release (a's renewal deletes it again).
	var holdA atomic.Bool
	stopRenew := make(chan struct{})
	renewed := make(chan time.Time, 64)
	var renewers sync.WaitGroup
	for _, s := range ss {
		renewers.Go(func() {
			wait := ttl / 3
			for {
				select {
				case <-stopRenew:
					return
				case <-time.After(wait):
				}
				if s == a && holdA.Load() {
					wait = 50 * time.Millisecond
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := s.KeepAlive(ctx)
				cancel()
				wait = ttl / 3
				if err != nil {
					wait = 200 * time.Millisecond
					continue
				}
				if s == a {
					select {
					case renewed <- time.Now():
					default:
					}
				}
			}
		})
	}
	defer func() { close(stopRenew); renewers.Wait() }()

	lost := false
	for attempt := 1; attempt <= 10 && !lost; attempt++ {
		name := fmt.Sprintf("x%d", attempt)
		key := "status/" + name
		la, err := a.Acquire(ctxT(t), name)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan backend.Lease, 1)
		gotErr := make(chan error, 1)
		go func() {
			l, err := b.Acquire(ctxT(t), name)
			if err != nil {
				gotErr <- err
				return
			}
			got <- l
		}()
		mustEventually(t, "b's candidacy", func() bool {
			n := 0
			_ = bs[0].Pool().QueryRow(ctxT(t), "SELECT count(*) FROM "+q+".candidacies WHERE name = $1", name).Scan(&n)
			return n == 2
		})
		// Wait for a round of renewals to pass, so that none flushes the WAL
		// between the release and the crash. setval (committed durably)
		// makes the next nextval of the record versions WAL-log the
		// sequence, as one nextval in 32 does: a release that drew its
		// versions there would lose that log with it, and the version
		// would be handed out again.
		for len(renewed) > 0 {
			<-renewed
		}
		select {
		case <-renewed:
		case <-time.After(opTimeout):
			t.Fatal("no renewal of a's")
		}
		cn := admin()
		if _, err := cn.Exec(ctxT(t), "SELECT setval('"+q+".record_versions', (SELECT last_value FROM "+q+".record_versions))"); err != nil {
			t.Fatal(err)
		}
		if records {
			err = la.(backend.RecordReleaser).ReleaseWithRecords(ctxT(t), []backend.Record{{Key: key, Value: []byte("released by a")}})
		} else {
			err = la.Release(ctxT(t))
		}
		if err != nil {
			t.Fatal(err)
		}
		var lb backend.Lease
		select {
		case lb = <-got:
		case err := <-gotErr:
			t.Fatal(err)
		case <-time.After(opTimeout):
			t.Fatal("b not granted after a's release")
		}
		var seenVersion uint64
		if records {
			var v int64
			if err := cn.QueryRow(ctxT(t), "SELECT version FROM "+q+".records WHERE key = $1", key).Scan(&v); err != nil {
				t.Fatal(err)
			}
			seenVersion = uint64(v)
		}
		cn.Close(context.Background())
		holdA.Store(true)
		srv.Kill()
		crashed := time.Now()
		srv.Start()
		t.Logf("attempt %d: the server restarted %v after the crash", attempt, time.Since(crashed).Round(time.Millisecond))

		// Whether the release was lost: read before a's next renewal,
		// held back meanwhile, can delete it again.
		cn = admin()
		var back bool
		if err := cn.QueryRow(ctxT(t), "SELECT EXISTS (SELECT 1 FROM "+q+".candidacies WHERE name = $1 AND token = $2)", name, int64(la.Token())).Scan(&back); err != nil {
			t.Fatal(err)
		}
		var after *backend.Record // the record as the crash left it
		if records && back {
			after = readRecord(t, cn, q, key)
		}
		holdA.Store(false)
		if records {
			var next int64
			if err := cn.QueryRow(ctxT(t), "SELECT nextval('"+q+".record_versions')").Scan(&next); err != nil {
				t.Fatal(err)
			}
			if uint64(next) <= seenVersion {
				t.Errorf("record versions after the crash start again at %d, at or below %d, the version of the released record %q that readers saw: a version handed out twice", next, seenVersion, key)
			}
		}
		if !back {
			t.Logf("attempt %d: the release survived the crash (flushed before it); again", attempt)
			cn.Close(context.Background())
			if err := lb.Release(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		lost = true
		t.Logf("attempt %d: the crash lost a's release of %q (token %d); b holds token %d", attempt, name, la.Token(), lb.Token())
		if records {
			t.Logf("the record after the crash: %+v (before it: version %d)", after, seenVersion)
		}

		// No two holders: a released; b holds by its own account, and its
		// fenced writes are refused while a's candidacy is ahead.
		select {
		case <-lb.Lost():
			t.Logf("b's holding reported lost")
		default:
		}
		fenced := backend.Condition{Lease: name, Token: lb.Token()}
		_, perr := b.(backend.Records).PutRecord(ctxT(t), "fenced/"+name, []byte("b"), fenced)
		if perr == nil {
			// Allowed only once a's renewal withdrew the lost candidacy.
			var still bool
			_ = cn.QueryRow(ctxT(t), "SELECT EXISTS (SELECT 1 FROM "+q+".candidacies WHERE name = $1 AND token = $2)", name, int64(la.Token())).Scan(&still)
			if still {
				t.Errorf("b's fenced write accepted while a's candidacy (token %d) is ahead of b's (token %d)", la.Token(), lb.Token())
			}
		} else if !errors.Is(perr, backend.ErrConflict) {
			t.Logf("b's fenced write during the recovery: %v", perr)
		}
		// A third waiter.
		gotC := make(chan backend.Lease, 1)
		cctx, cancelC := context.WithTimeout(context.Background(), 3*ttl)
		defer cancelC()
		go func() {
			if l, err := c.Acquire(cctx, name); err == nil {
				gotC <- l
			}
		}()
		// a's renewal withdraws the lost candidacy.
		if !eventually(ttl, func() bool {
			var still bool
			err := cn.QueryRow(ctxT(t), "SELECT EXISTS (SELECT 1 FROM "+q+".candidacies WHERE name = $1 AND token = $2)", name, int64(la.Token())).Scan(&still)
			return err == nil && !still
		}) {
			t.Errorf("a's lost candidacy (token %d) still ahead of the queue %v after the restart, a's session alive: the lease is stuck behind a holder that does not know it holds", la.Token(), ttl)
		}
		if records {
			// Written again by the renewal that deleted the candidacy, in
			// the same statement, as readers saw it before the crash.
			got := readRecord(t, cn, q, key)
			if got == nil || string(got.Value) != "released by a" || got.Version != seenVersion || got.Token != la.Token() {
				t.Errorf("%s after a's renewal redid the lost release: %+v; want %q, version %d (as readers saw it before the crash), token %d", key, got, "released by a", seenVersion, la.Token())
			}
		}
		select {
		case l := <-gotC:
			t.Fatalf("c granted token %d while b holds token %d", l.Token(), lb.Token())
		default:
		}
		if !eventually(opTimeout, func() bool {
			_, err := b.(backend.Records).PutRecord(ctxT(t), "fenced/"+name, []byte("b"), fenced)
			return err == nil
		}) {
			t.Errorf("b's fenced writes still refused")
		}
		// Not stuck: b releases, c is granted.
		released := time.Now()
		if err := lb.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		select {
		case lc := <-gotC:
			t.Logf("c granted token %d %v after b's release", lc.Token(), time.Since(released).Round(time.Millisecond))
			if !(la.Token() < lb.Token() && lb.Token() < lc.Token()) {
				t.Errorf("tokens a %d, b %d, c %d: not increasing", la.Token(), lb.Token(), lc.Token())
			}
			_ = lc.Release(ctxT(t))
		case <-time.After(5 * time.Second):
			t.Errorf("c not granted within 5s of b's release: the lease is stuck")
		}
		cn.Close(context.Background())
	}
	if !lost {
		t.Fatalf("no crash in 10 lost the release: the release is not asynchronous, or the test never catches it unflushed")
	}
}

// readRecord reads the record at key on cn, nil when there is none.
func readRecord(t *testing.T, cn *pgx.Conn, q, key string) *backend.Record {
	t.Helper()
	var v, tok int64
	var val []byte
	err := cn.QueryRow(ctxT(t), "SELECT value, version, token FROM "+q+".records WHERE key = $1", key).Scan(&val, &v, &tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading the record %s: %v", key, err)
	}
	return &backend.Record{Key: key, Value: val, Version: uint64(v), Token: uint64(tok)}
}

// TestReleaseOfUnknownOutcomeRedone: a release whose reply never came
// (its ctx ended while the link held the replies) was applied by the
// server, asynchronously; its retry finds the candidacy gone, by that
// first attempt. A crash of the server before the WAL reached the disk
// would bring the candidacy back (and lose the records): the test puts
// it back as such a crash would, and the session's next renewal must
// release it again (and write the records again), as it does after a
// release that returned. Without that, the lease would stay stuck behind
// a candidacy its session no longer counts held, until the session ends.
//
// With the release noted for the renewal only when it returned released
// (as it was before this test), the candidacy is still there after the
// renewal, and the test fails with "after the renewal, the candidacy (x,
// token 1) is still there" (tried). The statements go through a proxy
// that holds their replies, in the simple protocol (see below).
func TestReleaseOfUnknownOutcomeRedone(t *testing.T) {
	for _, records := range []bool{false, true} {
		t.Run(fmt.Sprintf("records=%v", records), func(t *testing.T) { unknownOutcome(t, records) })
	}
}

func unknownOutcome(t *testing.T, records bool) {
	dsn, schema := pgtest.DSN(t), pgtest.Schema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	px, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	pu := *u
	pu.Host = px.Addr()
	// The simple protocol: a statement goes out whole, without waiting for
	// the reply to its preparation, so that the server applies it while
	// the proxy holds the replies.
	qv := pu.Query()
	qv.Set("default_query_exec_mode", "simple_protocol")
	pu.RawQuery = qv.Encode()
	// A pool of the test's own, whose connections are not pinged before
	// use (pgxpool pings one idle for over a second, and the stalled
	// replies would hold the ping, so that the release never goes out).
	cfg, err := pgxpool.ParseConfig(pu.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b, err := postgres.NewFromPool(pool, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	s := open(t, b, time.Minute) // outlives the waits on a loaded machine: nothing renews it
	l, err := s.Acquire(ctxT(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{schema}.Sanitize()
	cn, err := pgx.Connect(ctxT(t), dsn) // direct, not through the proxy
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close(context.Background())
	const key = "status/x"
	release := func(ctx context.Context) error {
		if records {
			return l.(backend.RecordReleaser).ReleaseWithRecords(ctx, []backend.Record{{Key: key, Value: []byte("released")}})
		}
		return l.Release(ctx)
	}
	candidacy := func() bool {
		var there bool
		if err := cn.QueryRow(ctxT(t), "SELECT EXISTS (SELECT 1 FROM "+q+".candidacies WHERE name = 'x' AND token = $1)", int64(l.Token())).Scan(&there); err != nil {
			t.Fatal(err)
		}
		return there
	}

	// The release's ctx ends once the server has applied it (the
	// candidacy gone, seen on the direct connection): a ctx of a fixed
	// length could end first on a loaded machine, before the server ran
	// the statement, and pgx's cancellation then rolls it back.
	// Three connections opened before the stall: the release (and the
	// session's monitor, if it reads meanwhile) finds one established,
	// not a dial whose handshake the stalled replies would hold.
	var conns []*pgxpool.Conn
	for range 3 {
		c, err := pool.Acquire(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	px.StallReplies()
	defer px.Resume()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- release(ctx) }()
	await.Until(t, opTimeout, "the first attempt applied by the server", func() bool { return !candidacy() }, func() string { return "the candidacy is still there" })
	cancel()
	err = <-done
	px.Resume()
	if err == nil {
		t.Fatal("the release returned with its replies held")
	}
	t.Logf("the release whose reply was held: %v", err)
	var seen *backend.Record
	if records {
		if seen = readRecord(t, cn, q, key); seen == nil || string(seen.Value) != "released" {
			t.Fatalf("%s after the first attempt: %+v, want it written", key, seen)
		}
	}
	if err := release(ctxT(t)); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("the retry: %v, want ErrNotHeld (the first attempt released)", err)
	}

	// What a crash before the WAL's flush would leave: the candidacy back,
	// the record gone.
	if _, err := cn.Exec(ctxT(t), "INSERT INTO "+q+".candidacies (name, token, session) VALUES ('x', $1, $2)", int64(l.Token()), s.ID()); err != nil {
		t.Fatal(err)
	}
	if records {
		if _, err := cn.Exec(ctxT(t), "DELETE FROM "+q+".records WHERE key = $1", key); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.KeepAlive(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if candidacy() {
		t.Fatalf("after the renewal, the candidacy (x, token %d) is still there: the lease is stuck behind it while the session lives", l.Token())
	}
	if records {
		got := readRecord(t, cn, q, key)
		if got == nil || string(got.Value) != "released" || got.Version != seen.Version || got.Token != l.Token() {
			t.Errorf("%s after the renewal: %+v; want it written again as it was: %+v", key, got, seen)
		}
	}
}
