package kubernetesbench_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/kubetest"
	"github.com/simba-go/simba/internal/termlog"
	"github.com/simba-go/simba/tests/internal/handoffbench"
	"github.com/simba-go/simba/tests/internal/kubepeers"
)

// kubeBenchEnv turns on TestBenchmarkReport, which measures simba on the
// Kubernetes API side by side with client-go's leaderelection on a
// LeaseLock (tests/internal/kubepeers), on one kube-apiserver, and prints a
// Markdown report: the graceful hand-off, the fail-over and overlap when the
// holder crashes (as the server sees it) and when its link is cut, and the
// API requests per second at rest for 1, 100 and 1,000 elections on one
// client. It takes about fifteen minutes. Run it without the race
// detector, with a kube-apiserver:
//
//	cd tests && ../scripts/with-kube-apiserver.sh env SIMBA_KUBE_BENCH=1 \
//		go test -run '^TestBenchmarkReport$' -v -count=1 -timeout 60m ./bench/kubernetes/
//
// SIMBA_KUBE_BENCH=1 (or all) runs every section; or name them,
// comma-separated: handoff, crash, cut, rest. With SIMBA_KUBE_BENCH_OUT=file
// it also writes the report to file; SIMBA_BENCH_ROUNDS=n shortens the
// hand-off rounds, SIMBA_KUBE_BENCH_SIZES=1,100 the sizes at rest.
const kubeBenchEnv = "SIMBA_KUBE_BENCH"

// Parameters of the report. The hand-off and fault sections use
// client-go's defaults for its core components (LeaseDuration 15 s,
// RenewDeadline 10 s, RetryPeriod 2 s) divided by 7.5, so that a fail-over
// lasts about two seconds, and simba's TTL is the LeaseDuration. The
// section at rest uses the defaults themselves, simba's TTL 15 s.
const (
	benchLeaseDuration = 2 * time.Second
	benchRenewDeadline = 4 * time.Second / 3  // 1.33 s
	benchRetryPeriod   = 4 * time.Second / 15 // 267 ms

	restLeaseDuration = 15 * time.Second
	restRenewDeadline = 10 * time.Second
	restRetryPeriod   = 2 * time.Second

	benchHandOffRounds = 200
	benchHandOffWarmup = 20

	benchPairs   = 5
	benchPerPair = 6 // rounds: 30 per side and fault

	// benchWait bounds each wait of a round for an answer or a term.
	benchWait = 20 * time.Second
	// benchSurvived bounds the wait for a new leader in a fault round.
	benchSurvived = 10 * time.Second

	// restSettle is the pause between every election leading and the
	// window of the count, restWindow the window.
	restSettle = 5 * time.Second // SIMBA_KUBE_BENCH_SETTLE=30s changes it
	restWindow = 30 * time.Second
	// restSetup bounds the wait for every election to lead.
	restSetup = 5 * time.Minute
)

var benchSettles = []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 150 * time.Millisecond}

func TestBenchmarkReport(t *testing.T) {
	if os.Getenv(kubeBenchEnv) == "" {
		t.Skipf("set %s=1 to run the benchmarks", kubeBenchEnv)
	}
	srv := kubetest.Start(t)
	admin, err := k8s.NewForConfig(srv.Admin())
	if err != nil {
		t.Fatal(err)
	}
	version, err := admin.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	var report strings.Builder
	// The report so far is shown and written even when a section fails.
	t.Cleanup(func() {
		if t.Failed() {
			fmt.Fprintln(&report, "(The run failed: the report is incomplete.)")
		}
		t.Logf("report:\n\n%s", report.String())
		if path := os.Getenv(kubeBenchEnv + "_OUT"); path != "" {
			if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
				t.Error(err)
			}
		}
	})
	fmt.Fprintf(&report, "kube-apiserver %s (built from k8s.io/kubernetes by scripts/with-kube-apiserver.sh, started by internal/kubetest on an embedded etcd), loopback, GOMAXPROCS %d, load average at the start %s.\n\n",
		version.GitVersion, runtime.GOMAXPROCS(0), handoffbench.LoadAverage())
	fmt.Fprintf(&report, "%s\n\n", handoffbench.Busy(t))
	fmt.Fprintf(&report, "client-go leaderelection (tests/internal/kubepeers, a LeaseLock per election, ReleaseOnCancel): LeaseDuration %v, RenewDeadline %v, RetryPeriod %v (client-go's 15 s / 10 s / 2 s divided by 7.5) but at rest, where they are 15 s / 10 s / 2 s. "+
		"simba: `simba.WithTTL` the LeaseDuration (renewals every TTL/3), status records on unless said. Every client, of either side, on a clientset of its own with no client-side rate limit (`rest.Config.QPS` -1).\n\n",
		benchLeaseDuration, benchRenewDeadline.Round(time.Millisecond), benchRetryPeriod.Round(time.Millisecond))
	for _, sec := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"handoff", func(t *testing.T) { benchKubeHandOff(t, srv, &report) }},
		{"crash", func(t *testing.T) { benchKubeFault(t, srv, crashKubeFault, &report) }},
		{"cut", func(t *testing.T) { benchKubeFault(t, srv, cutKubeFault, &report) }},
		{"rest", func(t *testing.T) { benchRest(t, srv, &report) }},
	} {
		if !benchSection(sec.name) {
			continue
		}
		// A subtest each, so that a section's clients and namespaces are
		// gone before the next one counts requests.
		start := time.Now()
		t.Logf("section %s: starting (load average %s)", sec.name, handoffbench.LoadAverage())
		if !t.Run(sec.name, func(t *testing.T) { sec.run(t) }) {
			break
		}
		t.Logf("section %s: %v", sec.name, time.Since(start).Round(time.Second))
	}
	fmt.Fprintf(&report, "Load average at the end: %s.\n", handoffbench.LoadAverage())
}

// benchSection reports whether the section name is selected.
func benchSection(name string) bool {
	v := os.Getenv(kubeBenchEnv)
	return v == "1" || v == "all" || slices.Contains(strings.Split(v, ","), name)
}

// benchConfig is the administrator's configuration through px (nil:
// straight to the server), with no client-side rate limit, its requests
// counted by c if not nil.
func benchConfig(srv *kubetest.Server, px *faultproxy.Proxy, c *reqCounter) *rest.Config {
	cfg := srv.Admin()
	if px != nil {
		cfg = srv.ConfigVia(px.Addr(), cfg)
	}
	cfg.QPS, cfg.Burst = -1, 0
	if c != nil {
		cfg.WrapTransport = c.wrap
	}
	return cfg
}

func benchClientset(t *testing.T, cfg *rest.Config) *k8s.Clientset {
	cs, err := k8s.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func benchClose(t *testing.T, c *simba.Client) {
	if _, err := await.Within(await.Returned(c.Close), benchWait, "simba: Close did not return"); err != nil {
		t.Error(err)
	}
}

// --- graceful hand-off ---

func benchKubeHandOff(t *testing.T, srv *kubetest.Server, report *strings.Builder) {
	cfg := handoffbench.Sized(handoffbench.Config{Settles: benchSettles, Warmup: benchHandOffWarmup, Rounds: benchHandOffRounds})
	fmt.Fprintf(report, "### Graceful hand-off (%d rounds after %d warm-up rounds, sides alternating)\n\n", cfg.Rounds, cfg.Warmup)
	fmt.Fprintln(report, "client-go: the holder's Run ctx cancelled (ReleaseOnCancel: its renew loop ends, then one Get and one Update clear the holder in the Lease) → the waiter's OnStartedLeading; "+
		"the waiter finds the Lease free at its next try, every RetryPeriod jittered to [1, 2.2]×RetryPeriod, and takes it with an Update. "+
		"simba: `LeaderTask.Stop()` on the holder → the next holder's task running; the waiter is woken by the backend's watch of the Lease objects. "+
		"Settle: pause between the waiter starting (its `Run` or `RunWhileLeader` called) and the hand-off. "+
		"Breakdown: a wrapping backend times the release call and the waiter's Acquire; "+
		"the notification is when a watch of the benchmark's, on a clientset of its own, sees the holder's candidacy gone from the lease name object's queue.")
	fmt.Fprintln(report)
	ns := srv.Namespace(t)
	on, stopOn := simbaKubeHandOffSide(t, srv, ns, "simba (status on)", handoffbench.Reference, true)
	off, stopOff := simbaKubeHandOffSide(t, srv, ns, "simba (status off)", handoffbench.Simba, false)
	peer, stopPeer := clientGoHandOffSide(t, srv, ns)
	res, err := handoffbench.Run(cfg, []handoffbench.Side{on, off, peer})
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

func simbaKubeHandOffSide(t *testing.T, srv *kubetest.Server, ns, name string, role handoffbench.Role, status bool) (handoffbench.Side, func() error) {
	pair := handoffbench.SimbaPair{Election: fmt.Sprintf("handoff-%v", status), Timeout: benchWait, Notice: queueWatcher(t, srv, ns)}
	for i := range pair.Clients {
		b, err := kubernetes.New(benchConfig(srv, nil, nil), kubernetes.WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		pair.Probes[i] = new(handoffbench.Probe)
		c, err := simba.New(handoffbench.Wrap(b, pair.Probes[i]), simba.WithTTL(benchLeaseDuration), simba.WithStatus(status))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { benchClose(t, c) })
		pair.Clients[i] = c
	}
	side, stop, err := handoffbench.SimbaSide(name, role, pair)
	if err != nil {
		t.Fatal(err)
	}
	return side, stop
}

// queueWatcher returns the independent watcher of the breakdown: a watch
// of the lease name objects of ns, on a clientset of its own, that reports
// when the queue of the name asked for no longer holds the token asked for.
func queueWatcher(t *testing.T, srv *kubetest.Server, ns string) handoffbench.Notice {
	leases := benchClientset(t, benchConfig(srv, nil, nil)).CoordinationV1().Leases(ns)
	type key struct {
		name  string
		token uint64
	}
	var mu sync.Mutex
	want := map[key]chan time.Time{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	sel := "app.kubernetes.io/managed-by=simba,simba.io/kind=lease"
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rv := list.ResourceVersion
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := leases.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv})
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				at := time.Now()
				l, ok := ev.Object.(*coordv1.Lease)
				if !ok || (ev.Type != watch.Modified && ev.Type != watch.Added) {
					continue
				}
				rv = l.ResourceVersion
				var queue []struct {
					T uint64 `json:"t"`
				}
				if err := json.Unmarshal([]byte(l.Annotations["simba.io/queue"]), &queue); err != nil {
					continue
				}
				name := l.Annotations["simba.io/name"]
				mu.Lock()
				for k, ch := range want {
					if k.name == name && !slices.ContainsFunc(queue, func(e struct {
						T uint64 `json:"t"`
					}) bool {
						return e.T == k.token
					}) {
						ch <- at
						delete(want, k)
					}
				}
				mu.Unlock()
			}
			w.Stop()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func(ctx context.Context, name string, token uint64) (<-chan time.Time, error) {
		ch := make(chan time.Time, 1)
		mu.Lock()
		want[key{name, token}] = ch
		mu.Unlock()
		return ch, nil
	}
}

// peerRun is one client-go elector running.
type peerRun struct {
	e      *kubepeers.Elector
	cancel context.CancelFunc
	ran    <-chan error
}

func startPeer(t *testing.T, cfg kubepeers.Config) *peerRun {
	e, err := kubepeers.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &peerRun{e: e, cancel: cancel, ran: await.Returned(func() error { e.Run(ctx); return nil })}
}

// stop cancels the elector's ctx and waits for its Run to return.
func (p *peerRun) stop() error {
	p.cancel()
	_, err := await.Within(p.ran, benchWait, "client-go: Run did not return after its ctx ended")
	return err
}

var peerIDs struct {
	mu sync.Mutex
	n  int
}

func peerID(prefix string) string {
	peerIDs.mu.Lock()
	defer peerIDs.mu.Unlock()
	peerIDs.n++
	return fmt.Sprintf("%s-%d", prefix, peerIDs.n)
}

// clientGoHandOffSide hands one Lease over between two contender slots,
// each on a clientset of its own, a new elector for the waiter each round
// (an elector that stopped leading does not contend again).
func clientGoHandOffSide(t *testing.T, srv *kubetest.Server, ns string) (handoffbench.Side, func() error) {
	clients := [2]*k8s.Clientset{benchClientset(t, benchConfig(srv, nil, nil)), benchClientset(t, benchConfig(srv, nil, nil))}
	leads := make(chan *kubepeers.Leadership, 4)
	mk := func(slot int) *peerRun {
		return startPeer(t, kubepeers.Config{
			Client: clients[slot], Namespace: ns, Name: "handoff-client-go", Identity: peerID("handoff"),
			LeaseDuration: benchLeaseDuration, RenewDeadline: benchRenewDeadline, RetryPeriod: benchRetryPeriod,
			ReleaseOnCancel: true, OnLead: func(l *kubepeers.Leadership) { leads <- l },
		})
	}
	holder, slot := mk(0), 0
	if _, err := await.Within(leads, benchWait, "client-go: no first leader"); err != nil {
		t.Fatal(err)
	}
	once := func(settle time.Duration) (handoffbench.Round, error) {
		waiter := mk(1 - slot)
		time.Sleep(settle)
		t0 := time.Now()
		if err := holder.stop(); err != nil {
			return handoffbench.Round{}, err
		}
		l, err := await.Within(leads, benchWait, "client-go: no leader after the holder's ctx ended")
		if err != nil {
			return handoffbench.Round{}, err
		}
		if waiter.e.Leading() != l {
			return handoffbench.Round{}, fmt.Errorf("client-go: the leader is not the waiter")
		}
		holder, slot = waiter, 1-slot
		return handoffbench.Round{Total: l.Start.Sub(t0)}, nil
	}
	return handoffbench.Side{Name: "client-go (ReleaseOnCancel)", Role: handoffbench.Peer, Once: once}, func() error { return holder.stop() }
}

// --- faults: crash and link cut ---

type kubeFault struct {
	name, title, doc string
	apply, heal      func(*faultproxy.Proxy)
}

var crashKubeFault = kubeFault{
	name:  "crash",
	title: "The holder crashes, as the server sees it (its connections reset, new ones refused)",
	doc: "The holder's proxy resets every connection and refuses new ones (internal/faultproxy, Refuse), as when the holder's process dies and its kernel closes its sockets: " +
		"nothing the holder sends reaches the server after that instant, neither a renewal nor a release or delete (a closed simba backend's clientset would still reach it: the proxy is the surer crash), " +
		"at a random instant 0.2–1.2 s after the previous round; it accepts again once the new leader runs and the old one stopped believing. " +
		"The fail-over is the figure of a crash; the overlap columns are what a holder that outlives the reset of its connections believes (a crashed one believes nothing).",
	apply: (*faultproxy.Proxy).Refuse,
	heal:  (*faultproxy.Proxy).Accept,
}

var cutKubeFault = kubeFault{
	name:  "cut",
	title: "Link cut between the holder and the server (blackhole)",
	doc: "The holder's link goes silent both ways through the project's fault proxy (internal/faultproxy, Blackhole), at a random instant 0.2–1.2 s after the previous round; " +
		"the link heals once the new leader runs and the old one stopped believing.",
	apply: (*faultproxy.Proxy).Blackhole,
	heal:  (*faultproxy.Proxy).Heal,
}

func benchKubeFault(t *testing.T, srv *kubetest.Server, f kubeFault, report *strings.Builder) {
	fmt.Fprintf(report, "### %s: overlap and fail-over (%d pairs × %d rounds per side)\n\n", f.title, benchPairs, benchPerPair)
	fmt.Fprintln(report, f.doc+
		" A round overlaps when the old leader still believed it led after the new one started. "+
		"client-go: belief is the ctx of OnStartedLeading, which client-go ends when its Run returns: after no renewal succeeded for RenewDeadline and then, with ReleaseOnCancel, after the release's attempt (a Get and an Update, bounded by another RenewDeadline, which fails on a link that is down); the new leader is its OnStartedLeading, once it saw the Lease unchanged for LeaseDuration on its own clock. "+
		"simba: the old term's `Valid()` (its `Deadline`), and its task's ctx end, against the new term's `Start`. "+
		"Fail-over: the fault → the new leader.")
	fmt.Fprintln(report)
	ns := srv.Namespace(t)
	valid := &handoffbench.Overlap{Side: "simba, old term's Valid()"}
	ctxEnd := &handoffbench.Overlap{Side: "simba, old task's ctx end"}
	peer := &handoffbench.Overlap{Side: "client-go (ReleaseOnCancel), old OnStartedLeading ctx end"}
	noRelease := &handoffbench.Overlap{Side: "client-go (no ReleaseOnCancel), old OnStartedLeading ctx end"}
	var wg sync.WaitGroup
	for pair := range benchPairs {
		wg.Go(func() { simbaFaultPair(t, srv, ns, f, pair, valid, ctxEnd) })
	}
	wg.Wait()
	for pair := range benchPairs {
		wg.Go(func() { peerFaultPair(t, srv, ns, f, pair, true, peer) })
	}
	wg.Wait()
	for pair := range benchPairs {
		wg.Go(func() { peerFaultPair(t, srv, ns, f, pair, false, noRelease) })
	}
	wg.Wait()
	handoffbench.OverlapMarkdown(report, valid, ctxEnd, peer, noRelease)
	fmt.Fprintln(report)
	if _, over := valid.Rounds(); over > 0 {
		t.Errorf("simba: %d %s rounds overlapped", over, f.name)
	}
}

type benchTerm struct {
	who     int
	term    *simba.Term
	ended   chan struct{}
	endedAt time.Time
}

func simbaFaultPair(t *testing.T, srv *kubetest.Server, ns string, f kubeFault, pair int, valid, ctxEnd *handoffbench.Overlap) {
	election := fmt.Sprintf("%s-%d", f.name, pair)
	terms := make(chan *benchTerm, 16)
	var proxies [2]*faultproxy.Proxy
	var clients [2]*simba.Client
	for i := range clients {
		px, err := faultproxy.New(srv.Addr())
		if err != nil {
			t.Error(err)
			return
		}
		defer px.Close()
		proxies[i] = px
		c, b := benchSimbaNoCleanup(t, benchConfig(srv, px, nil), ns, simba.WithTTL(benchLeaseDuration))
		if c == nil {
			return
		}
		defer b.Close()
		defer benchClose(t, c)
		defer px.Heal()
		defer px.Accept()
		clients[i] = c
		if _, err := c.Election(election).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			s := &benchTerm{who: i, term: term, ended: make(chan struct{})}
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
	holder, err := await.Within(terms, benchWait, "%s: no first term", election)
	if err != nil {
		t.Error(err)
		return
	}
	for round := range benchPerPair {
		time.Sleep(200*time.Millisecond + rand.N(time.Second))
		h := holder.who
		session := clients[h].SessionID()
		cut := time.Now()
		f.apply(proxies[h])
		next, err := await.Within(terms, benchSurvived, "simba %s round %d: no new leader %v after the fault", election, round, benchSurvived)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := await.Within(holder.ended, benchWait, "simba %s round %d: the old term's task still runs", election, round); err != nil {
			t.Error(err)
			return
		}
		if next.who == h || next.term.Token() <= holder.term.Token() {
			t.Errorf("simba %s round %d: term %d of %d after term %d of %d", election, round, next.term.Token(), next.who, holder.term.Token(), h)
		}
		valid.Add(cut, next.term.Start(), holder.term.Deadline())
		ctxEnd.Add(cut, next.term.Start(), holder.endedAt)
		f.heal(proxies[h])
		// The old holder contends again on a new session before the next
		// round.
		if !termlog.Eventually(benchWait, func() bool { id := clients[h].SessionID(); return id != "" && id != session }) {
			t.Errorf("simba %s round %d: the old holder has no new session %v after the fault healed", election, round, benchWait)
			return
		}
		holder = next
	}
}

// benchSimbaNoCleanup is benchSimba for goroutines other than the test's:
// it reports errors with t.Error and returns nil, and leaves the clean-up
// to the caller.
func benchSimbaNoCleanup(t *testing.T, cfg *rest.Config, ns string, opts ...simba.Option) (*simba.Client, *kubernetes.Backend) {
	b, err := kubernetes.New(cfg, kubernetes.WithNamespace(ns))
	if err != nil {
		t.Error(err)
		return nil, nil
	}
	c, err := simba.New(b, opts...)
	if err != nil {
		b.Close()
		t.Error(err)
		return nil, nil
	}
	return c, b
}

func peerFaultPair(t *testing.T, srv *kubetest.Server, ns string, f kubeFault, pair int, release bool, o *handoffbench.Overlap) {
	election := fmt.Sprintf("%s-client-go-%v-%d", f.name, release, pair)
	type spell struct {
		who int
		l   *kubepeers.Leadership
	}
	leads := make(chan spell, 16)
	var proxies [2]*faultproxy.Proxy
	var clients [2]*k8s.Clientset
	var runs [2]*peerRun
	mk := func(i int) *peerRun {
		return startPeer(t, kubepeers.Config{
			Client: clients[i], Namespace: ns, Name: election, Identity: peerID(election),
			LeaseDuration: benchLeaseDuration, RenewDeadline: benchRenewDeadline, RetryPeriod: benchRetryPeriod,
			ReleaseOnCancel: release, OnLead: func(l *kubepeers.Leadership) { leads <- spell{i, l} },
		})
	}
	for i := range runs {
		px, err := faultproxy.New(srv.Addr())
		if err != nil {
			t.Error(err)
			return
		}
		defer px.Close()
		proxies[i] = px
		cs, err := k8s.NewForConfig(benchConfig(srv, px, nil))
		if err != nil {
			t.Error(err)
			return
		}
		clients[i] = cs
	}
	for i := range runs {
		runs[i] = mk(i)
	}
	defer func() {
		for i, r := range runs {
			proxies[i].Accept()
			proxies[i].Heal()
			if err := r.stop(); err != nil {
				t.Errorf("client-go %s: contender %d: %v", election, i, err)
			}
		}
	}()
	holder, err := await.Within(leads, benchWait, "client-go %s: no first leader", election)
	if err != nil {
		t.Error(err)
		return
	}
	for round := range benchPerPair {
		time.Sleep(200*time.Millisecond + rand.N(time.Second))
		h := holder.who
		cut := time.Now()
		f.apply(proxies[h])
		next, err := await.Within(leads, benchSurvived, "client-go %s round %d: no new leader %v after the fault", election, round, benchSurvived)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := await.Within(holder.l.Done(), benchWait, "client-go %s round %d: the old leader still believes it leads", election, round); err != nil {
			t.Error(err)
			return
		}
		if next.who == h {
			t.Errorf("client-go %s round %d: the old holder leads again", election, round)
		}
		o.Add(cut, next.l.Start, holder.l.End())
		// The old holder's elector stopped leading: its Run returns (after
		// the release, refused or timed out), and the slot gets a new one
		// once the fault healed, as a controller's process restarts.
		if _, err := await.Within(runs[h].ran, benchWait, "client-go %s round %d: the old holder's Run did not return", election, round); err != nil {
			t.Error(err)
			return
		}
		f.heal(proxies[h])
		runs[h] = mk(h)
		holder = next
	}
}

// --- requests at rest ---

// reqCounter counts the requests of the clients whose transports it
// wraps, by kind: the HTTP method, or LIST and WATCH for the GETs of a
// collection.
type reqCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func newReqCounter() *reqCounter { return &reqCounter{n: map[string]int{}} }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *reqCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		kind := r.Method
		if kind == http.MethodGet {
			switch {
			case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
				kind = "WATCH"
			case strings.HasSuffix(r.URL.Path, "/leases"):
				kind = "LIST"
			}
		}
		c.mu.Lock()
		c.n[kind]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// snapshot returns the counts so far.
func (c *reqCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.n))
	for k, v := range c.n {
		m[k] = v
	}
	return m
}

func diffCounts(after, before map[string]int) (total int, by string) {
	var kinds []string
	for k := range after {
		if after[k]-before[k] > 0 {
			kinds = append(kinds, k)
		}
	}
	slices.Sort(kinds)
	var parts []string
	for _, k := range kinds {
		d := after[k] - before[k]
		total += d
		parts = append(parts, fmt.Sprintf("%s %d", k, d))
	}
	if len(parts) == 0 {
		return 0, "none"
	}
	return total, strings.Join(parts, ", ")
}

// serverLeaseRequests returns the apiserver's apiserver_request_total for
// the resource leases, summed over its other labels, by verb.
func serverLeaseRequests(t *testing.T, admin *k8s.Clientset) map[string]int {
	ctx, cancel := context.WithTimeout(context.Background(), benchWait)
	defer cancel()
	raw, err := admin.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Errorf("reading the apiserver's /metrics: %v", err)
		return nil
	}
	m := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="leases"`) {
			continue
		}
		i := strings.Index(line, `verb="`)
		j := strings.LastIndexByte(line, ' ')
		if i < 0 || j < 0 {
			continue
		}
		verb := line[i+6:]
		verb = verb[:strings.IndexByte(verb, '"')]
		v, err := strconv.ParseFloat(line[j+1:], 64)
		if err != nil {
			continue
		}
		m[verb] += int(v)
	}
	return m
}

// restSizes are the numbers of elections held at rest.
func restSizes() []int {
	v := os.Getenv(kubeBenchEnv + "_SIZES")
	if v == "" {
		return []int{1, 100, 1000}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func benchRest(t *testing.T, srv *kubetest.Server, report *strings.Builder) {
	fmt.Fprintf(report, "### API requests at rest (LeaseDuration = simba TTL = %v, client-go RetryPeriod %v; a window of %v, %v after every election led)\n\n", restLeaseDuration, restRetryPeriod, restWindow, settleAtRest())
	fmt.Fprintln(report, "One client holds every election. simba: one `simba.Client` (one session, renewed every TTL/3 by one Update of its session object; the elections' lease name objects need no renewal), N `RunWhileLeader` tasks, status records on. "+
		"client-go: one clientset, N LeaderElectors (one Lease each), each renewing its Lease with one Update per RetryPeriod. "+
		"Client: the requests the client's transport sent in the window (`rest.Config.WrapTransport`), by kind (LIST and WATCH are GETs of a collection; a watch open across the window is not counted). "+
		"Server: the growth of the apiserver's `apiserver_request_total{resource=\"leases\"}` over the same window, by verb; it includes the apiserver's own identity Lease in kube-system (one update every 10 s) and counts watches when they end.")
	fmt.Fprintln(report)
	fmt.Fprintln(report, "| elections | side | requests/s (client) | by kind (client) | requests/s (server) | by verb (server) | leaders lost in the window |")
	fmt.Fprintln(report, "|---:|---|---:|---|---:|---|---:|")
	admin := benchClientset(t, benchConfig(srv, nil, nil))
	for _, n := range restSizes() {
		restSimba(t, srv, admin, n, report)
		restClientGo(t, srv, admin, n, report)
	}
	fmt.Fprintln(report)
}

// settleAtRest is restSettle or $SIMBA_KUBE_BENCH_SETTLE.
func settleAtRest() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(kubeBenchEnv + "_SETTLE")); err == nil && d >= 0 {
		return d
	}
	return restSettle
}

// restMeasure waits the settle time, then counts the window.
func restMeasure(t *testing.T, admin *k8s.Clientset, c *reqCounter) (client, server string) {
	time.Sleep(settleAtRest())
	c0, s0 := c.snapshot(), serverLeaseRequests(t, admin)
	start := time.Now()
	time.Sleep(restWindow)
	c1, s1 := c.snapshot(), serverLeaseRequests(t, admin)
	secs := time.Since(start).Seconds()
	ct, cby := diffCounts(c1, c0)
	st, sby := diffCounts(s1, s0)
	return fmt.Sprintf("%.2f | %s", float64(ct)/secs, cby), fmt.Sprintf("%.2f | %s", float64(st)/secs, sby)
}

func restSimba(t *testing.T, srv *kubetest.Server, admin *k8s.Clientset, n int, report *strings.Builder) {
	ns := srv.Namespace(t)
	counter := newReqCounter()
	b, err := kubernetes.New(benchConfig(srv, nil, counter), kubernetes.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := simba.New(b, simba.WithTTL(restLeaseDuration))
	if err != nil {
		t.Fatal(err)
	}
	defer benchCloseWithin(t, c, restSetup)
	var mu sync.Mutex
	leading, lost := 0, 0
	all := make(chan struct{})
	measuring := make(chan struct{})
	for i := range n {
		if _, err := c.Election(fmt.Sprintf("rest-%d", i)).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			mu.Lock()
			leading++
			if leading == n {
				close(all)
			}
			mu.Unlock()
			<-ctx.Done()
			select {
			case <-measuring:
				mu.Lock()
				lost++
				mu.Unlock()
			default:
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if _, err := await.Within(all, restSetup, "simba: not all %d elections led within %v", n, restSetup); err != nil {
		t.Fatal(err)
	}
	t.Logf("simba: %d elections led after %v", n, time.Since(start).Round(time.Millisecond))
	close(measuring)
	client, server := restMeasure(t, admin, counter)
	mu.Lock()
	l := lost
	mu.Unlock()
	fmt.Fprintf(report, "| %d | simba | %s | %s | %d |\n", n, client, server, l)
}

// restLost counts the client-go electors that stopped leading.
func restClientGo(t *testing.T, srv *kubetest.Server, admin *k8s.Clientset, n int, report *strings.Builder) {
	ns := srv.Namespace(t)
	counter := newReqCounter()
	cs := benchClientset(t, benchConfig(srv, nil, counter))
	var mu sync.Mutex
	var spells []*kubepeers.Leadership
	all := make(chan struct{})
	runs := make([]*peerRun, n)
	for i := range n {
		runs[i] = startPeer(t, kubepeers.Config{
			Client: cs, Namespace: ns, Name: fmt.Sprintf("rest-%d", i), Identity: fmt.Sprintf("rest-client-go-%d", i),
			LeaseDuration: restLeaseDuration, RenewDeadline: restRenewDeadline, RetryPeriod: restRetryPeriod,
			ReleaseOnCancel: true, OnLead: func(l *kubepeers.Leadership) {
				mu.Lock()
				spells = append(spells, l)
				if len(spells) == n {
					close(all)
				}
				mu.Unlock()
			},
		})
	}
	defer func() {
		var wg sync.WaitGroup
		for _, r := range runs {
			wg.Go(func() {
				if err := r.stop(); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}()
	start := time.Now()
	if _, err := await.Within(all, restSetup, "client-go: not all %d electors led within %v", n, restSetup); err != nil {
		t.Fatal(err)
	}
	t.Logf("client-go: %d electors led after %v", n, time.Since(start).Round(time.Millisecond))
	client, server := restMeasure(t, admin, counter)
	lost := 0
	mu.Lock()
	for _, l := range spells {
		if !l.End().IsZero() {
			lost++
		}
	}
	mu.Unlock()
	fmt.Fprintf(report, "| %d | client-go | %s | %s | %d |\n", n, client, server, lost)
}

func benchCloseWithin(t *testing.T, c *simba.Client, d time.Duration) {
	if _, err := await.Within(await.Returned(c.Close), d, "simba: Close did not return"); err != nil {
		t.Error(err)
	}
}
