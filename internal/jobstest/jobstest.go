package jobstest

import (
	"context"
	"fmt"
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

// TTL is the session TTL of the tests: renewals every second.
const TTL = 3 * time.Second

// Config is the configuration most tests run: one scheduled job and one
// partitioned job of four partitions with labels.
const Config = `
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

// Leases are the lease names of [Config]'s jobs.
var Leases = []string{"report", "billing.0", "billing.1", "billing.2", "billing.3"}

// LookupIn returns a lookup function over m, for jobs.WithLookupEnv and
// jobs.Expand.
func LookupIn(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// NoEnv is an empty environment.
var NoEnv = jobs.WithLookupEnv(LookupIn(nil))

// LoadConfig returns [Config], loaded with [NoEnv].
func LoadConfig(t *testing.T) jobs.Config {
	t.Helper()
	cfg, err := jobs.Load(strings.NewReader(Config), jobs.YAML, NoEnv)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Run is one run of a handler.
type Run struct {
	Node  string    // the node it ran on
	Lease string    // its term's lease
	Param string    // its partition's parameter ("" for a scheduled job)
	Token uint64    // its term's fencing token
	Start time.Time // when it began
	End   time.Time // when it returned
}

// Recorder records what the handlers of several nodes did.
type Recorder struct {
	mu     sync.Mutex
	runs   []Run
	active map[string]int // running handlers by node
	terms  map[*simba.Term]bool
	work   time.Duration // how long each run lasts (unless its term ends)
}

// NewRecorder returns a recorder whose handlers' runs last work each,
// unless their term ends first.
func NewRecorder(work time.Duration) *Recorder {
	return &Recorder{active: map[string]int{}, terms: map[*simba.Term]bool{}, work: work}
}

// Registry returns the handlers of [Config] for node, recording their runs.
func (r *Recorder) Registry(node string) *jobs.Registry {
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

func (r *Recorder) run(ctx context.Context, node string, term *simba.Term, param string) error {
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
	r.runs = append(r.runs, Run{node, term.Name(), param, term.Token(), start, time.Now()})
	r.mu.Unlock()
	return nil
}

// Runs returns the runs that have returned, in the order they returned.
func (r *Recorder) Runs() []Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

// Active returns how many handlers are running on node.
func (r *Recorder) Active(node string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active[node]
}

// RanSince returns, by lease, the nodes that started runs at or after t.
func (r *Recorder) RanSince(t time.Time) map[string][]string {
	out := map[string][]string{}
	for _, run := range r.Runs() {
		if !run.Start.Before(t) && !slices.Contains(out[run.Lease], run.Node) {
			out[run.Lease] = append(out[run.Lease], run.Node)
		}
	}
	return out
}

// CheckOneAtATime reports runs of one lease on two nodes at once, tokens that
// go down, and violations of the term invariants.
func (r *Recorder) CheckOneAtATime(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, a := range r.runs {
		for _, b := range r.runs[i+1:] {
			if a.Lease != b.Lease {
				continue
			}
			if a.Node != b.Node && a.Start.Before(b.End) && b.Start.Before(a.End) {
				t.Errorf("%s ran on %s [%v, %v] and on %s [%v, %v] at once", a.Lease, a.Node, a.Start, a.End, b.Node, b.Start, b.End)
			}
			if (b.Start.After(a.Start) && b.Token < a.Token) || (a.Start.After(b.Start) && a.Token < b.Token) {
				t.Errorf("%s: a later run has a lower token (%d on %s, %d on %s)", a.Lease, a.Token, a.Node, b.Token, b.Node)
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

// Runner is one node running jobs.Run.
type Runner struct {
	Name   string        // the node's member ID
	Client *simba.Client // its client, closed when the test ends
	// Done delivers what Run returned.
	Done <-chan error
	// Ended is when Run returned; read it after receiving from Done.
	Ended  time.Time
	cancel context.CancelFunc
}

// NewClient returns a client on b, closed when the test ends.
func NewClient(t *testing.T, b backend.Backend, opts ...simba.Option) *simba.Client {
	t.Helper()
	client, err := simba.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// StartRunner starts a client on b, with [TTL] and name for its member ID,
// and jobs.Run on it with cfg, [NoEnv], opts and the recorder's handlers.
func StartRunner(t *testing.T, name string, b backend.Backend, rec *Recorder, cfg jobs.Config, opts ...jobs.Option) *Runner {
	t.Helper()
	client := NewClient(t, b, simba.WithTTL(TTL), simba.WithMemberID(name))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	r := &Runner{Name: name, Client: client, Done: done, cancel: cancel}
	reg := rec.Registry(name)
	go func() {
		err := jobs.Run(ctx, client, reg, cfg, append([]jobs.Option{NoEnv}, opts...)...)
		r.Ended = time.Now()
		done <- err
	}()
	return r
}

// Cancel ends the context of the runner's Run, without waiting for it to
// return (see Done).
func (r *Runner) Cancel() { r.cancel() }

// Stop ends the runner's Run, checks it returned nil, and leaves the client
// open.
func (r *Runner) Stop(t *testing.T) {
	t.Helper()
	r.Cancel()
	if err := <-r.Done; err != nil {
		t.Errorf("%s: Run: %v", r.Name, err)
	}
}
