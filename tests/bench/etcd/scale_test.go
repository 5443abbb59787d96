package etcdbench_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/etcdtest"
)

// scaleEnv turns on TestScale, which measures what held leases cost one
// simba client on etcd: goroutines and heap per held lease, requests per
// second and CPU at rest. The server runs in a child process (this test
// binary, as TestScaleServer), so that the client's figures are its own.
// Run it without the race detector:
//
//	cd tests && SIMBA_ETCD_SCALE=1 go test -run '^TestScale$' -v -count=1 -timeout 30m ./bench/etcd/
//
// SIMBA_ETCD_SCALE_SIZES=1,100,1000,10000 (the default) sets the numbers of
// leases, SIMBA_ETCD_SCALE_TTL=3s (the default) the session TTL;
// SIMBA_ETCD_SCALE_STATUS=off turns simba's status records off;
// SIMBA_ETCD_SCALE_OUT=file also writes the table to file.
const scaleEnv = "SIMBA_ETCD_SCALE"

// scaleServerEnv makes TestScaleServer run an etcd server with its data in
// the directory given, until its standard input ends.
const scaleServerEnv = "SIMBA_ETCD_SCALE_SERVER"

var scaleTTL = 3 * time.Second // renewals every TTL/3

const (
	scaleWindow = 9 * time.Second // at rest, measured
	scaleSettle = 2 * time.Second // after the last term started
)

// TestScaleServer is the child process of TestScale: an embedded etcd
// server (fsync off, like the tests'), its direct endpoint printed on
// standard output.
func TestScaleServer(t *testing.T) {
	dir := os.Getenv(scaleServerEnv)
	if dir == "" {
		t.Skip("the server process of TestScale")
	}
	srv, err := etcdtest.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ENDPOINT %s\n", srv.DirectEndpoints()[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := srv.Close(); err != nil {
		t.Error(err)
	}
}

// scaleServer is the child process running the server.
type scaleServer struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	endpoint string
}

func startScaleServer(t *testing.T) *scaleServer {
	cmd := exec.Command(os.Args[0], "-test.run=^TestScaleServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), scaleServerEnv+"="+t.TempDir(), scaleEnv+"=")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &scaleServer{cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if ep, ok := strings.CutPrefix(sc.Text(), "ENDPOINT "); ok {
			s.endpoint = ep
			break
		}
	}
	if s.endpoint == "" {
		t.Fatalf("the server process printed no endpoint: %v", sc.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return s
}

// cpu returns the server process's CPU time so far.
func (s *scaleServer) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100
}

// rss returns the server process's resident set size in bytes.
func (s *scaleServer) rss() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// selfCPU returns this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// settledHeap returns the live heap after two collections, and the number
// of goroutines.
func settledHeap() (heap uint64, goroutines int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, runtime.NumGoroutine()
}

// scaleRow is one measurement.
type scaleRow struct {
	kind            string
	n               int
	acquire         time.Duration // from the first start to the last term running
	goroutines      float64       // per held lease
	heap            float64       // bytes per held lease
	rate            float64       // requests per second at rest
	by              string
	cpu, serverCPU  time.Duration // per second at rest
	serverRSS       float64       // bytes per held lease, server side
	closeTime       time.Duration
	slowestRenewal  time.Duration // while acquiring
	goroutinesTotal int
}

func TestScale(t *testing.T) {
	if os.Getenv(scaleEnv) == "" {
		t.Skipf("set %s=1 to measure", scaleEnv)
	}
	sizes := []int{1, 100, 1000, 10000}
	if v := os.Getenv(scaleEnv + "_SIZES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				t.Fatalf("%s_SIZES: bad size %q", scaleEnv, f)
			}
			sizes = append(sizes, n)
		}
	}
	if v := os.Getenv(scaleEnv + "_TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			t.Fatalf("%s_TTL: bad TTL %q", scaleEnv, v)
		}
		scaleTTL = d
	}
	srv := startScaleServer(t)
	var rows []scaleRow
	for _, kind := range []string{"elections", "group"} {
		for _, n := range sizes {
			r := measureScale(t, srv, kind, n)
			t.Logf("%s %d: %+v", kind, n, r)
			rows = append(rows, r)
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "One simba client (TTL %v, status records %s) on an etcd server in another process (fsync off, loopback), %s.\n\n",
		scaleTTL, map[bool]string{true: "on", false: "off"}[os.Getenv(scaleEnv+"_STATUS") != "off"], machine())
	fmt.Fprintln(&out, "| held | leases | to acquire all | slowest renewal meanwhile | goroutines / lease | heap / lease | requests/s at rest | client CPU at rest | server CPU at rest | server RSS / lease | Close |")
	fmt.Fprintln(&out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(&out, "| %s | %d | %v | %v | %.2f | %.1f KiB | %.2f (%s) | %.2f ms/s | %.2f ms/s | %.1f KiB | %v |\n",
			r.kind, r.n, r.acquire.Round(time.Millisecond), r.slowestRenewal.Round(time.Millisecond), r.goroutines, r.heap/1024, r.rate, r.by,
			float64(r.cpu)/float64(time.Millisecond), float64(r.serverCPU)/float64(time.Millisecond),
			r.serverRSS/1024, r.closeTime.Round(time.Millisecond))
	}
	t.Logf("report:\n\n%s", out.String())
	if path := os.Getenv(scaleEnv + "_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// measureScale holds n leases on one client, as n elections or as one
// group of n partitions, and measures.
func measureScale(t *testing.T, srv *scaleServer, kind string, n int) scaleRow {
	row := scaleRow{kind: kind, n: n}
	counter := newRequestCounter()
	renewals := &renewalTimer{}
	cli := benchClient(t, clientv3.Config{Endpoints: []string{srv.endpoint}}, counter, grpc.WithChainStreamInterceptor(renewals.stream))
	b, err := etcd.NewFromClient(cli, etcd.WithPrefix(fmt.Sprintf("/scale-%s-%d/", kind, n)))
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	c, err := simba.New(b, simba.WithTTL(scaleTTL), simba.WithStatus(os.Getenv(scaleEnv+"_STATUS") != "off"), simba.WithEventHandler(func(e simba.Event) {
		if e, ok := e.(simba.SessionLost); ok {
			t.Errorf("%s %d: session %s lost %v after the client started: %v %v", kind, n, e.Session, time.Since(created).Round(time.Millisecond), e.Reason, e.Err)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(scaleSettle)
	heap0, g0 := settledHeap()
	rss0 := srv.rss()

	var running atomic.Int64
	all := make(chan struct{})
	hold := func(ctx context.Context) error {
		if running.Add(1) == int64(n) {
			close(all)
		}
		<-ctx.Done()
		return nil
	}
	start := time.Now()
	renewals.reset()
	switch kind {
	case "elections":
		for i := range n {
			if _, err := c.Election(fmt.Sprintf("e%d", i)).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
				return hold(ctx)
			}); err != nil {
				t.Fatal(err)
			}
		}
	case "group":
		if _, err := c.Group("g", n).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
			return hold(ctx)
		}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		t.Fatalf("%s %d: only %d running after 10 minutes", kind, n, running.Load())
	}
	row.acquire = time.Since(start)
	row.slowestRenewal = renewals.reset()
	time.Sleep(scaleSettle) // status records written, watches set up
	heap1, g1 := settledHeap()
	row.goroutinesTotal = g1
	row.goroutines = float64(g1-g0) / float64(n)
	row.heap = float64(int64(heap1)-int64(heap0)) / float64(n)
	row.serverRSS = float64(srv.rss()-rss0) / float64(n)

	cpu0, scpu0 := selfCPU(), srv.cpu()
	t0 := counter.reset()
	time.Sleep(scaleWindow)
	row.rate, row.by = counter.rate(t0)
	secs := time.Since(t0).Seconds()
	row.cpu = time.Duration(float64(selfCPU()-cpu0) / secs)
	row.serverCPU = time.Duration(float64(srv.cpu()-scpu0) / secs)
	if got := running.Load(); got != int64(n) {
		t.Errorf("%s %d: %d terms started, want %d (a term was lost at rest)", kind, n, got, n)
	}

	t1 := time.Now()
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	row.closeTime = time.Since(t1)
	if err := b.Close(); err != nil {
		t.Error(err)
	}
	return row
}

// renewalTimer measures the keep-alives of a client: from the opening of
// each LeaseKeepAlive stream (KeepAliveOnce opens one per call) to its
// first answer.
type renewalTimer struct {
	mu      sync.Mutex
	slowest time.Duration
}

// reset returns the slowest renewal since the last reset.
func (r *renewalTimer) reset() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.slowest
	r.slowest = 0
	return d
}

func (r *renewalTimer) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") {
		return s, err
	}
	return &timedStream{ClientStream: s, r: r, start: time.Now()}, nil
}

type timedStream struct {
	grpc.ClientStream
	r     *renewalTimer
	start time.Time
	once  sync.Once
}

func (s *timedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.once.Do(func() {
		d := time.Since(s.start)
		s.r.mu.Lock()
		s.r.slowest = max(s.r.slowest, d)
		s.r.mu.Unlock()
	})
	return err
}

// TestScaleWaiting measures what waiting candidacies cost (with
// SIMBA_ETCD_SCALE=1, run as TestScale is, -run '^TestScaleWaiting$'): one
// session holds n leases, another session's n Acquires queue behind them;
// then the holder's session is revoked, which deletes its n keys in one
// revision, and the waiters take over on the watch's events alone.
func TestScaleWaiting(t *testing.T) {
	if os.Getenv(scaleEnv) == "" {
		t.Skipf("set %s=1 to measure", scaleEnv)
	}
	n := 10000
	if v := os.Getenv(scaleEnv + "_SIZES"); v != "" {
		f := strings.Split(v, ",")
		var err error
		if n, err = strconv.Atoi(strings.TrimSpace(f[len(f)-1])); err != nil || n <= 0 {
			t.Fatalf("%s_SIZES: bad size %q", scaleEnv, v)
		}
	}
	srv := startScaleServer(t)
	prefix := fmt.Sprintf("/scale-waiting-%d/", n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	openOn := func(counter *requestCounter) backend.Session {
		b, err := etcd.NewFromClient(benchClient(t, clientv3.Config{Endpoints: []string{srv.endpoint}}, counter), etcd.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		s, err := b.Open(ctx, backend.SessionOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	holder := openOn(newRequestCounter())
	counter := newRequestCounter()
	waiter := openOn(counter)
	acquireAll := func(s backend.Session) []backend.Lease {
		out := make([]backend.Lease, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				l, err := s.Acquire(ctx, fmt.Sprintf("p%d", i))
				if err != nil {
					t.Error(err)
				}
				out[i] = l
			})
		}
		wg.Wait()
		return out
	}
	acquireAll(holder)
	if t.Failed() {
		t.FailNow()
	}
	heap0, g0 := settledHeap()
	rss0 := srv.rss()
	done := make(chan []backend.Lease, 1)
	go func() { done <- acquireAll(waiter) }()
	// Queued: 2n candidacy keys.
	reader := benchClient(t, clientv3.Config{Endpoints: []string{srv.endpoint}}, newRequestCounter())
	count := func() int64 {
		resp, err := reader.Get(ctx, prefix+"lease/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	for count() < int64(2*n) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(scaleSettle)
	heap1, g1 := settledHeap()
	rss1 := srv.rss()
	t0 := counter.reset()
	time.Sleep(scaleWindow)
	restRate, restBy := counter.rate(t0)

	counter.reset()
	start := time.Now()
	if err := holder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	leases := <-done
	handOff := time.Since(start)
	sent := counter.total.Load()
	for _, l := range leases {
		if l == nil {
			t.FailNow()
		}
	}
	t.Logf("report:\n\n%d waiting candidacies (%d keys under lease/ with the holdings), %s:\n"+
		"- client heap / waiting Acquire: %.1f KiB, goroutines / waiting Acquire: %.2f (the caller's own included)\n"+
		"- server RSS / waiting candidacy: %.1f KiB\n"+
		"- waiter's requests/s while waiting: %.2f (%s)\n"+
		"- hand-off of all %d on the holder's revocation: %v, requests the waiter sent meanwhile: %d\n",
		n, 2*n, machine(),
		float64(int64(heap1)-int64(heap0))/float64(n)/1024, float64(g1-g0)/float64(n),
		float64(rss1-rss0)/float64(n)/1024,
		restRate, restBy,
		n, handOff.Round(time.Millisecond), sent)
}
