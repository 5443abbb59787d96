package core_test

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/scenario"
)

// etcdGroupTTL is the session TTL of the etcd group scenarios: granted as
// asked (whole seconds, above the test server's minimum of 1s). Renewals
// every 667ms, margin 200ms.
const etcdGroupTTL = 2 * time.Second

// TestEtcdGroups runs the group scenarios (internal/scenario) on a real
// etcd server (internal/etcdtest), shared by the scenarios: each has a key
// prefix of its own, and each node reaches the server through a fault
// proxy of its own (internal/faultproxy).
func TestEtcdGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("real time on a real etcd server: skipped with -short")
	}
	srv := etcdtest.Start(t)
	scenario.RunGroupScenarios(t, etcdGroups(srv, etcdGroupTTL, true))
}

// etcdGroups is the group backend of etcd server srv, with session TTL
// ttl; each node reaches srv through a proxy of its own if proxied, else
// directly (with no link to cut).
func etcdGroups(srv *etcdtest.Server, ttl time.Duration, proxied bool) scenario.GroupBackend {
	return scenario.GroupBackend{TTL: ttl, Cluster: func(t *testing.T) scenario.GroupCluster {
		prefix := "/" + strings.ReplaceAll(t.Name(), "/", ".") + "/"
		return scenario.GroupCluster{Node: func(t *testing.T, name string) (backend.Backend, scenario.GroupLink) {
			t.Helper()
			endpoints := srv.DirectEndpoints()
			var link scenario.GroupLink
			if proxied {
				px := scenario.NewProxyLink(t, srv.Endpoints()[0])
				endpoints, link = []string{px.Addr()}, px
			}
			b, err := etcd.New(endpoints, etcd.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := b.Close(); err != nil {
					t.Errorf("backend of %s: Close: %v", name, err)
				}
			})
			return b, link
		}}
	}}
}

// groupBenchEnv turns on TestEtcdGroupBenchmark:
//
//	SIMBA_GROUP_BENCH=1 go test -C tests -run '^TestEtcdGroupBenchmark$' -v -count=1 ./core/
const groupBenchEnv = "SIMBA_GROUP_BENCH"

// Parameters of the group benchmark.
const (
	benchPartitions = 256
	benchNodes      = 8
	benchRounds     = 5
	benchTTL        = 3 * time.Second
)

// TestEtcdGroupBenchmark: 256 partitions over 8 nodes on etcd. Seven nodes
// run the group; in each round an eighth joins, then leaves gracefully.
// It measures the time from the join (the group started on a client whose
// session is ready) or the leave (Stop) until every partition runs on its
// assigned owner and nowhere else, and counts the partitions moved against
// the minimal set of plain rendezvous hashing. It runs twice: on a server
// that does not fsync (like the tests'), and on one that does (like
// production).
func TestEtcdGroupBenchmark(t *testing.T) {
	if os.Getenv(groupBenchEnv) == "" {
		t.Skipf("set %s=1 to run the group benchmark", groupBenchEnv)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d partitions over %d nodes (7, and an 8th joining and leaving), TTL %v, etcd on loopback, GOMAXPROCS %d.\n",
		benchPartitions, benchNodes, benchTTL, runtimeProcs())
	for _, fsync := range []bool{false, true} {
		t.Run(fmt.Sprintf("fsync=%v", fsync), func(t *testing.T) { benchGroup(t, fsync, &out) })
	}
	t.Logf("report:\n\n%s", out.String())
}

func benchGroup(t *testing.T, fsync bool, out *strings.Builder) {
	var opts []etcdtest.Option
	if fsync {
		opts = append(opts, etcdtest.WithFsync())
	}
	srv := etcdtest.Start(t, opts...)
	benchGroupRounds(t, etcdGroups(srv, benchTTL, false), "fsync "+map[bool]string{false: "off", true: "on"}[fsync], out)
}

// benchGroupRounds runs the group benchmark's rounds on gb (see
// TestEtcdGroupBenchmark) and writes their table to out under heading;
// TestPostgresGroupBenchmark runs them on PostgreSQL.
func benchGroupRounds(t *testing.T, gb scenario.GroupBackend, heading string, out *strings.Builder) {
	g := scenario.NewGroupScenario(t, gb)
	var nodes []*scenario.GroupNode
	var ids []string
	for i := range benchNodes - 1 {
		name := fmt.Sprintf("n%d", i)
		nodes = append(nodes, g.Join(g.Node(name), benchPartitions))
		ids = append(ids, name)
	}
	cold := g.Await(scenario.Assignment(benchPartitions, ids...), "the first seven nodes")

	type row struct {
		round          int
		event          string
		moved, minimal int
		took           time.Duration
		steady         bool
	}
	var rows []row
	for round := 1; round <= benchRounds; round++ {
		name := fmt.Sprintf("j%d", round)
		before := scenario.Assignment(benchPartitions, ids...)
		with := scenario.Assignment(benchPartitions, append(slices.Clone(ids), name)...)
		lost := len(g.SessionsLost())

		n := g.Node(name)
		nodes = append(nodes, n) // its terms are in the partitions' term logs too
		ownersBefore := g.Runs.Owners(benchPartitions)
		start := time.Now()
		g.Join(n, benchPartitions)
		g.Runs.Await(t, func(o []string) bool { return slices.Equal(o[:benchPartitions], with) }, "after "+name+" joined", scenario.GroupWait)
		took := time.Since(start)
		rows = append(rows, row{round, "join " + name, len(scenario.Moved(ownersBefore, g.Runs.Owners(benchPartitions))), len(scenario.Moved(before, with)), took, len(g.SessionsLost()) == lost})

		ownersBefore = g.Runs.Owners(benchPartitions)
		start = time.Now()
		n.Task.Stop()
		done := n.Task.Done()
		g.Runs.Await(t, func(o []string) bool { return slices.Equal(o[:benchPartitions], before) }, "after "+name+" left", scenario.GroupWait)
		took = time.Since(start)
		rows = append(rows, row{round, "leave " + name, len(scenario.Moved(ownersBefore, g.Runs.Owners(benchPartitions))), len(scenario.Moved(with, before)), took, len(g.SessionsLost()) == lost})
		await.For(t, done, scenario.GroupWait, "%s's group Stop did not complete", name)
		if err := n.Client.Close(); err != nil {
			t.Error(err)
		}
	}

	fmt.Fprintf(out, "\n%s; cold start of the first 7 nodes: %.0f ms\n\n", heading, float64(cold)/float64(time.Millisecond))
	fmt.Fprintln(out, "| round | event | partitions moved | minimal set | converged after |")
	fmt.Fprintln(out, "|---:|---|---:|---:|---:|")
	var joins, leaves []time.Duration
	for _, r := range rows {
		note := ""
		if !r.steady {
			note = " (a session was lost meanwhile)"
		}
		fmt.Fprintf(out, "| %d | %s | %d | %d | %.0f ms%s |\n", r.round, r.event, r.moved, r.minimal, float64(r.took)/float64(time.Millisecond), note)
		if strings.HasPrefix(r.event, "join") {
			joins = append(joins, r.took)
		} else {
			leaves = append(leaves, r.took)
		}
		if r.steady && r.moved != r.minimal {
			t.Errorf("round %d, %s: %d partitions moved, the minimal set is %d", r.round, r.event, r.moved, r.minimal)
		}
	}
	fmt.Fprintf(out, "\njoin: median %v, max %v; leave: median %v, max %v (target ≤ 1s)\n",
		median(joins), slices.Max(joins).Round(time.Millisecond), median(leaves), slices.Max(leaves).Round(time.Millisecond))
	g.CheckTerms(nodes...)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(time.Millisecond)
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
