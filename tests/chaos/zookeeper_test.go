package chaos

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
)

// zkTick is the tick of the test servers' configuration (zktest.Config):
// a server expires sessions on tick boundaries.
const zkTick = 200 * time.Millisecond

// TestZooKeeper plays a fault schedule on a ZooKeeper server, then the
// negative control and the planted bug. With ZooKeeper installed it starts a server of its own,
// which the schedule restarts; otherwise it uses the server named by
// SIMBA_ZK_ADDR, without restarts, and without either it skips (fails under
// SIMBA_REQUIRE_SERVERS=1).
func TestZooKeeper(t *testing.T) {
	t.Parallel()
	testBackend(t, startZooKeeper(t))
}

// zooKeeper is one ZooKeeper server; each client reaches it through a
// proxy of its own.
type zooKeeper struct {
	addr string
	srv  *zktest.Server // nil for the shared server, which is not restarted
	// containersGo reports that the server deletes empty container znodes
	// every second, so that nothing at all may be left under a root.
	containersGo bool

	mu    sync.Mutex
	links []*faultproxy.Proxy
}

func startZooKeeper(t *testing.T) *zooKeeper {
	z := &zooKeeper{}
	t.Cleanup(z.close)
	if _, _, err := zktest.Installation(); err == nil {
		z.srv = startServer(t)
		z.addr, z.containersGo = z.srv.Addr, true
		return z
	}
	z.addr = zktest.Addr(t) // skips or fails without a server
	z.containersGo = zktest.ContainerCheckInterval() > 0 && zktest.ContainerCheckInterval() <= time.Second
	t.Logf("no ZooKeeper installed: using the server at %s, without restarts", z.addr)
	return z
}

// startServer starts a server of the test's own. zktest reports a failure
// to start it with t.Fatalf, which may be called only from the test's
// goroutine; restarts run on others, so the server gets a TB that panics
// with the message instead, for the restart to return it as an error.
func startServer(t *testing.T) (srv *zktest.Server) {
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(fatalf)
			if !ok {
				panic(p)
			}
			t.Fatal(string(f))
		}
	}()
	return zktest.StartServer(softTB{t})
}

type fatalf string

// softTB is a testing.TB whose Fatal and Fatalf panic with a fatalf.
type softTB struct{ testing.TB }

func (s softTB) Fatalf(format string, args ...any) { panic(fatalf(fmt.Sprintf(format, args...))) }
func (s softTB) Fatal(args ...any)                 { panic(fatalf(fmt.Sprint(args...))) }

func (z *zooKeeper) close() {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, p := range z.links {
		p.Close()
	}
}

func (z *zooKeeper) kind() string { return backendZooKeeper }

func (z *zooKeeper) newSpace() string {
	var b [4]byte
	rand.Read(b[:])
	return "/simba-chaos/" + hex.EncodeToString(b[:])
}

func (z *zooKeeper) canRestart() bool { return z.srv != nil }

// expiryLag: the server expires sessions on tick boundaries, up to a tick
// late, and a restarted server gives every restored session a fresh
// timeout (counted from the restart, which the heal waits for).
func (z *zooKeeper) expiryLag() time.Duration { return 2 * zkTick }

func (z *zooKeeper) newLink() (link, error) {
	p, err := faultproxy.New(z.addr)
	if err != nil {
		return nil, err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.links = append(z.links, p)
	return zkLink{p}, nil
}

type zkLink struct{ p *faultproxy.Proxy }

func (l zkLink) endpoints() []string { return []string{l.p.Addr()} }
func (l zkLink) blackhole()          { l.p.Blackhole() }
func (l zkLink) heal()               { l.p.Heal() }
func (l zkLink) close()              { l.p.Close() }

// stopServer stops the server: SIGKILL for -1, SIGTERM otherwise.
func (z *zooKeeper) stopServer(member int) (what, kind string, start func() error, err error) {
	if z.srv == nil {
		return "", "", nil, fmt.Errorf("the shared server at %s cannot be restarted", z.addr)
	}
	if member < 0 {
		z.srv.Kill()
		return "server killed (SIGKILL)", "SIGKILL", z.start, nil
	}
	z.srv.Stop()
	return "server stopped (SIGTERM)", "SIGTERM", z.start, nil
}

// start starts the stopped server again and waits until it serves.
func (z *zooKeeper) start() (err error) {
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(fatalf)
			if !ok {
				panic(p)
			}
			err = fmt.Errorf("restarting ZooKeeper: %s", string(f))
		}
	}()
	z.srv.Start()
	return nil
}

// leftovers lists the znodes under root: every znode when the server
// deletes empty containers promptly, else those that are not empty
// directories (see zktest.Leftovers); but for the status and history
// records under root/rec, which are kept on purpose and are not
// ephemeral.
func (z *zooKeeper) leftovers(root string) ([]string, error) {
	nodes, err := zktest.Snapshot(z.addr, root)
	if err != nil {
		return nil, err
	}
	return zkLeftovers(nodes, root, z.containersGo), nil
}

// zkLeftovers is leftovers over the znodes under root, as listed; with
// containersGo, empty directories count too.
func zkLeftovers(nodes []zktest.Node, root string, containersGo bool) []string {
	var out []string
	for _, n := range nodes {
		_, ephemeral := n.Ephemeral()
		switch {
		case (n.Path == root+"/rec" || strings.HasPrefix(n.Path, root+"/rec/")) && !ephemeral:
			// Status and history records outlive their writers by design.
		case containersGo || !n.Directory():
			out = append(out, n.String())
		}
	}
	return out
}
