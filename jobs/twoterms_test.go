package jobs_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/jobstest"
	"github.com/simba-go/simba/jobs"
)

// twoTermsConfig: a scheduled job with an initial delay, a command job and
// a partitioned job with sharding-item parameters.
const twoTermsConfig = `
scheduled:
  - name: report
    fixedDelay: 1s
    initialDelay: 2s
  - name: export
    fixedDelay: 1s
    command: [export.sh, --all]
partitioned:
  - group: billing
    partitions: 2
    fixedRate: 1s
    shardingItemParameters: 0=Beijing,1=Shanghai
`

// twoTermsLeases are the leases of twoTermsConfig's jobs.
var twoTermsLeases = []string{"report", "export", "billing.0", "billing.1"}

// calls records, in order, the claims and runs of every job of one node.
type calls struct {
	mu  sync.Mutex
	log []call
}

type call struct {
	what  string // "claim" or "run"
	lease string
	token uint64
	start time.Time // the term's start
	at    time.Time
	param string // a partition's parameter; a command's first word
}

func (c *calls) add(what string, term *simba.Term, param string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, call{what, term.Name(), term.Token(), term.Start(), time.Now(), param})
}

func (c *calls) all() []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.log)
}

// tokens returns the tokens of lease's terms, in the order their first
// call came.
func (c *calls) tokens(lease string) []uint64 {
	var out []uint64
	for _, e := range c.all() {
		if e.lease == lease && !slices.Contains(out, e.token) {
			out = append(out, e.token)
		}
	}
	return out
}

// String gives the last 40 calls.
func (c *calls) String() string {
	var b strings.Builder
	all := c.all()
	if len(all) > 40 {
		fmt.Fprintf(&b, "(%d calls before) ", len(all)-40)
		all = all[len(all)-40:]
	}
	for _, e := range all {
		fmt.Fprintf(&b, "%s %s t%d; ", e.what, e.lease, e.token)
	}
	return b.String()
}

// TestJobsTwoTermsOfTheSameNode: the same node wins two terms in a row of
// every job (its session expired, or each job's holder resigned), and
// each job's term 2 is its own: the claim passed with WithTaskOptions runs
// again with term 2's token before the term's first run, every handler
// and the command runner get term 2 (its token), a partition's handler
// its parameter again, and the initial delay counts from term 2's start.
//
// Without a claim per term (patch: election.go's claimFirst with a
// `claimed` flag kept across terms, as in the root package's
// TestSameTaskTwoTermsClaims), both cases fail, SessionExpired with:
//
//	report: a run (call 30) in term 5, not claimed before it (claims of tokens [1])
//	report: claims of tokens [1], want one per term: [1 5]
//	export: claims of tokens [2], want one per term: [2 6]
//	billing.1: claims of tokens [3], want one per term: [3 7]   (and billing.0, likewise)
//
// and without the term handed to a handler per term (patch: in run.go's
// start, the partitioned job's closure keeps the first term of each
// partition and hands that one to the handler in every later call) with:
//
//	billing.0: the handler got term 3 in term 5's run (call 21, after that term's claim)
//	billing.1: the handler got term 4 in term 6's run (call 23, after that term's claim)
func TestJobsTwoTermsOfTheSameNode(t *testing.T) {
	for _, way := range []string{"SessionExpired", "Resigned"} {
		t.Run(way, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				n := b.Node("a")
				cfg, err := jobs.Load(strings.NewReader(twoTermsConfig), jobs.YAML, jobstest.NoEnv)
				if err != nil {
					t.Fatal(err)
				}
				c := &calls{}
				reg := jobs.NewRegistry()
				reg.ScheduledTerm("report", func(ctx context.Context, term *simba.Term) error {
					c.add("run", term, "")
					return nil
				})
				reg.PartitionedWithParam("billing", func(ctx context.Context, term *simba.Term, p jobs.Partition) error {
					if want := fmt.Sprintf("billing.%d", p.Index); term.Name() != want {
						return fmt.Errorf("partition %d in term %s", p.Index, term.Name())
					}
					c.add("run", term, p.Param)
					return nil
				})
				runner := func(ctx context.Context, term *simba.Term, r jobs.CommandRun) error {
					c.add("run", term, strings.Join(r.Command, " "))
					return nil
				}
				claim := func(ctx context.Context, term *simba.Term) error {
					c.add("claim", term, "")
					return nil
				}
				client := jobstest.NewClient(t, n, simba.WithTTL(jobstest.TTL), simba.WithMemberID("a"))
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					done <- jobs.Run(ctx, client, reg, cfg, jobstest.NoEnv, jobs.WithCommandRunner(runner),
						jobs.WithTaskOptions(simba.WithClaim(claim)))
				}()
				// ran reports whether every job has begun its term n (a
				// claim or a run with a token not seen before) and run
				// since.
				ran := func(n int) func() bool {
					return func() bool {
						for _, lease := range twoTermsLeases {
							var tokens []uint64
							runs := 0
							for _, e := range c.all() {
								switch {
								case e.lease != lease:
								case !slices.Contains(tokens, e.token):
									tokens, runs = append(tokens, e.token), 0
									if e.what == "run" {
										runs++
									}
								case e.what == "run":
									runs++
								}
							}
							if len(tokens) < n || len(tokens) == n && runs == 0 {
								return false
							}
						}
						return true
					}
				}
				await.Until(t, time.Minute, "every job ran in its term 1", ran(1), c.String)
				time.Sleep(time.Second)
				switch way {
				case "SessionExpired":
					n.Expire()
				case "Resigned":
					ad, err := admin.Open(t.Context(), b.Node("admin"))
					if err != nil {
						t.Fatal(err)
					}
					defer ad.Close()
					for _, lease := range twoTermsLeases {
						if err := ad.Resign(t.Context(), lease, c.tokens(lease)[0], "two terms in a row"); err != nil {
							t.Fatal(err)
						}
					}
				}
				await.Until(t, time.Minute, "every job began its term 2 on the same node, and ran", ran(2), c.String)
				time.Sleep(3 * time.Second)
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}

				all := c.all()
				params := map[string]string{"report": "", "export": "export.sh --all", "billing.0": "Beijing", "billing.1": "Shanghai"}
				for _, lease := range twoTermsLeases {
					tokens := c.tokens(lease)
					if len(tokens) != 2 || tokens[1] <= tokens[0] {
						t.Errorf("%s: terms of tokens %v, want two, increasing", lease, tokens)
						continue
					}
					var claimed []uint64
					bad := 0 // runs reported: the first only
					for i, e := range all {
						if e.lease != lease {
							continue
						}
						switch e.what {
						case "claim":
							claimed = append(claimed, e.token)
						case "run":
							switch {
							case bad > 0:
							case !slices.Contains(claimed, e.token):
								bad++
								t.Errorf("%s: a run (call %d) in term %d, not claimed before it (claims of tokens %v)", lease, i, e.token, claimed)
							case claimed[len(claimed)-1] != e.token:
								bad++
								t.Errorf("%s: the handler got term %d in term %d's run (call %d, after that term's claim)", lease, e.token, claimed[len(claimed)-1], i)
							}
							if e.param != params[lease] {
								t.Errorf("%s: a run in term %d got %q, want %q", lease, e.token, e.param, params[lease])
							}
						}
					}
					if !slices.Equal(claimed, tokens) {
						t.Errorf("%s: claims of tokens %v, want one per term: %v", lease, claimed, tokens)
					}
				}
				// The initial delay counts from each term's start.
				terms := c.tokens("report")
				for _, token := range terms {
					for _, e := range all {
						if e.lease == "report" && e.what == "run" && e.token == token {
							if d := e.at.Sub(e.start); d != 2*time.Second {
								t.Errorf("report: term %d's first run %v after its start, want the initial delay 2s", token, d)
							}
							break
						}
					}
				}
			})
		})
	}
}
