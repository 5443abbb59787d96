package etcdbench_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/tests/internal/etcdclient"
	"github.com/simba-go/simba/tests/internal/handoffbench"
)

// benchEnv turns on TestBenchmarkReport, which measures simba on etcd side
// by side with etcd's own concurrency.Election on one embedded server and
// prints a Markdown report. The default run (SIMBA_ETCD_BENCH=1: the
// hand-off rounds and the blackhole rounds) takes about five minutes; run
// it without the race detector:
//
//	cd tests && SIMBA_ETCD_BENCH=1 go test -run '^TestBenchmarkReport$' -v -count=1 -timeout 30m ./bench/etcd/
//
// SIMBA_ETCD_BENCH=all adds the hand-off rounds on a server whose data
// directory is on tmpfs (/dev/shm), where fsync costs next to nothing, and
// the steady-state traffic; or name the sections, comma-separated: handoff,
// tmpfs, blackhole, traffic. With SIMBA_ETCD_BENCH_OUT=file it also writes
// the report to file.
const benchEnv = "SIMBA_ETCD_BENCH"

// Parameters of the report.
const (
	handOffRounds    = 200
	handOffWarmup    = 20
	blackholePairs   = 10
	blackholePerPair = 5 // rounds
	blackholeTTL     = time.Second
	trafficTTL       = 3 * time.Second // both sides: renewals every second
	trafficWindow    = 9 * time.Second
	handOffSessTTL   = 10 * time.Second
)

// handOffSettles are the pauses between the waiter starting to wait and
// the hand-off.
var handOffSettles = []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 150 * time.Millisecond}

func TestBenchmarkReport(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skipf("set %s=1 to run the benchmarks", benchEnv)
	}
	srv := etcdtest.Start(t, etcdtest.WithFsync())
	var report strings.Builder
	fmt.Fprintf(&report, "etcd server (a process of internal/etcdtest: heartbeat 10 ms, election timeout 100 ms, fsync on), loopback, %s, load average at the start %s. %s\n\n", machine(), handoffbench.LoadAverage(), handoffbench.Busy(t))

	if section("handoff", true) {
		benchHandOff(t, "disk", srv, &report)
	}
	if section("tmpfs", false) {
		dir, err := os.MkdirTemp("/dev/shm", "simba-etcd-bench-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		shm, err := etcdtest.New(dir, etcdtest.WithFsync())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { shm.Close() })
		benchHandOff(t, "tmpfs", shm, &report)
	}
	if section("blackhole", true) {
		benchBlackhole(t, srv, &report)
	}
	if section("traffic", false) {
		benchTraffic(t, srv, &report)
	}
	t.Logf("report:\n\n%s", report.String())
	if path := os.Getenv(benchEnv + "_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// section reports whether the benchmark section name is selected: the
// environment variable is "1" (the default sections), "all", or a
// comma-separated list of sections.
func section(name string, byDefault bool) bool {
	v := os.Getenv(benchEnv)
	return v == "all" || (v == "1" && byDefault) || slices.Contains(strings.Split(v, ","), name)
}

func benchHandOff(t *testing.T, data string, srv *etcdtest.Server, report *strings.Builder) {
	cfg := handoffbench.Sized(handoffbench.Config{Settles: handOffSettles, Warmup: handOffWarmup, Rounds: handOffRounds})
	fmt.Fprintf(report, "### Graceful hand-off, data directory on %s (%d rounds after %d warm-up rounds, sides alternating)\n\n", data, cfg.Rounds, cfg.Warmup)
	fmt.Fprintln(report, "simba: `LeaderTask.Stop()` on the holder → the next holder's task running. "+
		"Peer: `Election.Resign` → the waiting `Election.Campaign` returning. "+
		"Settle: pause between the waiter starting to wait and the hand-off. "+
		"Breakdown: a wrapping backend times the release call and the waiter's Acquire; "+
		"the notification is when a watcher of the test, on its own client, sees the holder's key deleted.")
	fmt.Fprintln(report)
	on, stopOn := simbaHandOffSide(t, srv, data, "simba (status on)", handoffbench.Reference, true)
	off, stopOff := simbaHandOffSide(t, srv, data, "simba (status off)", handoffbench.Simba, false)
	peer, stopPeer := peerHandOffSide(t, srv, data)
	res, err := handoffbench.Run(cfg,
		[]handoffbench.Side{on, off, peer})
	if err != nil {
		t.Fatal(err)
	}
	for _, stop := range []func() error{stopOn, stopOff, stopPeer} {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}
	res.Markdown(report)
	fmt.Fprintln(report)
}

// simbaHandOffSide is simba's side of the hand-off: two clients on
// backends wrapped for the breakdown, with status records on or off.
func simbaHandOffSide(t *testing.T, srv *etcdtest.Server, data, name string, role handoffbench.Role, status bool) (handoffbench.Side, func() error) {
	prefix := fmt.Sprintf("/bench-handoff-%s-%v/", data, status)
	pair := handoffbench.SimbaPair{Election: "handoff", Timeout: opTimeout, Notice: deleteWatcher(t, srv, prefix)}
	for i := range pair.Clients {
		b, err := etcd.NewFromClient(benchClient(t, direct(srv), nil), etcd.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		pair.Probes[i] = new(handoffbench.Probe)
		c, err := simba.New(handoffbench.Wrap(b, pair.Probes[i]), simba.WithTTL(handOffSessTTL), simba.WithStatus(status))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		pair.Clients[i] = c
	}
	side, stop, err := handoffbench.SimbaSide(name, role, pair)
	if err != nil {
		t.Fatal(err)
	}
	return side, stop
}

// deleteWatcher returns the independent watcher of the breakdown: one
// watch, on a client of its own, of the lease keys under prefix, which
// reports the delete of the key of a given lease and create revision (the
// token) whatever the key's layout under <prefix>lease/<name>.
func deleteWatcher(t *testing.T, srv *etcdtest.Server, prefix string) handoffbench.Notice {
	cli := benchClient(t, direct(srv), nil)
	ctx, cancel := context.WithCancel(context.Background())
	wch := cli.Watch(ctx, prefix+"lease/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		cancel()
		t.Fatalf("watch of %slease/ not created: %v", prefix, resp.Err())
	}
	var mu sync.Mutex
	want := map[uint64]chan time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range wch {
			now := time.Now()
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypeDelete || ev.PrevKv == nil {
					continue
				}
				mu.Lock()
				if ch, ok := want[uint64(ev.PrevKv.CreateRevision)]; ok {
					ch <- now
					delete(want, uint64(ev.PrevKv.CreateRevision))
				}
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func(ctx context.Context, name string, token uint64) (<-chan time.Time, error) {
		ch := make(chan time.Time, 1)
		mu.Lock()
		want[token] = ch
		mu.Unlock()
		return ch, nil
	}
}

// peerHandOffSide is concurrency.Election's side: Resign → the waiting
// Campaign returning.
func peerHandOffSide(t *testing.T, srv *etcdtest.Server, data string) (handoffbench.Side, func() error) {
	ctx := context.Background()
	prefix := fmt.Sprintf("/bench-peer-handoff-%s/", data)
	var elections [2]*concurrency.Election
	for i := range elections {
		s, err := concurrency.NewSession(benchClient(t, direct(srv), nil), concurrency.WithTTL(int(handOffSessTTL/time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		elections[i] = concurrency.NewElection(s, prefix)
	}
	type won struct {
		at  time.Time
		err error
	}
	campaign := func(i int) <-chan won {
		ch := make(chan won, 1)
		go func() {
			err := elections[i].Campaign(ctx, fmt.Sprint(i))
			ch <- won{time.Now(), err}
		}()
		return ch
	}
	if w := <-campaign(0); w.err != nil {
		t.Fatal(w.err)
	}
	holder := 0
	once := func(settle time.Duration) (handoffbench.Round, error) {
		pending := campaign(1 - holder)
		time.Sleep(settle)
		t0 := time.Now()
		if err := elections[holder].Resign(ctx); err != nil {
			return handoffbench.Round{}, err
		}
		w, err := await.Within(pending, opTimeout, "no Campaign returned after the Resign")
		if err == nil {
			err = w.err
		}
		if err != nil {
			return handoffbench.Round{}, err
		}
		holder = 1 - holder
		return handoffbench.Round{Total: w.at.Sub(t0)}, nil
	}
	return handoffbench.Side{Name: "concurrency.Election", Role: handoffbench.Peer, Once: once},
		func() error { return elections[holder].Resign(ctx) }
}

// benchBlackhole plays the blackhole rounds: pairs of contenders, each
// through a proxy of its own; the holder's link is blackholed until the
// other has taken over and the holder has stopped believing it leads.
func benchBlackhole(t *testing.T, srv *etcdtest.Server, report *strings.Builder) {
	fmt.Fprintf(report, "### Blackholed holder: overlap and fail-over (TTL %v, %d pairs × %d rounds per side)\n\n", blackholeTTL, blackholePairs, blackholePerPair)
	fmt.Fprintln(report, "The holder's link is blackholed (the server stops hearing it, as after a crash) at a random instant over one second, "+
		"so that the phases of renewals and of etcd's expiry checks (every 500ms) vary. "+
		"A round overlaps when the old holder still believes it leads after the new one started: "+
		"simba: the old term's `Valid()` (its `Deadline`), and its task's ctx end, against the new term's `Start`; "+
		"peer: the old session's `Done()` against the new `Campaign` returning. "+
		"Fail-over: the cut → the new leader.")
	fmt.Fprintln(report)
	valid := &handoffbench.Overlap{Side: "simba, old term's Valid()"}
	ctxEnd := &handoffbench.Overlap{Side: "simba, old task's ctx end"}
	peer := &handoffbench.Overlap{Side: "concurrency.Election, old session's Done()"}
	var wg sync.WaitGroup
	for p := range blackholePairs {
		wg.Go(func() { simbaBlackhole(t, srv, p, valid, ctxEnd) })
	}
	wg.Wait()
	for p := range blackholePairs {
		wg.Go(func() { peerBlackhole(t, srv, p, peer) })
	}
	wg.Wait()
	handoffbench.OverlapMarkdown(report, valid, ctxEnd, peer)
	fmt.Fprintln(report)
	if _, over := valid.Rounds(); over > 0 {
		t.Errorf("simba: %d blackhole rounds overlapped", over)
	}
}

// cutPause is the random pause before a cut.
func cutPause() time.Duration { return 200*time.Millisecond + rand.N(time.Second) }

// simbaBlackhole plays one pair's blackhole rounds between simba nodes.
func simbaBlackhole(t *testing.T, srv *etcdtest.Server, p int, valid, ctxEnd *handoffbench.Overlap) {
	log := newTermLog()
	prefix := fmt.Sprintf("/bench-blackhole-%d/", p)
	var nodes [2]*node
	var proxies [2]*faultproxy.Proxy
	for i := range nodes {
		proxies[i] = newProxy(t, srv.DirectEndpoints()[0])
		nodes[i] = newNode(t, fmt.Sprintf("p%d-%c", p, 'a'+i), []string{proxies[i].Addr()}, prefix, blackholeTTL)
	}
	defer func() {
		for _, px := range proxies {
			px.Heal()
		}
	}()
	for _, n := range nodes {
		n.awaitSession(t, opTimeout)
		if _, err := n.client.Election("blackhole").RunWhileLeader(log.task(n.name)); err != nil {
			t.Error(err)
			return
		}
	}
	index := map[string]int{nodes[0].name: 0, nodes[1].name: 1}
	holder := log.next(t, "", opTimeout)
	for round := range blackholePerPair {
		h := index[holder.node]
		time.Sleep(cutPause())
		cut := time.Now()
		proxies[h].Blackhole()
		next := log.next(t, nodes[1-h].name, 30*time.Second)
		if !waitFor(holder.ended, 30*time.Second) {
			t.Errorf("pair %d round %d: the cut holder's term %d was never revoked", p, round, holder.term.Token())
			return
		}
		valid.Add(cut, next.start, holder.term.Deadline())
		ctxEnd.Add(cut, next.start, holder.endedAt)
		proxies[h].Heal()
		nodes[h].awaitSession(t, opTimeout)
		holder = next
	}
	for _, n := range nodes {
		await.For(t, await.Returned(n.client.Close), closeWait, "node %s: Close did not return", n.name)
	}
	log.check(t)
}

// peerBlackhole plays one pair's blackhole rounds between
// concurrency.Election contenders.
func peerBlackhole(t *testing.T, srv *etcdtest.Server, p int, o *handoffbench.Overlap) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // the last waiter's Campaign
	prefix := fmt.Sprintf("/bench-peer-blackhole-%d/", p)
	var proxies [2]*faultproxy.Proxy
	var clients [2]*clientv3.Client
	type contender struct {
		session *concurrency.Session
		won     chan time.Time // the Campaign's return
		done    chan time.Time // the session's Done()
	}
	contend := func(i int) (*contender, error) {
		s, err := concurrency.NewSession(clients[i], concurrency.WithTTL(int(blackholeTTL/time.Second)))
		if err != nil {
			return nil, err
		}
		c := &contender{session: s, won: make(chan time.Time, 1), done: make(chan time.Time, 1)}
		go func() {
			<-s.Done()
			c.done <- time.Now()
		}()
		go func() {
			if err := concurrency.NewElection(s, prefix).Campaign(ctx, fmt.Sprint(i)); err != nil {
				if ctx.Err() == nil {
					t.Errorf("pair %d: Campaign: %v", p, err)
				}
				return
			}
			c.won <- time.Now()
		}()
		return c, nil
	}
	for i := range clients {
		proxies[i] = newProxy(t, srv.DirectEndpoints()[0])
		clients[i] = benchClient(t, at(srv, proxies[i].Addr()), nil)
	}
	defer func() {
		for _, px := range proxies {
			px.Heal()
		}
	}()
	var cs [2]*contender
	var err error
	if cs[0], err = contend(0); err != nil {
		t.Error(err)
		return
	}
	if _, err := await.Within(cs[0].won, opTimeout, "pair %d: no first leader", p); err != nil {
		t.Error(err)
		return
	}
	if cs[1], err = contend(1); err != nil {
		t.Error(err)
		return
	}
	h := 0
	for round := range blackholePerPair {
		time.Sleep(cutPause())
		cut := time.Now()
		proxies[h].Blackhole()
		won, err := await.Within(cs[1-h].won, 30*time.Second, "pair %d round %d: no take-over", p, round)
		if err != nil {
			t.Error(err)
			return
		}
		done, err := await.Within(cs[h].done, 30*time.Second, "pair %d round %d: the cut leader's session never ended", p, round)
		if err != nil {
			t.Error(err)
			return
		}
		o.Add(cut, won, done)
		proxies[h].Heal()
		cs[h].session.Close()
		if cs[h], err = contend(h); err != nil {
			t.Error(err)
			return
		}
		h = 1 - h
	}
	cancel()
	for _, c := range cs {
		c.session.Close()
	}
}

func benchTraffic(t *testing.T, srv *etcdtest.Server, report *strings.Builder) {
	fmt.Fprintf(report, "\n### Requests to etcd per second, steady state (TTL %v, over %v)\n\n", trafficTTL, trafficWindow)
	fmt.Fprintln(report, "Counted by a gRPC client interceptor: every unary call and every message sent on a stream.")
	fmt.Fprintln(report)
	fmt.Fprintln(report, "| client | requests/s | by method |")
	fmt.Fprintln(report, "|---|---|---|")
	for _, n := range []int{1, 100, 1000} {
		rate, by := simbaTraffic(t, srv, n)
		fmt.Fprintf(report, "| simba, one client, %d elections held | %.2f | %s |\n", n, rate, by)
	}
	rate, by := peerTraffic(t, srv, 1000, true)
	fmt.Fprintf(report, "| concurrency, 1,000 sessions, one election each | %.2f | %s |\n", rate, by)
	rate, by = peerTraffic(t, srv, 1000, false)
	fmt.Fprintf(report, "| concurrency, one session, 1,000 elections | %.2f | %s |\n", rate, by)
}

func machine() string {
	return fmt.Sprintf("GOMAXPROCS %d", runtimeGOMAXPROCS())
}

// at returns the configuration of a client of srv (etcdclient.Config: its
// TLS and credentials, if any) that reaches it at endpoints instead.
func at(srv *etcdtest.Server, endpoints ...string) clientv3.Config {
	cfg := etcdclient.Config(srv)
	cfg.Endpoints = endpoints
	return cfg
}

// direct returns the configuration of a client of srv that reaches the
// server itself, without the proxy in front of it.
func direct(srv *etcdtest.Server) clientv3.Config { return at(srv, srv.DirectEndpoints()...) }

// benchClient returns a quiet client made with cfg, closed when the test
// ends, with the dial options opts and interceptors counting requests into
// counter (if not nil).
func benchClient(t *testing.T, cfg clientv3.Config, counter *requestCounter, opts ...grpc.DialOption) *clientv3.Client {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cfg.DialOptions = append(slices.Clip(cfg.DialOptions), opts...)
	if counter != nil {
		cfg.DialOptions = append(cfg.DialOptions,
			grpc.WithChainUnaryInterceptor(counter.unary),
			grpc.WithChainStreamInterceptor(counter.stream),
		)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// requestCounter counts the requests a client sends, by method.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int64
	total  atomic.Int64
}

func newRequestCounter() *requestCounter { return &requestCounter{counts: map[string]int64{}} }

func (c *requestCounter) add(method string) {
	c.total.Add(1)
	c.mu.Lock()
	c.counts[method[strings.LastIndex(method, "/")+1:]]++
	c.mu.Unlock()
}

func (c *requestCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.add(method)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *requestCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countingStream{ClientStream: s, c: c, method: method}, nil
}

// reset zeroes the counts and returns the time.
func (c *requestCounter) reset() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.counts)
	c.total.Store(0)
	return time.Now()
}

// rate returns the requests per second since start, and a breakdown.
func (c *requestCounter) rate(start time.Time) (float64, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	secs := time.Since(start).Seconds()
	var parts []string
	for _, m := range slices.Sorted(maps.Keys(c.counts)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", m, float64(c.counts[m])/secs))
	}
	return float64(c.total.Load()) / secs, strings.Join(parts, ", ")
}

type countingStream struct {
	grpc.ClientStream
	c      *requestCounter
	method string
}

func (s *countingStream) SendMsg(m any) error {
	s.c.add(s.method)
	return s.ClientStream.SendMsg(m)
}

// simbaTraffic measures the steady-state requests of one simba client
// holding n elections.
func simbaTraffic(t *testing.T, srv *etcdtest.Server, n int) (float64, string) {
	counter := newRequestCounter()
	b, err := etcd.NewFromClient(benchClient(t, direct(srv), counter), etcd.WithPrefix(fmt.Sprintf("/bench-traffic-%d/", n)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := simba.New(b, simba.WithTTL(trafficTTL), simba.WithEventHandler(func(e simba.Event) {
		if e, ok := e.(simba.SessionLost); ok {
			t.Logf("traffic with %d elections: session %s lost: %v %v", n, e.Session, e.Reason, e.Err)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	running := make(chan struct{}, n)
	for i := range n {
		if _, err := c.Election(fmt.Sprintf("e%d", i)).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			running <- struct{}{}
			<-ctx.Done()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		<-running
	}
	time.Sleep(time.Second) // watches set up
	start := counter.reset()
	time.Sleep(trafficWindow)
	return counter.rate(start)
}

// peerTraffic measures the steady-state requests of one client with n
// concurrency elections held, on n sessions or on one.
func peerTraffic(t *testing.T, srv *etcdtest.Server, n int, sessionEach bool) (float64, string) {
	ctx := context.Background()
	counter := newRequestCounter()
	cli := benchClient(t, direct(srv), counter)
	var sessions []*concurrency.Session
	newSession := func() *concurrency.Session {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(trafficTTL/time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
		return s
	}
	shared := newSession()
	for i := range n {
		s := shared
		if sessionEach && i > 0 {
			s = newSession()
		}
		e := concurrency.NewElection(s, fmt.Sprintf("/bench-peer-traffic-%v/e%d/", sessionEach, i))
		if err := e.Campaign(ctx, "x"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	start := counter.reset()
	time.Sleep(trafficWindow)
	rate, by := counter.rate(start)
	for _, s := range sessions {
		s.Close()
	}
	return rate, by
}

func runtimeGOMAXPROCS() int { return runtime.GOMAXPROCS(0) }
