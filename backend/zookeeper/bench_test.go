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
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/zktest"
)

// benchEnv turns on TestBenchmarkZooKeeper.
const benchEnv = "SIMBA_ZK_BENCH"

// TestBenchmarkZooKeeper measures, in one run on one server, the graceful
// hand-off of simba (with its status records off, and on as by default)
// and of the backend alone against a plain go-zookeeper ephemeral-node
// election, and simba's fail-over after a SIGKILL for 1s and 4s session
// timeouts. It prints a Markdown table. It runs only with SIMBA_ZK_BENCH=1
// (SIMBA_ZK_BENCH=handoff: the hand-off rows only):
//
//	SIMBA_ZK_BENCH=1 ./scripts/with-zookeeper.sh go test -run '^TestBenchmarkZooKeeper$' -v -count=1 ./backend/zookeeper/
//
// The hand-offs of the four sides take turns, round by round, so that the
// server's warming up (its JIT compiler) and the machine's load weigh on
// each side alike.
func TestBenchmarkZooKeeper(t *testing.T) {
	mode := os.Getenv(benchEnv)
	if mode != "1" && mode != "handoff" {
		t.Skipf("set %s=1 to run the benchmarks", benchEnv)
	}
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	const rounds, warmUp = 300, 30
	rows := [][]string{{"measure", "n", "p50", "p90", "p99", "min", "max"}}
	add := func(name string, d []time.Duration) {
		slices.Sort(d)
		q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
		r := func(x time.Duration) string {
			if x < 10*time.Millisecond {
				return fmt.Sprintf("%.2fms", float64(x)/float64(time.Millisecond))
			}
			return x.Round(time.Millisecond).String()
		}
		rows = append(rows, []string{name, fmt.Sprint(len(d)), r(q(0.50)), r(q(0.90)), r(q(0.99)), r(d[0]), r(d[len(d)-1])})
	}
	handOffs := func(addr, root, suffix string) {
		sides := []struct {
			name string
			h    handOff
		}{
			{"hand-off, simba, status records off (Stop → next task running)", newSimbaHandOff(t, addr, root, "off", simba.WithStatus(false))},
			{"hand-off, plain go-zookeeper (delete → create)", newPeerHandOff(t, addr, root)},
			{"hand-off, backend alone (Release → waiting Acquire returns)", newBackendHandOff(t, addr, root)},
			{"hand-off, simba, status records on (the default)", newSimbaHandOff(t, addr, root, "on")},
		}
		d := make([][]time.Duration, len(sides))
		for round := range warmUp + rounds {
			for i, side := range sides {
				if x := side.h.once(t); round >= warmUp {
					d[i] = append(d[i], x)
				}
			}
		}
		for i, side := range sides {
			side.h.close(t)
			add(side.name+suffix, d[i])
		}
	}
	handOffs(addr, root, "")
	// The same on a server that does not wait for its disk (forceSync=no):
	// what is left is the clients' own cost.
	nosync := zktest.StartServer(t, "forceSync=no")
	handOffs(nosync.Addr, zktest.Root(t, nosync.Addr), ", server forceSync=no")
	for _, c := range []struct {
		ttl    time.Duration
		rounds int
	}{{time.Second, 10}, {4 * time.Second, 5}} {
		if mode == "handoff" {
			break
		}
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
			sb.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
		}
	}
	t.Log("\n" + sb.String())
}

// settle is how long the waiting side has, before each hand-off, to reach
// its watch.
const settle = 20 * time.Millisecond

// handOff is one side of the hand-off benchmark: two contenders taking a
// lease from each other.
type handOff interface {
	once(t *testing.T) time.Duration // one hand-off from the holder to the other
	close(t *testing.T)
}

// simbaHandOff hands an election over between two simba clients: the
// holder's task is stopped, and the time until the other's task runs is
// taken.
type simbaHandOff struct {
	name    string
	clients [2]*simba.Client
	tasks   [2]*simba.LeaderTask
	holder  int
	ch      chan time.Time
}

func newSimbaHandOff(t *testing.T, addr, root, name string, opts ...simba.Option) *simbaHandOff {
	h := &simbaHandOff{name: "handoff-" + name, ch: make(chan time.Time, 1)}
	for i := range h.clients {
		h.clients[i] = client(t, newBackendAt(t, addr, root), 2*time.Second, opts...)
	}
	h.tasks[0] = h.start(t, 0)
	select {
	case <-h.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no first term within 10s")
	}
	return h
}

func (h *simbaHandOff) start(t *testing.T, i int) *simba.LeaderTask {
	task, err := h.clients[i].Election(h.name).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		h.ch <- time.Now()
		<-ctx.Done()
		return nil
	})
	require.NoError(t, err)
	return task
}

func (h *simbaHandOff) once(t *testing.T) time.Duration {
	other := 1 - h.holder
	h.tasks[other] = h.start(t, other)
	time.Sleep(settle)
	start := time.Now()
	done := h.tasks[h.holder].Stop()
	var d time.Duration
	select {
	case at := <-h.ch:
		d = at.Sub(start)
	case <-time.After(10 * time.Second):
		t.Fatal("no hand-off within 10s")
	}
	<-done
	h.tasks[h.holder] = nil
	h.holder = other
	return d
}

func (h *simbaHandOff) close(t *testing.T) { require.NoError(t, h.tasks[h.holder].Close()) }

// backendHandOff hands a lease over between two sessions of the backend,
// without simba's core: the holder releases it, and the time until the
// other's waiting Acquire returns is taken.
type backendHandOff struct {
	ss     [2]backend.Session
	holder int
	cur    backend.Lease
	ch     chan acquired
}

type acquired struct {
	l   backend.Lease
	err error
	at  time.Time
}

func newBackendHandOff(t *testing.T, addr, root string) *backendHandOff {
	b := newBackendAt(t, addr, root)
	h := &backendHandOff{ch: make(chan acquired, 1)}
	for i := range h.ss {
		h.ss[i] = open(t, b)
		keepAlive(t, h.ss[i])
	}
	go h.acquire(t, 0)
	h.cur = h.next(t)
	return h
}

func (h *backendHandOff) acquire(t *testing.T, i int) {
	l, err := h.ss[i].Acquire(t.Context(), "handoff-backend")
	h.ch <- acquired{l, err, time.Now()}
}

func (h *backendHandOff) next(t *testing.T) backend.Lease {
	select {
	case a := <-h.ch:
		require.NoError(t, a.err)
		return a.l
	case <-time.After(10 * time.Second):
		t.Fatal("no backend hand-off within 10s")
		return nil
	}
}

func (h *backendHandOff) once(t *testing.T) time.Duration {
	go h.acquire(t, 1-h.holder)
	time.Sleep(settle)
	start := time.Now()
	require.NoError(t, h.cur.Release(t.Context()))
	var a acquired
	select {
	case a = <-h.ch:
		require.NoError(t, a.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no backend hand-off within 10s")
	}
	h.cur, h.holder = a.l, 1-h.holder
	return a.at.Sub(start)
}

func (h *backendHandOff) close(t *testing.T) { require.NoError(t, h.cur.Release(t.Context())) }

// peerHandOff hands over by the plain recipe, on two *zk.Conns: create an
// ephemeral znode; while another session's exists, wait on an exists watch
// and try again; hand off by deleting it. The time from the holder's
// delete to the other's successful create is taken.
type peerHandOff struct {
	path   string
	conns  [2]*zk.Conn
	holder int
	won    chan time.Time
	errs   chan error
}

func newPeerHandOff(t *testing.T, addr, root string) *peerHandOff {
	dir := root + "/peer"
	h := &peerHandOff{path: dir + "/leader", won: make(chan time.Time, 1), errs: make(chan error, 1)}
	h.conns = [2]*zk.Conn{zktest.Connect(t, addr), zktest.Connect(t, addr)}
	// A persistent parent of the peer's own: the backend's directories are
	// containers, which the server deletes once empty.
	for i := 1; i <= len(dir); i++ {
		if i == len(dir) || dir[i] == '/' {
			_, err := h.conns[0].Create(dir[:i], nil, 0, zk.WorldACL(zk.PermAll))
			if errors.Is(err, zk.ErrNoNode) { // a container deleted meanwhile
				i = 0
				continue
			}
			if err != nil && !errors.Is(err, zk.ErrNodeExists) {
				t.Fatalf("creating %s: %v", dir[:i], err)
			}
		}
	}
	go h.campaign(h.conns[0])
	h.wait(t)
	return h
}

func (h *peerHandOff) campaign(c *zk.Conn) {
	for {
		_, err := c.Create(h.path, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		if err == nil {
			h.won <- time.Now()
			return
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			h.errs <- fmt.Errorf("peer create: %w", err)
			return
		}
		ok, _, ev, err := c.ExistsW(h.path)
		if err != nil {
			h.errs <- fmt.Errorf("peer exists: %w", err)
			return
		}
		if ok {
			<-ev
		}
	}
}

func (h *peerHandOff) wait(t *testing.T) time.Time {
	select {
	case at := <-h.won:
		return at
	case err := <-h.errs:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("no peer hand-off within 10s")
	}
	return time.Time{}
}

func (h *peerHandOff) once(t *testing.T) time.Duration {
	go h.campaign(h.conns[1-h.holder])
	time.Sleep(settle)
	start := time.Now()
	require.NoError(t, h.conns[h.holder].Delete(h.path, -1))
	at := h.wait(t)
	h.holder = 1 - h.holder
	return at.Sub(start)
}

func (h *peerHandOff) close(t *testing.T) { require.NoError(t, h.conns[h.holder].Delete(h.path, -1)) }
