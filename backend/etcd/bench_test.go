package etcd_test

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
	"github.com/simba-go/simba/internal/etcdtest"
)

// benchEnv turns on TestBenchmarkReport, which measures simba on etcd side
// by side with etcd's own concurrency.Election on one embedded server and
// prints a Markdown report. It takes about five minutes; run it without the
// race detector:
//
//	SIMBA_ETCD_BENCH=1 go test -run '^TestBenchmarkReport$' -v -count=1 -timeout 20m ./backend/etcd/
//
// With SIMBA_ETCD_BENCH_OUT=file it also writes the report to file.
const benchEnv = "SIMBA_ETCD_BENCH"

// Parameters of the report.
const (
	handOffRounds  = 200
	handOffWarmup  = 20
	failoverPairs  = 10
	failoverTTL    = time.Second
	trafficTTL     = 3 * time.Second // both sides: renewals every second
	trafficWindow  = 9 * time.Second
	handOffSessTTL = 10 * time.Second
)

func TestBenchmarkReport(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skipf("set %s=1 to run the benchmarks", benchEnv)
	}
	srv := etcdtest.Start(t, etcdtest.WithFsync())
	var report strings.Builder
	fmt.Fprintf(&report, "Embedded etcd server (TickMs 10, ElectionMs 100, fsync on), loopback, in the test process, %s.\n\n", machine())

	if section("handoff") {
		benchHandOff(t, srv, &report)
	}
	if section("failover") {
		benchFailover(t, srv, &report)
	}
	if section("traffic") {
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
// environment variable is "1", "all", or a comma-separated list of
// sections (handoff, failover, traffic).
func section(name string) bool {
	v := os.Getenv(benchEnv)
	return v == "1" || v == "all" || slices.Contains(strings.Split(v, ","), name)
}

func benchHandOff(t *testing.T, srv *etcdtest.Server, report *strings.Builder) {
	fmt.Fprintf(report, "### Graceful hand-off (%d rounds after %d warm-up rounds)\n\n", handOffRounds, handOffWarmup)
	fmt.Fprintln(report, "simba: `LeaderTask.Stop()` on the holder → the next holder's task running. "+
		"Peer: `Election.Resign` → the waiting `Election.Campaign` returning. "+
		"Settle: pause between the waiter starting to wait and the hand-off. "+
		"Data directory on the machine's disk, and on tmpfs (/dev/shm), where fsync costs next to nothing.")
	fmt.Fprintln(report)
	fmt.Fprintln(report, "| data | side | settle | p50 | p90 | p99 | max |")
	fmt.Fprintln(report, "|---|---|---|---|---|---|---|")
	servers := []struct {
		name string
		srv  *etcdtest.Server
	}{{"disk", srv}}
	if dir, err := os.MkdirTemp("/dev/shm", "simba-etcd-bench-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(dir) })
		shm, err := etcdtest.New(dir, etcdtest.WithFsync())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { shm.Close() })
		servers = append(servers, struct {
			name string
			srv  *etcdtest.Server
		}{"tmpfs", shm})
	}
	for _, sv := range servers {
		for _, settle := range []time.Duration{20 * time.Millisecond, 150 * time.Millisecond} {
			s := simbaHandOff(t, sv.srv, settle, true)
			off := simbaHandOff(t, sv.srv, settle, false)
			p := peerHandOff(t, sv.srv, settle)
			fmt.Fprintf(report, "| %s | simba | %v | %s |\n", sv.name, settle, quantiles(s))
			fmt.Fprintf(report, "| %s | simba, status records off | %v | %s |\n", sv.name, settle, quantiles(off))
			fmt.Fprintf(report, "| %s | concurrency.Election | %v | %s |\n", sv.name, settle, quantiles(p))
		}
	}

}

func benchFailover(t *testing.T, srv *etcdtest.Server, report *strings.Builder) {
	fmt.Fprintf(report, "\n### Crash fail-over (TTL %v, %d pairs each)\n\n", failoverTTL, failoverPairs)
	fmt.Fprintln(report, "The holder's link is blackholed (the server stops hearing it, as after a crash); "+
		"time from the cut to the other node's task running (simba) or `Campaign` returning (peer). "+
		"The pairs are cut at random instants over one second, so that the phases of renewals and of etcd's expiry checks (every 500ms) vary.")
	fmt.Fprintln(report)
	fmt.Fprintln(report, "| side | min | p50 | max | bound TTL + 0.6s |")
	fmt.Fprintln(report, "|---|---|---|---|---|")
	for _, side := range []struct {
		name string
		run  func(*testing.T, *etcdtest.Server, int) time.Duration
	}{{"simba", simbaFailover}, {"concurrency.Election", peerFailover}} {
		ds := make([]time.Duration, failoverPairs)
		var wg sync.WaitGroup
		for i := range failoverPairs {
			wg.Go(func() { ds[i] = side.run(t, srv, i) })
		}
		wg.Wait()
		slices.Sort(ds)
		fmt.Fprintf(report, "| %s | %s | %s | %s | %v |\n", side.name, ms(ds[0]), ms(ds[len(ds)/2]), ms(ds[len(ds)-1]), failoverTTL+600*time.Millisecond)
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

// quantiles formats p50, p90, p99 and max of ds.
func quantiles(ds []time.Duration) string {
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return fmt.Sprintf("%s | %s | %s | %s", ms(q(0.5)), ms(q(0.9)), ms(q(0.99)), ms(ds[len(ds)-1]))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// benchClient returns a quiet client of endpoints, closed when the test ends,
// with interceptors counting requests into counter (if not nil).
func benchClient(t *testing.T, endpoints []string, counter *requestCounter, opts ...grpc.DialOption) *clientv3.Client {
	cfg := clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(), DialOptions: opts}
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

// simbaHandOff measures graceful hand-offs between two simba clients, with
// status records on (the default) or off.
func simbaHandOff(t *testing.T, srv *etcdtest.Server, settle time.Duration, status bool) []time.Duration {
	prefix := fmt.Sprintf("/bench-handoff-%v-%v/", settle, status)
	running := make(chan time.Time, 1)
	task := func(ctx context.Context, term *simba.Term) error {
		running <- time.Now()
		<-ctx.Done()
		return nil
	}
	var clients [2]*simba.Client
	for i := range clients {
		b, err := etcd.NewFromClient(benchClient(t, srv.DirectEndpoints(), nil), etcd.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		c, err := simba.New(b, simba.WithTTL(handOffSessTTL), simba.WithStatus(status))
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
		defer b.Close()
		defer c.Close()
	}
	var tasks [2]*simba.LeaderTask
	start := func(i int) {
		var err error
		if tasks[i], err = clients[i].Election("handoff").RunWhileLeader(task); err != nil {
			t.Fatal(err)
		}
	}
	start(0)
	<-running
	start(1)
	var out []time.Duration
	holder := 0
	for round := range handOffRounds + handOffWarmup {
		time.Sleep(settle)
		t0 := time.Now()
		done := tasks[holder].Stop()
		t1 := <-running
		<-done
		if round >= handOffWarmup {
			out = append(out, t1.Sub(t0))
		}
		start(holder)
		holder = 1 - holder
	}
	return out
}

// peerHandOff measures Resign → Campaign between two concurrency.Election
// clients.
func peerHandOff(t *testing.T, srv *etcdtest.Server, settle time.Duration) []time.Duration {
	ctx := context.Background()
	prefix := fmt.Sprintf("/bench-peer-handoff-%v/", settle)
	var elections [2]*concurrency.Election
	for i := range elections {
		s, err := concurrency.NewSession(benchClient(t, srv.DirectEndpoints(), nil), concurrency.WithTTL(int(handOffSessTTL/time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		elections[i] = concurrency.NewElection(s, prefix)
	}
	campaign := func(i int) <-chan time.Time {
		ch := make(chan time.Time, 1)
		go func() {
			if err := elections[i].Campaign(ctx, fmt.Sprint(i)); err != nil {
				t.Error(err)
			}
			ch <- time.Now()
		}()
		return ch
	}
	<-campaign(0)
	pending := campaign(1)
	var out []time.Duration
	holder := 0
	for round := range handOffRounds + handOffWarmup {
		time.Sleep(settle)
		t0 := time.Now()
		if err := elections[holder].Resign(ctx); err != nil {
			t.Fatal(err)
		}
		t1 := <-pending
		if round >= handOffWarmup {
			out = append(out, t1.Sub(t0))
		}
		pending = campaign(holder)
		holder = 1 - holder
	}
	if err := elections[holder].Resign(ctx); err != nil {
		t.Error(err)
	}
	<-pending
	return out
}

// simbaFailover measures one crash fail-over between two simba clients.
func simbaFailover(t *testing.T, srv *etcdtest.Server, i int) time.Duration {
	prefix := fmt.Sprintf("/bench-failover-%d/", i)
	px := newProxy(t, srv.DirectEndpoints()[0])
	running := make(chan time.Time, 2)
	task := func(ctx context.Context, term *simba.Term) error {
		running <- time.Now()
		<-term.Revoked()
		return nil
	}
	var nodes [2]*node
	for k, ep := range []string{px.Addr(), srv.DirectEndpoints()[0]} {
		nodes[k] = newNode(t, fmt.Sprint(k), []string{ep}, prefix, failoverTTL)
		nodes[k].awaitSession(t, opTimeout)
		if _, err := nodes[k].client.Election("failover").RunWhileLeader(task); err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			<-running
		}
	}
	time.Sleep(200*time.Millisecond + rand.N(time.Second))
	t0 := time.Now()
	px.Blackhole()
	t1 := <-running
	px.Heal()
	for _, n := range nodes {
		n.client.Close()
	}
	return t1.Sub(t0)
}

// peerFailover measures one crash fail-over between two
// concurrency.Election clients.
func peerFailover(t *testing.T, srv *etcdtest.Server, i int) time.Duration {
	ctx := context.Background()
	prefix := fmt.Sprintf("/bench-peer-failover-%d/", i)
	px := newProxy(t, srv.DirectEndpoints()[0])
	var sessions [2]*concurrency.Session
	var elections [2]*concurrency.Election
	for k, ep := range []string{px.Addr(), srv.DirectEndpoints()[0]} {
		s, err := concurrency.NewSession(benchClient(t, []string{ep}, nil), concurrency.WithTTL(int(failoverTTL/time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		sessions[k] = s
		elections[k] = concurrency.NewElection(s, prefix)
	}
	if err := elections[0].Campaign(ctx, "0"); err != nil {
		t.Fatal(err)
	}
	won := make(chan time.Time, 1)
	go func() {
		if err := elections[1].Campaign(ctx, "1"); err != nil {
			t.Error(err)
		}
		won <- time.Now()
	}()
	time.Sleep(200*time.Millisecond + rand.N(time.Second))
	t0 := time.Now()
	px.Blackhole()
	t1 := <-won
	px.Heal()
	for _, s := range sessions {
		s.Close()
	}
	return t1.Sub(t0)
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
	b, err := etcd.NewFromClient(benchClient(t, srv.DirectEndpoints(), counter), etcd.WithPrefix(fmt.Sprintf("/bench-traffic-%d/", n)))
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
	cli := benchClient(t, srv.DirectEndpoints(), counter)
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
