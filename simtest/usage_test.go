package simtest_test

// The three uses the README shows: a leader task that writes a counter
// (simtest_test.go's TestCorrectCounterPasses), a partitioned job and a
// stream handler. They are tests, not Examples: a simulation runs in a
// testing/synctest bubble, which needs a *testing.T.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/jobs"
	"github.com/simba-go/simba/simtest"
	"github.com/simba-go/simba/stream"
)

// A partitioned job: eight partitions spread over the nodes, each running
// every second in the term of its partition. Each partition counts its
// runs in a counter of its own, named after the partition's lease
// ("jobs.3"): one fence per lease, as the tokens of two partitions are not
// ordered against each other. The claim at the start of each term
// (simba.WithClaim) makes a deposed owner's late write fail.
func TestPartitionedJob(t *testing.T) {
	const partitions = 8
	simtest.Run(t, simtest.Config{Seeds: 5}, func(c *simtest.Cluster) {
		c.Start(func(n *simtest.Node) error {
			claim := func(ctx context.Context, term *simba.Term) error {
				return n.Counter(term.Name()).Claim(ctx, term.Token())
			}
			_, err := n.Client().Group("jobs", partitions).Schedule(simba.FixedRate(time.Second),
				func(ctx context.Context, term *simba.Term, p int) error {
					runs := n.Counter(term.Name())
					v, err := runs.Get(ctx)
					if err != nil {
						return err
					}
					return runs.Set(ctx, term.Token(), v+1)
				}, simba.WithClaim(claim))
			return err
		})
		c.Finally("every partition ran", func() error {
			for p := range partitions {
				if v, _ := c.Counter(fmt.Sprintf("jobs.%d", p)).Get(context.Background()); v == 0 {
					return fmt.Errorf("partition %d never ran", p)
				}
			}
			return nil
		})
	})
}

// A stream handler: four partitions of fixed messages, consumed with the
// checkpoints in the backend's records (stream's default), each message
// written to the partition's output map with the term's token. A message
// may be processed twice after a fault (at least once, from the last
// checkpoint); what must hold is that none is missed.
func TestStreamHandler(t *testing.T) {
	const partitions, messages = 4, 200
	source := stream.SourceFunc(func(ctx context.Context, p int, from int64) ([]stream.Message, error) {
		var out []stream.Message
		for off := from; off < messages && len(out) < 10; off++ {
			out = append(out, stream.Message{Offset: off, Value: fmt.Appendf(nil, "m%d.%d", p, off)})
		}
		if len(out) == 0 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return out, nil
	})
	simtest.Run(t, simtest.Config{Seeds: 5}, func(c *simtest.Cluster) {
		c.Start(func(n *simtest.Node) error {
			_, err := stream.Start(n.Client().Group("orders", partitions), source, func(p int) stream.Handler {
				return &handler{out: n.KV(fmt.Sprintf("out.%d", p))}
			})
			return err
		})
		c.Finally("every message processed", func() error {
			for p := range partitions {
				out := c.KV(fmt.Sprintf("out.%d", p))
				for off := range messages {
					if _, ok, _ := out.Get(context.Background(), fmt.Sprint(off)); !ok {
						return fmt.Errorf("partition %d: message %d was never processed", p, off)
					}
				}
			}
			return nil
		})
	})
}

// handler writes each message to its partition's output, fenced; it
// claims the output first in each term.
type handler struct{ out *simtest.KV }

func (h *handler) Init(ctx context.Context, term *simba.Term) error {
	return h.out.Claim(ctx, term.Token())
}

func (h *handler) Process(ctx context.Context, term *simba.Term, msg stream.Message) error {
	return h.out.Put(ctx, term.Token(), fmt.Sprint(msg.Offset), string(msg.Value))
}

// A scripted schedule: each node in turn frozen for 3×TTL, longer than its
// term, then a crash and a hand-off; the correct counter task passes it on
// every seed.
func TestScriptedSchedule(t *testing.T) {
	const ttl = 3 * time.Second
	script := []simtest.Fault{
		simtest.Pause(1, 10*time.Second, 3*ttl),
		simtest.Pause(2, 20*time.Second, 3*ttl),
		simtest.Pause(3, 30*time.Second, 3*ttl),
		simtest.Crash(1, 45*time.Second),
		simtest.HandOff("hits", 50*time.Second),
	}
	cfg := simtest.Config{TTL: ttl, Script: script, Seeds: 5}
	simtest.Run(t, cfg, startCounter(correct))
	r := simtest.Simulate(t, cfg, 0, startCounter(correct))
	if len(r.Schedule) != len(script) || r.Schedule[0].String() != script[0].String() {
		t.Fatalf("the run's schedule is not the script:\n%s", r.Report())
	}
	var revoked int
	for _, term := range r.Terms {
		if term.How != "" && term.How != "client closed" {
			revoked++
		}
	}
	if revoked == 0 {
		t.Fatalf("no term ended under three pauses of 3×TTL:\n%s", r.Report())
	}
}

// A consumer with a checkpointed output (simtest.Log) of an endless input
// of numbered items: each batch's entries and the new checkpoint are
// appended in one fenced step, so with a claim at the start of each term
// the output is every item once, in order, whatever the faults.
func consumer(claim bool) func(c *simtest.Cluster) {
	const items, batch = 1 << 40, 5
	return func(c *simtest.Cluster) {
		c.Start(func(n *simtest.Node) error {
			out := n.Log("out")
			_, err := n.Client().Election("consumer").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
				if claim {
					if err := out.Claim(ctx, term.Token()); err != nil {
						return err
					}
				}
				next, err := out.Checkpoint(ctx)
				if err != nil {
					return err
				}
				for next < items {
					var entries []string
					for i := next; i < next+batch; i++ {
						entries = append(entries, fmt.Sprint(i))
					}
					if err := out.Append(ctx, term.Token(), next+batch, entries...); err != nil {
						return err
					}
					next += batch
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(50 * time.Millisecond):
					}
				}
				<-ctx.Done()
				return nil
			})
			return err
		})
		c.Finally("every item once, in order", func() error {
			got, _ := c.Log("out").Entries(context.Background())
			if len(got) == 0 {
				return fmt.Errorf("nothing consumed")
			}
			for i, e := range got {
				if e != fmt.Sprint(i) {
					return fmt.Errorf("entry %d is %s", i, e)
				}
			}
			return nil
		})
	}
}

func TestCheckpointedConsumer(t *testing.T) {
	simtest.Run(t, simtest.Config{Seeds: 10}, consumer(true))
}

// Without the claim, a deposed consumer's batch lands after the new
// consumer read the checkpoint: items are appended twice.
//
// The simulation is not fully deterministic under load (goroutines of one
// instant run in the order the runtime picks): a quiet machine catches it at
// seed 23, a loaded one at 23, 33 or 40, and once (CI, load 11) not within
// 100 seeds; hence 300, which costs nothing when it is caught early.
func TestConsumerWithoutClaimIsCaught(t *testing.T) {
	const seeds = 300
	r := firstFailure(t, simtest.Config{}, seeds, consumer(false))
	requireCaught(t, r, seeds, "lost-update:")
}

// Declarative jobs (package jobs), run on each node by jobs.Run until the
// node's process stops (Node.Context). Each run adds to a counter of its
// lease in one fenced step (Counter.Add), which needs no claim: there is no
// read for a deposed run's write to land after.
func TestDeclaredJobs(t *testing.T) {
	cfg, err := jobs.Load(strings.NewReader(`
scheduled:
  - name: report
    fixedRate: 1s
partitioned:
  - group: billing
    partitions: 4
    fixedRate: 500ms
`), jobs.YAML)
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, simtest.Config{Seeds: 5}, func(c *simtest.Cluster) {
		c.Start(func(n *simtest.Node) error {
			reg := jobs.NewRegistry()
			reg.ScheduledTerm("report", func(ctx context.Context, term *simba.Term) error {
				_, err := n.Counter(term.Name()).Add(ctx, term.Token(), 1)
				return err
			})
			reg.Partitioned("billing", func(ctx context.Context, term *simba.Term, p int) error {
				_, err := n.Counter(term.Name()).Add(ctx, term.Token(), 1)
				return err
			})
			go func() {
				if err := jobs.Run(n.Context(), n.Client(), reg, cfg); err != nil {
					n.Logf("jobs.Run: %v", err)
				}
			}()
			return nil
		})
		c.Finally("every job ran", func() error {
			for _, name := range []string{"report", "billing.0", "billing.1", "billing.2", "billing.3"} {
				if v, _ := c.Counter(name).Get(context.Background()); v == 0 {
					return fmt.Errorf("%s never ran", name)
				}
			}
			return nil
		})
	})
}
