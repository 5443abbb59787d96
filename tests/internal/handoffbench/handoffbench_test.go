package handoffbench_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/tests/internal/handoffbench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestQuantile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 51 * time.Millisecond}, {0.9, 91 * time.Millisecond}, {0.99, 100 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		if got := handoffbench.Quantile(ds, c.p); got != c.want {
			t.Errorf("Quantile(1..100 ms, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("Quantile sorted its argument")
	}
	if got := handoffbench.Quantile(nil, 0.5); got != 0 {
		t.Errorf("Quantile(nil) = %v, want 0", got)
	}
}

// TestWrapForwardsCapabilities checks that the wrapper's sessions and
// leases have every optional capability the memory backend's have, and
// that the probe sees Acquire and the release calls.
func TestWrapForwardsCapabilities(t *testing.T) {
	ctx := t.Context()
	var p handoffbench.Probe
	mem := memory.New()
	b := handoffbench.Wrap(mem, &p)
	defer b.Close()
	s, err := b.Open(ctx, backend.SessionOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	bare, err := mem.Open(ctx, backend.SessionOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close(context.Background())
	if is[backend.RecordPrefetcher](bare) {
		t.Error("the memory backend prefetches records now: test the forwarding of RecordPrefetcher with it")
	}
	if err := s.(backend.RecordPrefetcher).PrefetchRecords(ctx, "status/x"); err != nil {
		t.Errorf("PrefetchRecords without the capability underneath: %v, want nil (nothing done)", err)
	}
	for name, ok := range map[string]bool{
		"Records":         is[backend.Records](s),
		"SkipReporter":    is[backend.SkipReporter](s),
		"LeaseLister":     is[backend.LeaseLister](s),
		"CandidateLister": is[backend.CandidateLister](s),
	} {
		if !ok {
			t.Errorf("the wrapped session is no backend.%s", name)
		}
	}
	before := time.Now()
	l, err := s.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if !is[backend.LostNotifier](l) || !is[backend.RecordReleaser](l) {
		t.Error("the wrapped lease is no LostNotifier or no RecordReleaser")
	}
	at, name, token := p.Acquired()
	if at.Before(before) || name != "x" || token != l.Token() {
		t.Errorf("probe: Acquired() = %v, %q, %d; want after %v, \"x\", %d", at, name, token, before, l.Token())
	}
	if err := l.(backend.RecordReleaser).ReleaseWithRecords(ctx, nil); err != nil {
		t.Fatal(err)
	}
	start, end := p.Released()
	if start.Before(at) || end.Before(start) {
		t.Errorf("probe: Released() = %v, %v; want in order after %v", start, end, at)
	}
	p.Reset()
	if start, _ := p.Released(); !start.IsZero() {
		t.Error("Reset kept the release")
	}
}

func is[T any](v any) bool { _, ok := v.(T); return ok }

// TestRunAndMarkdown runs simba's side on the memory backend against a
// made-up peer and checks the report's shape.
func TestRunAndMarkdown(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	var pair handoffbench.SimbaPair
	for i := range pair.Clients {
		pair.Probes[i] = new(handoffbench.Probe)
		c, err := simba.New(handoffbench.Wrap(mem, pair.Probes[i]), simba.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		pair.Clients[i] = c
	}
	pair.Election, pair.Timeout = "e", 10*time.Second
	// The memory backend has no watcher of its own: the notice is the
	// release's return, good enough for the shape.
	pair.Notice = func(ctx context.Context, name string, token uint64) (<-chan time.Time, error) {
		ch := make(chan time.Time, 1)
		ch <- time.Now().Add(time.Hour)
		return ch, nil
	}
	side, stop, err := handoffbench.SimbaSide("simba", handoffbench.Reference, pair)
	if err != nil {
		t.Fatal(err)
	}
	peer := handoffbench.Side{Name: "peer", Role: handoffbench.Peer, Once: func(settle time.Duration) (handoffbench.Round, error) {
		return handoffbench.Round{Total: time.Millisecond}, nil
	}}
	res, err := handoffbench.Run(handoffbench.Config{Settles: []time.Duration{time.Millisecond}, Warmup: 1, Rounds: 5}, []handoffbench.Side{side, peer})
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(res.Totals(0, 0)); n != 5 {
		t.Errorf("%d rounds counted, want 5", n)
	}
	var sb strings.Builder
	res.Markdown(&sb)
	for _, want := range []string{"| 1ms | simba |", "| 1ms | peer |", "peer (1.00 ms)", "stop → release call", "| side | CPU | allocations |"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, sb.String())
		}
	}
}

// TestMarkdownPeersOnly: a run of peers only has the quantiles' table,
// not simba's empty ratio and breakdown tables.
func TestMarkdownPeersOnly(t *testing.T) {
	peer := handoffbench.Side{Name: "peer", Role: handoffbench.Peer, Once: func(settle time.Duration) (handoffbench.Round, error) {
		return handoffbench.Round{Total: time.Millisecond}, nil
	}}
	res, err := handoffbench.Run(handoffbench.Config{Settles: []time.Duration{time.Millisecond}, Rounds: 2}, []handoffbench.Side{peer})
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	res.Markdown(&sb)
	if !strings.Contains(sb.String(), "| 1ms | peer |") || strings.Contains(sb.String(), "ratio") || strings.Contains(sb.String(), "Breakdown") {
		t.Errorf("want the quantiles' table only:\n%s", sb.String())
	}
}

func TestOverlap(t *testing.T) {
	o := &handoffbench.Overlap{Side: "s"}
	t0 := time.Now()
	o.Add(t0, t0.Add(time.Second), t0.Add(900*time.Millisecond))
	o.Add(t0, t0.Add(time.Second), t0.Add(1100*time.Millisecond))
	if rounds, over := o.Rounds(); rounds != 2 || over != 1 {
		t.Errorf("Rounds() = %d, %d; want 2, 1", rounds, over)
	}
	var sb strings.Builder
	handoffbench.OverlapMarkdown(&sb, o)
	if want := "| s | 2 | 1 | 100.00 ms | -100.00 ms |"; !strings.Contains(sb.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, sb.String())
	}
}

// TestCost: a round's cost counts the CPU it burns, what it allocates
// and its read system calls.
func TestCost(t *testing.T) {
	var keep [][]byte
	spin := handoffbench.Side{Name: "spin", Role: handoffbench.Peer, Once: func(time.Duration) (handoffbench.Round, error) {
		// Until the process has burned 10 ms of CPU, not for a time: on a
		// loaded machine 20 ms of wall time gave it less than 5 ms.
		start, giveUp := processCPU(), time.Now().Add(10*time.Second)
		for processCPU()-start < 10*time.Millisecond && time.Now().Before(giveUp) {
			keep = append(keep, make([]byte, 64))
		}
		for range 5 {
			if _, err := os.ReadFile("/proc/self/stat"); err != nil {
				return handoffbench.Round{}, err
			}
		}
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				for range 20 {
					runtime.Gosched()
				}
			})
		}
		wg.Wait()
		return handoffbench.Round{Total: time.Millisecond}, nil
	}}
	res, err := handoffbench.Run(handoffbench.Config{Settles: []time.Duration{0}, Rounds: 3}, []handoffbench.Side{spin})
	if err != nil {
		t.Fatal(err)
	}
	if len(keep) == 0 {
		t.Fatal("no allocation")
	}
	for _, c := range res.Costs(0, 0) {
		if c.CPU < 5*time.Millisecond || c.Allocs < 100 || c.Syscalls < 5 || c.Created < 100 || c.Wakeups < 100 {
			t.Errorf("cost %+v: want ≥ 5 ms of CPU, ≥ 100 allocations, ≥ 5 syscalls, ≥ 100 goroutines created and woken", c)
		}
	}
}

// processCPU is the CPU time the process has used so far (0 if the
// system will not say).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestBusy: SIMBA_BENCH_BUSY starts that many processes, gone with the test.
func TestBusy(t *testing.T) {
	t.Setenv(handoffbench.BusyEnv, "2")
	var say string
	t.Run("loops", func(t *testing.T) { say = handoffbench.Busy(t) })
	if !strings.Contains(say, "2 busy loops") {
		t.Errorf("Busy said %q", say)
	}
	if la := handoffbench.LoadAverage(); len(strings.Fields(la)) != 3 {
		t.Errorf("LoadAverage() = %q", la)
	}
}

// TestCostOfTrailingWork: work a round leaves going after it returns
// counts in that round's cost, not in the next side's. The work is a
// fixed amount of computation, not a time: on a loaded machine it gets
// less CPU per second, and the test compares the two sides' costs rather
// than reading an amount.
func TestCostOfTrailingWork(t *testing.T) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var sink atomic.Uint64
	trailing := handoffbench.Side{Name: "trailing", Role: handoffbench.Peer, Once: func(time.Duration) (handoffbench.Round, error) {
		wg.Go(func() {
			x := uint64(1)
			for i := range 5_000_000 {
				x = x*6364136223846793005 + uint64(i)
			}
			sink.Add(x)
		})
		return handoffbench.Round{Total: time.Millisecond}, nil
	}}
	idle := handoffbench.Side{Name: "idle", Role: handoffbench.Peer, Once: func(time.Duration) (handoffbench.Round, error) {
		wg.Wait() // nothing of the other side's left to count
		return handoffbench.Round{Total: time.Millisecond}, nil
	}}
	res, err := handoffbench.Run(handoffbench.Config{Settles: []time.Duration{0}, Rounds: 5}, []handoffbench.Side{trailing, idle})
	if err != nil {
		t.Fatal(err)
	}
	median := func(i int) time.Duration {
		var ds []time.Duration
		for _, c := range res.Costs(0, i) {
			ds = append(ds, c.CPU)
		}
		return handoffbench.Quantile(ds, 0.5)
	}
	if tr, id := median(0), median(1); tr <= id {
		t.Errorf("the trailing side's rounds cost %v of CPU at the median, the idle side's %v: the trailing work was counted in the next side's rounds", tr, id)
	}
}
