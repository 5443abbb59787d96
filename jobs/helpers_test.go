package jobs_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/jobs"
)

// testTTL is the session TTL of the tests: renewals every second.
const testTTL = 3 * time.Second

// testConfig is the configuration most tests run: one scheduled job and one
// partitioned job of four partitions with labels.
const testConfig = `
properties:
  delay: 100ms
scheduled:
  - name: report
    fixedDelay: ${delay}
partitioned:
  - group: billing
    partitions: 4
    fixedRate: PT0.2S
    shardingItemParameters: 0=Beijing,1=Shanghai,2=Guangzhou,3=Shenzhen
`

// leases are the lease names of testConfig's jobs.
var leases = []string{"report", "billing.0", "billing.1", "billing.2", "billing.3"}

func loadTestConfig(t *testing.T) jobs.Config {
	t.Helper()
	cfg, err := jobs.Load(strings.NewReader(testConfig), jobs.YAML, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// jobRun is one run of a handler.
type jobRun struct {
	node  string
	lease string
	param string
	token uint64
	start time.Time
	end   time.Time
}

// recorder records what the handlers of several nodes did.
type recorder struct {
	mu     sync.Mutex
	runs   []jobRun
	active map[string]int // running handlers by node
	terms  map[*simba.Term]bool
	work   time.Duration // how long each run lasts (unless its term ends)
}

func newRecorder(work time.Duration) *recorder {
	return &recorder{active: map[string]int{}, terms: map[*simba.Term]bool{}, work: work}
}

// registry returns the handlers of testConfig for node, recording their runs.
func (r *recorder) registry(node string) *jobs.Registry {
	reg := jobs.NewRegistry()
	reg.ScheduledTerm("report", func(ctx context.Context, term *simba.Term) error {
		return r.run(ctx, node, term, "")
	})
	reg.PartitionedWithParam("billing", func(ctx context.Context, term *simba.Term, p jobs.Partition) error {
		if want := fmt.Sprintf("billing.%d", p.Index); term.Name() != want {
			return fmt.Errorf("partition %d in term %s", p.Index, term.Name())
		}
		return r.run(ctx, node, term, p.Param)
	})
	return reg
}

func (r *recorder) run(ctx context.Context, node string, term *simba.Term, param string) error {
	start := time.Now()
	r.mu.Lock()
	r.active[node]++
	r.terms[term] = true
	r.mu.Unlock()
	select {
	case <-time.After(r.work):
	case <-ctx.Done():
	}
	r.mu.Lock()
	r.active[node]--
	r.runs = append(r.runs, jobRun{node, term.Name(), param, term.Token(), start, time.Now()})
	r.mu.Unlock()
	return nil
}

func (r *recorder) Runs() []jobRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

func (r *recorder) Active(node string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active[node]
}

// ranSince returns, by lease, the nodes that started runs at or after t.
func (r *recorder) ranSince(t time.Time) map[string][]string {
	out := map[string][]string{}
	for _, run := range r.Runs() {
		if !run.start.Before(t) && !slices.Contains(out[run.lease], run.node) {
			out[run.lease] = append(out[run.lease], run.node)
		}
	}
	return out
}

// checkOneAtATime reports runs of one lease on two nodes at once, tokens that
// go down, and violations of the term invariants.
func (r *recorder) checkOneAtATime(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, a := range r.runs {
		for _, b := range r.runs[i+1:] {
			if a.lease != b.lease {
				continue
			}
			if a.node != b.node && a.start.Before(b.end) && b.start.Before(a.end) {
				t.Errorf("%s ran on %s [%v, %v] and on %s [%v, %v] at once", a.lease, a.node, a.start, a.end, b.node, b.start, b.end)
			}
			if (b.start.After(a.start) && b.token < a.token) || (a.start.After(b.start) && a.token < b.token) {
				t.Errorf("%s: a later run has a lower token (%d on %s, %d on %s)", a.lease, a.token, a.node, b.token, b.node)
			}
		}
	}
	var terms []check.Term
	for term := range r.terms {
		terms = append(terms, check.Term{Name: term.Name(), Token: term.Token(), Start: term.Start(), End: term.Deadline()})
	}
	for _, err := range check.Terms(terms) {
		t.Error(err)
	}
}

// logBuffer is a log destination safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// runner is one node running jobs.Run.
type runner struct {
	name   string
	client *simba.Client
	cancel context.CancelFunc
	done   chan error
	ended  time.Time // when Run returned
}

// newClient returns a client on b, closed when the test ends.
func newClient(t *testing.T, b backend.Backend, opts ...simba.Option) *simba.Client {
	t.Helper()
	client, err := simba.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// startRunner starts a client on b and jobs.Run on it with cfg and the
// recorder's handlers.
func startRunner(t *testing.T, name string, b backend.Backend, rec *recorder, cfg jobs.Config, opts ...jobs.Option) *runner {
	t.Helper()
	client := newClient(t, b, simba.WithTTL(testTTL), simba.WithMemberID(name))
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{name: name, client: client, cancel: cancel, done: make(chan error, 1)}
	reg := rec.registry(name)
	go func() {
		err := jobs.Run(ctx, client, reg, cfg, append([]jobs.Option{noEnv}, opts...)...)
		r.ended = time.Now()
		r.done <- err
	}()
	return r
}

// stop ends the runner's Run, checks it returned nil, and leaves the client
// open.
func (r *runner) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("%s: Run: %v", r.name, err)
	}
}
