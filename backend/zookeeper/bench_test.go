package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/internal/zktest"
)

// benchEnv turns on TestBenchmarkZooKeeper.
const benchEnv = "SIMBA_ZK_BENCH"

// TestBenchmarkZooKeeper measures, in one run on one server, the graceful
// hand-off of simba against a plain go-zookeeper ephemeral-node election,
// and simba's fail-over after a SIGKILL for 1s and 4s session timeouts. It
// prints a Markdown table. It runs only with SIMBA_ZK_BENCH=1:
//
//	SIMBA_ZK_BENCH=1 ./scripts/with-zookeeper.sh go test -run '^TestBenchmarkZooKeeper$' -v -count=1 ./backend/zookeeper/
func TestBenchmarkZooKeeper(t *testing.T) {
	if os.Getenv(benchEnv) != "1" {
		t.Skipf("set %s=1 to run the benchmarks", benchEnv)
	}
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	const rounds = 300
	rows := [][]string{{"measure", "n", "p50", "p99", "min", "max"}}
	add := func(name string, d []time.Duration) {
		slices.Sort(d)
		q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
		r := func(x time.Duration) string {
			if x < 10*time.Millisecond {
				return fmt.Sprintf("%.2fms", float64(x)/float64(time.Millisecond))
			}
			return x.Round(time.Millisecond).String()
		}
		rows = append(rows, []string{name, fmt.Sprint(len(d)), r(q(0.50)), r(q(0.99)), r(d[0]), r(d[len(d)-1])})
	}
	add("hand-off, simba (Stop → next task running)", simbaHandOff(t, addr, root, rounds))
	add("hand-off, plain go-zookeeper (delete → create)", peerHandOff(t, addr, root, rounds))
	// The same on a server that does not wait for its disk (forceSync=no):
	// what is left is the clients' own cost.
	nosync := zktest.StartServer(t, "forceSync=no")
	nsRoot := zktest.Root(t, nosync.Addr)
	add("hand-off, simba, server forceSync=no", simbaHandOff(t, nosync.Addr, nsRoot, rounds))
	add("hand-off, plain go-zookeeper, server forceSync=no", peerHandOff(t, nosync.Addr, nsRoot, rounds))
	for _, c := range []struct {
		ttl    time.Duration
		rounds int
	}{{time.Second, 10}, {4 * time.Second, 5}} {
		cl := client(t, newBackendAt(t, addr, root), c.ttl)
		ch := make(chan started, 1)
		var d []time.Duration
		var granted time.Duration
		for range c.rounds {
			f, g := crashRound(t, addr, root, cl, c.ttl, ch)
			d, granted = append(d, f), g
		}
		add(fmt.Sprintf("fail-over after SIGKILL, session timeout %v (granted %v)", c.ttl, granted), d)
		require.NoError(t, cl.Close())
	}
	var sb strings.Builder
	for i, r := range rows {
		sb.WriteString("| " + strings.Join(r, " | ") + " |\n")
		if i == 0 {
			sb.WriteString("|---|---:|---:|---:|---:|---:|\n")
		}
	}
	t.Log("\n" + sb.String())
}

// simbaHandOff runs rounds graceful hand-offs between two simba clients:
// the holder's task is stopped, and the time until the other's task runs
// is measured.
func simbaHandOff(t *testing.T, addr, root string, rounds int) []time.Duration {
	ch := make(chan time.Time, 1)
	fn := func(ctx context.Context, term *simba.Term) error {
		ch <- time.Now()
		<-ctx.Done()
		return nil
	}
	clients := []*simba.Client{
		client(t, newBackendAt(t, addr, root), 2*time.Second),
		client(t, newBackendAt(t, addr, root), 2*time.Second),
	}
	tasks := make([]*simba.LeaderTask, 2)
	var err error
	tasks[0], err = clients[0].Election("handoff").RunWhileLeader(fn)
	require.NoError(t, err)
	<-ch
	holder := 0
	var d []time.Duration
	for range rounds + 1 {
		other := 1 - holder
		if tasks[other] == nil {
			tasks[other], err = clients[other].Election("handoff").RunWhileLeader(fn)
			require.NoError(t, err)
		}
		time.Sleep(20 * time.Millisecond) // the other client is waiting on its watch
		start := time.Now()
		done := tasks[holder].Stop()
		select {
		case at := <-ch:
			d = append(d, at.Sub(start))
		case <-time.After(10 * time.Second):
			t.Fatal("no hand-off within 10s")
		}
		<-done
		tasks[holder] = nil
		holder = other
	}
	return d[1:] // the first round warms up
}

// peerHandOff runs rounds hand-offs of the plain recipe: create an
// ephemeral znode; while another session's exists, wait on an exists watch
// and try again; hand off by deleting it.
func peerHandOff(t *testing.T, addr, root string, rounds int) []time.Duration {
	path := root + "/peer"
	conns := []*zk.Conn{zktest.Connect(t, addr), zktest.Connect(t, addr)}
	acl := zk.WorldACL(zk.PermAll)
	campaign := func(c *zk.Conn, won chan<- time.Time) {
		for {
			_, err := c.Create(path, nil, zk.FlagEphemeral, acl)
			if err == nil {
				won <- time.Now()
				return
			}
			if !errors.Is(err, zk.ErrNodeExists) {
				t.Errorf("peer create: %v", err)
				return
			}
			ok, _, ev, err := c.ExistsW(path)
			if err != nil {
				t.Errorf("peer exists: %v", err)
				return
			}
			if ok {
				<-ev
			}
		}
	}
	won := make(chan time.Time, 1)
	campaign(conns[0], won)
	<-won
	holder := 0
	var d []time.Duration
	for range rounds + 1 {
		other := 1 - holder
		waiting := make(chan struct{})
		go func() {
			defer close(waiting)
			campaign(conns[other], won)
		}()
		time.Sleep(20 * time.Millisecond)
		start := time.Now()
		require.NoError(t, conns[holder].Delete(path, -1))
		select {
		case at := <-won:
			d = append(d, at.Sub(start))
		case <-time.After(10 * time.Second):
			t.Fatal("no peer hand-off within 10s")
		}
		<-waiting
		holder = other
	}
	require.NoError(t, conns[holder].Delete(path, -1))
	return d[1:]
}
