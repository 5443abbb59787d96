// Command scale measures what simba costs per held lease and how its backend
// traffic grows: one client holding 1 to 10,000 elections or partitions on
// the memory backend, etcd, ZooKeeper or PostgreSQL (requests per second at
// rest, heap
// and goroutines per lease, CPU at rest per 1,000 leases); a group of many
// partitions over several clients on etcd (time to converge from a cold
// start, after a join and after a graceful leave, requests during the
// rebalance); and, for comparison, the same number of etcd
// concurrency.Elections with their own sessions.
//
//	go run ./bench/scale -backend memory
//	go run ./bench/scale -backend etcd -peer               # starts its own etcd in a child process
//	go run ./bench/scale -backend zk -zk 127.0.0.1:2181
//	go run ./bench/scale -backend postgres -pg postgres://postgres@127.0.0.1:5432/postgres  # a fresh schema per run
//	go run ./bench/scale -backend mysql -mysql 'simba:simba@tcp(127.0.0.1:3306)/simba'      # a fresh database per run (mysql.go)
//	go run ./bench/scale -backend etcd -group -partitions 10000 -clients 10
//
// The etcd server runs in a child process so that its memory and CPU are not
// counted as the client's.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/simba-go/simba/internal/assign"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/etcdtest"
)

const serveEnv = "SIMBA_SCALE_SERVE_ETCD"

type config struct {
	backend    string
	leases     []int
	kind       string
	rest       time.Duration
	ttl        time.Duration
	etcdEPs    []string
	zkServers  []string
	pgDSN      string
	peer       bool
	group      bool
	partitions int
	clients    int
	limit      float64
	status     bool
	memprofile string
	timeout    time.Duration
	breakdown  bool
	initial    time.Duration
}

func main() {
	if dir := os.Getenv(serveEnv); dir != "" {
		serveEtcd(dir)
		return
	}
	var cfg config
	var leases, eps, zks string
	flag.StringVar(&cfg.backend, "backend", "memory", "memory, etcd, zk, postgres or mysql")
	flag.StringVar(&leases, "leases", "1,100,1000,10000", "numbers of held leases to measure")
	flag.StringVar(&cfg.kind, "kind", "elections", "elections or partitions (one group with that many partitions)")
	flag.DurationVar(&cfg.rest, "rest", 10*time.Second, "measurement window at rest")
	flag.DurationVar(&cfg.ttl, "ttl", 3*time.Second, "session TTL")
	flag.StringVar(&eps, "etcd", "", "etcd endpoints (default: start one in a child process)")
	flag.StringVar(&zks, "zk", os.Getenv("SIMBA_ZK_ADDR"), "ZooKeeper servers")
	flag.StringVar(&cfg.pgDSN, "pg", os.Getenv("SIMBA_PG_DSN"), "PostgreSQL DSN (a fresh schema per run, dropped at the end)")
	flag.BoolVar(&cfg.peer, "peer", false, "with -backend etcd: also measure concurrency.Elections with their own sessions")
	flag.BoolVar(&cfg.group, "group", false, "measure a group's convergence instead (etcd or memory)")
	flag.IntVar(&cfg.partitions, "partitions", 10000, "with -group: partitions")
	flag.IntVar(&cfg.clients, "clients", 10, "with -group: clients")
	flag.StringVar(&cfg.memprofile, "memprofile", "", "write a heap profile of the client holding n leases to `file`.<backend>.<n>, and its goroutines to that name + .goroutines")
	flag.BoolVar(&cfg.status, "status", true, "status records on (the default of simba.WithStatus)")
	flag.Float64Var(&cfg.limit, "handoff-limit", 0, "with -group: hand-offs per second per member (0: no limit)")
	flag.DurationVar(&cfg.timeout, "timeout", 5*time.Minute, "with -group: how long each step may take to converge")
	flag.DurationVar(&cfg.initial, "initial-delay", 0, "with -group: the members' initial rebalance delay (simba.WithInitialRebalanceDelay)")
	flag.BoolVar(&cfg.breakdown, "breakdown", false, "with -group on etcd or postgres: print each step's requests by kind (method and key, or statement and table) to stderr; with postgres, also the requests at rest of each size")
	flag.Parse()
	for _, f := range strings.Split(leases, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fail(fmt.Errorf("bad -leases entry %q", f))
		}
		cfg.leases = append(cfg.leases, n)
	}
	if eps != "" {
		cfg.etcdEPs = strings.Split(eps, ",")
	}
	if zks != "" {
		cfg.zkServers = strings.Split(zks, ",")
	}
	if cfg.backend == "etcd" && cfg.etcdEPs == nil {
		ep, stop, err := startEtcd()
		if err != nil {
			fail(err)
		}
		defer stop()
		cfg.etcdEPs = []string{ep}
	}
	var err error
	if cfg.group {
		err = measureGroup(cfg)
	} else {
		err = measureHeld(cfg)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "scale:", err)
	os.Exit(1)
}

// counter counts requests sent to the backend, and with -breakdown, etcd
// requests by kind.
type counter struct {
	n      atomic.Int64
	prefix string // of the etcd keys; "" when not broken down
	mu     sync.Mutex
	kinds  map[string]int64
}

// classify counts an etcd request by its method and the first key it
// names, cut to the key's kind (lease, session, group, rec/status, …).
func (cnt *counter) classify(method string, req any) {
	if cnt.prefix == "" {
		return
	}
	kind := method[strings.LastIndex(method, "/")+1:]
	var key []byte
	switch r := req.(type) {
	case *etcdserverpb.RangeRequest:
		key = r.Key
	case *etcdserverpb.PutRequest:
		key = r.Key
	case *etcdserverpb.DeleteRangeRequest:
		key = r.Key
	case *etcdserverpb.TxnRequest:
		var op string
		op, key = firstWrite(r)
		kind += " " + op
	}
	if k, ok := strings.CutPrefix(string(key), cnt.prefix); ok {
		parts := strings.SplitN(k, "/", 3)
		if parts[0] == "rec" && len(parts) > 1 {
			parts[0] += "/" + parts[1]
		}
		kind += " " + parts[0]
	}
	cnt.mu.Lock()
	cnt.kinds[kind]++
	cnt.mu.Unlock()
}

// firstWrite returns the first write of a transaction's success branch
// (looking into nested transactions): "put" or "delete", and its key.
func firstWrite(r *etcdserverpb.TxnRequest) (string, []byte) {
	for _, op := range r.Success {
		switch {
		case op.GetRequestPut() != nil:
			return "put", op.GetRequestPut().Key
		case op.GetRequestDeleteRange() != nil:
			return "delete", op.GetRequestDeleteRange().Key
		case op.GetRequestTxn() != nil:
			if w, key := firstWrite(op.GetRequestTxn()); key != nil {
				return w, key
			}
		}
	}
	return "read", nil
}

// breakdown returns the counts by kind since the last call, largest first.
func (cnt *counter) breakdown() string {
	cnt.mu.Lock()
	kinds := cnt.kinds
	cnt.kinds = map[string]int64{}
	cnt.mu.Unlock()
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return kinds[names[i]] > kinds[names[j]] })
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, " %s=%d", k, kinds[k])
	}
	return b.String()
}

// dialOptions make an etcd client count its unary calls and the messages
// it sends on streams (a keep-alive is one).
func (cnt *counter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			cnt.n.Add(1)
			cnt.classify(method, req)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &countedStream{ClientStream: s, cnt: cnt}, nil
		}),
	}
}

// newBackend returns a backend of cfg's kind whose requests are counted.
func newBackend(cfg config, cnt *counter) (backend.Backend, func(), error) {
	switch cfg.backend {
	case "memory":
		b := memory.New()
		return &memCounted{Backend: b}, func() { b.Close() }, nil
	case "etcd":
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   cfg.etcdEPs,
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
			DialOptions: cnt.dialOptions(),
		})
		if err != nil {
			return nil, nil, err
		}
		prefix := fmt.Sprintf("/scale/%d/", time.Now().UnixNano())
		if cfg.breakdown {
			cnt.prefix, cnt.kinds = prefix, map[string]int64{}
		}
		b, err := etcd.NewFromClient(cli, etcd.WithPrefix(prefix))
		if err != nil {
			cli.Close()
			return nil, nil, err
		}
		return b, func() { b.Close(); cli.Close() }, nil
	case "zk":
		if len(cfg.zkServers) == 0 {
			return nil, nil, errors.New("-backend zk needs -zk or SIMBA_ZK_ADDR")
		}
		b, err := zookeeper.New(cfg.zkServers,
			zookeeper.WithRoot(fmt.Sprintf("/scale%d", time.Now().UnixNano())),
			zookeeper.WithDialer(func(ctx context.Context, network, address string) (net.Conn, error) {
				var d net.Dialer
				c, err := d.DialContext(ctx, network, address)
				if err != nil {
					return nil, err
				}
				return &countedConn{Conn: c, cnt: cnt}, nil
			}))
		if err != nil {
			return nil, nil, err
		}
		return b, func() { b.Close() }, nil
	case "postgres":
		return newPostgres(cfg, cnt)
	case "mysql":
		return newMySQL(cfg, cnt)
	}
	return nil, nil, fmt.Errorf("unknown backend %q", cfg.backend)
}

// memCounted reads the memory backend's own request counts.
type memCounted struct{ *memory.Backend }

func memRequests(b backend.Backend) (int64, bool) {
	m, ok := b.(*memCounted)
	if !ok {
		return 0, false
	}
	s := m.Stats()
	return int64(s.Open + s.KeepAlive + s.Acquire + s.Release + s.Join + s.Leave + s.Members + s.WatchMembers + s.Close + s.HeldLeases + s.Records + s.WatchRecords), true
}

func requests(b backend.Backend, cnt *counter) int64 {
	if n, ok := memRequests(b); ok {
		return n
	}
	return cnt.n.Load()
}

type countedStream struct {
	grpc.ClientStream
	cnt *counter
}

func (s *countedStream) SendMsg(m any) error {
	s.cnt.n.Add(1)
	return s.ClientStream.SendMsg(m)
}

type countedConn struct {
	net.Conn
	cnt *counter
}

// Write counts one request per write: go-zookeeper writes each request
// packet in one call.
func (c *countedConn) Write(p []byte) (int, error) {
	c.cnt.n.Add(1)
	return c.Conn.Write(p)
}

// footprint is the process's memory and goroutines after a collection.
type footprint struct {
	heap, inuse, stack uint64 // live heap, heap spans in use, stacks
	goroutines         int
}

func measure() footprint {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return footprint{heap: m.HeapAlloc, inuse: m.HeapInuse, stack: m.StackInuse, goroutines: runtime.NumGoroutine()}
}

// writeHeapProfile writes a heap profile to file.
func writeHeapProfile(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	g, err := os.Create(file + ".goroutines")
	if err != nil {
		return err
	}
	if err := pprof.Lookup("goroutine").WriteTo(g, 1); err != nil {
		g.Close()
		return err
	}
	return g.Close()
}

// cpu returns the process's user+system CPU time.
func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureHeld measures one client holding each number of leases.
func measureHeld(cfg config) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "backend\tkind\tleases\trequests/s at rest\tlive heap/lease\theap in use/lease\tstack/lease\tgoroutines/lease\tCPU at rest per 1,000 leases\ttime to hold all\t\n")
	for _, n := range cfg.leases {
		row, err := held(cfg, n)
		if err != nil {
			return fmt.Errorf("%d leases: %w", n, err)
		}
		fmt.Fprintln(os.Stderr, "scale:", strings.ReplaceAll(row, "\t", " "))
		fmt.Fprintln(tw, row)
	}
	if cfg.peer && cfg.backend == "etcd" {
		for _, n := range cfg.leases {
			row, err := peerHeld(cfg, n)
			if err != nil {
				return fmt.Errorf("peer, %d elections: %w", n, err)
			}
			fmt.Fprintln(os.Stderr, "scale:", strings.ReplaceAll(row, "\t", " "))
			fmt.Fprintln(tw, row)
		}
	}
	return tw.Flush()
}

func held(cfg config, n int) (string, error) {
	cnt := &counter{}
	b, closeB, err := newBackend(cfg, cnt)
	if err != nil {
		return "", err
	}
	defer closeB()
	before := measure()
	var elected atomic.Int64
	all := make(chan struct{})
	opt := []simba.Option{simba.WithTTL(cfg.ttl), simba.WithStatus(cfg.status), simba.WithEventHandler(func(e simba.Event) {
		if _, ok := e.(simba.Elected); ok && elected.Add(1) == int64(n) {
			close(all)
		}
	})}
	if os.Getenv("SIMBA_SCALE_LOG") != "" {
		opt = append(opt, simba.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	}
	c, err := simba.New(b, opt...)
	if err != nil {
		return "", err
	}
	defer c.Close()
	start := time.Now()
	// The task returns at once: the term is kept until it ends, with no
	// work running.
	idle := func(context.Context, *simba.Term) error { return nil }
	if cfg.kind == "partitions" {
		_, err = c.Group("scale", n).RunWhileLeader(func(ctx context.Context, t *simba.Term, _ int) error { return idle(ctx, t) })
	} else {
		for i := range n {
			if _, err = c.Election(fmt.Sprintf("scale-%d", i)).RunWhileLeader(idle); err != nil {
				break
			}
		}
	}
	if err != nil {
		return "", err
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		return "", fmt.Errorf("only %d of %d held after 5 minutes", elected.Load(), n)
	}
	took := time.Since(start)
	time.Sleep(cfg.ttl) // settle
	if err := atRest(b, cnt, 1, 5*time.Minute); err != nil {
		return "", err
	}
	after := measure()
	if cfg.memprofile != "" {
		if err := writeHeapProfile(fmt.Sprintf("%s.%s.%d", cfg.memprofile, cfg.backend, n)); err != nil {
			return "", err
		}
	}
	if cfg.breakdown && cnt.kinds != nil {
		cnt.breakdown() // from here on
	}
	r0, cpu0, t0 := requests(b, cnt), cpu(), time.Now()
	time.Sleep(cfg.rest)
	r1, cpu1, t1 := requests(b, cnt), cpu(), time.Now()
	secs := t1.Sub(t0).Seconds()
	if cfg.breakdown && cnt.kinds != nil {
		fmt.Fprintf(os.Stderr, "scale: %d leases, requests at rest by kind:%s\n", n, cnt.breakdown())
	}
	return fmt.Sprintf("%s\t%s\t%d\t%.2f\t%s\t%s\t%s\t%.2f\t%.1f ms/s\t%v\t",
		cfg.backend, cfg.kind, n,
		float64(r1-r0)/secs,
		bytes(perLease(after.heap, before.heap, n)), bytes(perLease(after.inuse, before.inuse, n)), bytes(perLease(after.stack, before.stack, n)),
		float64(after.goroutines-before.goroutines)/float64(n),
		float64(cpu1-cpu0)/float64(time.Millisecond)/secs/(float64(n)/1000),
		took.Round(time.Millisecond)), nil
}

func perLease(after, before uint64, n int) float64 {
	if after < before {
		return 0
	}
	return float64(after-before) / float64(n)
}

func bytes(b float64) string {
	if b >= 1024 {
		return fmt.Sprintf("%.1f KiB", b/1024)
	}
	return fmt.Sprintf("%.0f B", b)
}

// peerHeld measures n concurrency.Elections, each with its own session, as
// users of etcd's concurrency package commonly write them.
func peerHeld(cfg config, n int) (string, error) {
	cnt := &counter{}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.etcdEPs,
		Logger:      zap.NewNop(),
		DialOptions: cnt.dialOptions(),
	})
	if err != nil {
		return "", err
	}
	defer cli.Close()
	before := measure()
	start := time.Now()
	prefix := fmt.Sprintf("/scale-peer/%d/", time.Now().UnixNano())
	sessions := make([]*concurrency.Session, 0, n)
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	ttl := int(cfg.ttl / time.Second)
	for i := range n {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(max(ttl, 1)))
		if err != nil {
			return "", err
		}
		sessions = append(sessions, s)
		e := concurrency.NewElection(s, fmt.Sprintf("%se%d", prefix, i))
		if err := e.Campaign(context.Background(), "x"); err != nil {
			return "", err
		}
	}
	took := time.Since(start)
	time.Sleep(cfg.ttl)
	after := measure()
	r0, cpu0, t0 := cnt.n.Load(), cpu(), time.Now()
	time.Sleep(cfg.rest)
	r1, cpu1, t1 := cnt.n.Load(), cpu(), time.Now()
	secs := t1.Sub(t0).Seconds()
	return fmt.Sprintf("%s\t%s\t%d\t%.2f\t%s\t%s\t%s\t%.2f\t%.1f ms/s\t%v\t",
		"etcd concurrency", "sessions", n,
		float64(r1-r0)/secs,
		bytes(perLease(after.heap, before.heap, n)), bytes(perLease(after.inuse, before.inuse, n)), bytes(perLease(after.stack, before.stack, n)),
		float64(after.goroutines-before.goroutines)/float64(n),
		float64(cpu1-cpu0)/float64(time.Millisecond)/secs/(float64(n)/1000),
		took.Round(time.Millisecond)), nil
}

// startEtcd runs an etcd server in a child process and returns its
// endpoint.
func startEtcd() (string, func(), error) {
	dir, err := os.MkdirTemp("", "simba-scale-etcd")
	if err != nil {
		return "", nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), serveEnv+"="+dir)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		return "", nil, fmt.Errorf("the etcd child did not start: %w", err)
	}
	stop := func() {
		in.Close()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	return strings.TrimSpace(line), stop, nil
}

// serveEtcd is the child process: it serves etcd until its stdin closes.
func serveEtcd(dir string) {
	s, err := etcdtest.New(dir)
	if err != nil {
		fail(err)
	}
	fmt.Println(s.Endpoints()[0])
	io.Copy(io.Discard, os.Stdin)
	s.Stop()
}

// measureGroup measures a group of cfg.partitions over cfg.clients clients:
// time to converge from a cold start, after a join and after a graceful
// leave, time until the backend traffic is back at rest (the status records
// of the terms started are written after they start), and the backend
// requests each step took until then.
func measureGroup(cfg config) error {
	cnt := &counter{}
	var clients []*groupMember
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "backend\tpartitions\tstep\tmembers\ttime to converge\ttime until at rest\tpartitions moved\tbackend requests\t\n")
	defer tw.Flush()
	b, closeB, err := newBackend(cfg, cnt)
	if err != nil {
		return err
	}
	defer closeB()
	defer func() { // before the backend
		for _, m := range clients {
			m.close()
		}
	}()
	var opts []simba.GroupOption
	if cfg.limit > 0 {
		opts = append(opts, simba.WithHandOffLimit(cfg.limit, int(cfg.limit)))
	}
	if cfg.initial > 0 {
		opts = append(opts, simba.WithInitialRebalanceDelay(cfg.initial))
	}
	add := func() error {
		m, err := newGroupMember(b, fmt.Sprintf("m%02d", len(clients)), cfg, opts)
		if err != nil {
			return err
		}
		clients = append(clients, m)
		return nil
	}
	var owners []string
	step := func(name string, change func() error) error {
		r0, t0 := requests(b, cnt), time.Now()
		if err := change(); err != nil {
			return err
		}
		now, err := converge(clients, cfg)
		if err != nil {
			return err
		}
		converged := time.Since(t0)
		if err := atRest(b, cnt, len(clients), cfg.timeout); err != nil {
			return err
		}
		n := cfg.partitions
		if owners != nil {
			n = moved(owners, now)
		}
		owners = now
		row := fmt.Sprintf("%s\t%d\t%s\t%d\t%v\t%v\t%d\t%d\t", cfg.backend, cfg.partitions, name, len(clients),
			converged.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), n, requests(b, cnt)-r0)
		fmt.Fprintln(os.Stderr, "scale:", strings.ReplaceAll(row, "\t", " "))
		if cfg.breakdown {
			fmt.Fprintf(os.Stderr, "scale: terms started: %d; requests by kind:%s\n", termsStarted.Swap(0), cnt.breakdown())
		}
		fmt.Fprintln(tw, row)
		return nil
	}

	if err := step("cold start", func() error {
		for range cfg.clients {
			if err := add(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := step("join", add); err != nil {
		return err
	}
	return step("graceful leave", func() error {
		leaving := clients[0]
		clients = clients[1:]
		leaving.close()
		return nil
	})
}

// restPerClient is the rate under which a client's backend requests are
// at rest (see atRest); a backend whose watches poll sets its own
// (mysql.go).
var restPerClient = 5

// atRest waits until the clients' backend requests are back at rest: fewer
// than restPerClient a second per client over a second (at rest a client
// sends about 2.5: a keep-alive, a read of its groups' members and, every
// other renewal period, a read of their held leases). The status records
// of the terms just started are written after they start, and their
// backlog can take seconds to drain.
func atRest(b backend.Backend, cnt *counter, clients int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := requests(b, cnt)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		n := requests(b, cnt)
		if n-last < int64(restPerClient*clients) {
			return nil
		}
		last = n
	}
	return fmt.Errorf("the backend traffic did not come back to rest in %v", timeout)
}

func moved(a, b []string) int {
	n := 0
	for p := range a {
		if a[p] != b[p] {
			n++
		}
	}
	return n
}

// groupMember is one client of the group, tracking the partitions it holds
// from its events.
type groupMember struct {
	id     string
	client *simba.Client
	task   *simba.GroupTask
	mu     sync.Mutex
	holds  map[int]bool
	closed bool
}

func newGroupMember(b backend.Backend, id string, cfg config, opts []simba.GroupOption) (*groupMember, error) {
	m := &groupMember{id: id, holds: map[int]bool{}}
	opt := []simba.Option{simba.WithTTL(cfg.ttl), simba.WithMemberID(id), simba.WithStatus(cfg.status), simba.WithEventHandler(m.event)}
	if os.Getenv("SIMBA_SCALE_LOG") != "" {
		opt = append(opt, simba.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("member", id)))
	}
	c, err := simba.New(b, opt...)
	if err != nil {
		return nil, err
	}
	m.client = c
	m.task, err = c.Group("scale", cfg.partitions, opts...).RunWhileLeader(func(context.Context, *simba.Term, int) error { return nil })
	return m, err
}

func (m *groupMember) event(e simba.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch e := e.(type) {
	case simba.Elected:
		m.holds[e.Partition] = true
		termsStarted.Add(1)
	case simba.Revoked:
		delete(m.holds, e.Partition)
	}
}

// termsStarted counts the Elected events of all members (for -breakdown).
var termsStarted atomic.Int64

func (m *groupMember) close() {
	m.mu.Lock()
	closed := m.closed
	m.closed = true
	m.mu.Unlock()
	if !closed {
		m.client.Close()
	}
}

// converge waits until every partition is held by its assigned owner among
// the members, and returns the owners.
func converge(ms []*groupMember, cfg config) ([]string, error) {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.id
	}
	want := assign.Owners("scale", ids, cfg.partitions, assign.Rendezvous)
	deadline := time.Now().Add(cfg.timeout)
	for time.Now().Before(deadline) {
		ok := true
		for _, m := range ms {
			m.mu.Lock()
			for p, owner := range want {
				if (owner == m.id) != m.holds[p] {
					ok = false
					break
				}
			}
			m.mu.Unlock()
			if !ok {
				break
			}
		}
		if ok {
			return want, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	diagnose(ms, want)
	return nil, fmt.Errorf("the group did not converge in %v", cfg.timeout)
}

// diagnose prints, for the partitions not held by their owners, who holds
// them by the events and who contends for them, and dumps the goroutines.
func diagnose(ms []*groupMember, want []string) {
	contends := map[string]map[int]bool{}
	for _, m := range ms {
		set := map[int]bool{}
		for _, p := range m.task.Partitions() {
			set[p] = true
		}
		contends[m.id] = set
	}
	bad := 0
	for p, owner := range want {
		var holders, contenders []string
		for _, m := range ms {
			m.mu.Lock()
			if m.holds[p] {
				holders = append(holders, m.id)
			}
			m.mu.Unlock()
			if contends[m.id][p] {
				contenders = append(contenders, m.id)
			}
		}
		if len(holders) == 1 && holders[0] == owner {
			continue
		}
		if bad++; bad <= 20 {
			fmt.Fprintf(os.Stderr, "scale: partition %d: owner %s, held by %v, contended for by %v\n", p, owner, holders, contenders)
		}
	}
	fmt.Fprintf(os.Stderr, "scale: %d partitions not held by their owner alone\n", bad)
	if f, err := os.Create("scale-stuck.goroutines"); err == nil {
		pprof.Lookup("goroutine").WriteTo(f, 1)
		f.Close()
		fmt.Fprintln(os.Stderr, "scale: goroutines in scale-stuck.goroutines")
	}
}
