// Package zktest gives tests a ZooKeeper server and keeps them apart on it.
//
// The shared server is the one scripts/with-zookeeper.sh starts (make test
// runs the tests through it) and names in SIMBA_ZK_ADDR. [Addr] returns it,
// or skips the test when it is not set, and fails it instead when
// SIMBA_REQUIRE_SERVERS=1 (as .ci/run sets). [Root] gives each test a znode
// of its own and checks, when the test ends, that nothing but empty
// container znodes is left under it. [StartServer] starts a server of the
// test's own, for tests that stop or restart it; [StartTLSServer] one that
// also serves TLS, with certificates from internal/certs; [StartEnsemble]
// a replicated ZooKeeper of three (or n) servers, for tests that kill its
// leader or a follower, take its quorum away, or (started
// [WithQuorumProxies]) cut a server from the others.
//
// Records (backend.Records) outlive sessions by design: [Leftovers] and
// the check of [Root] let them be, and Root deletes them with the rest.
package zktest

import (
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// Environment variables read by the helpers.
const (
	// EnvAddr names the shared server's address, host:port.
	EnvAddr = "SIMBA_ZK_ADDR"
	// EnvRequire, set to 1, turns a missing server into a test failure.
	EnvRequire = "SIMBA_REQUIRE_SERVERS"
)

// Required reports whether tests must fail, rather than skip, without a
// server.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Unavailable skips t with the reason, or fails it when servers are
// required.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("%s (%s=1: a missing ZooKeeper server is a failure)", msg, EnvRequire)
	}
	t.Skipf("%s; run the tests through scripts/with-zookeeper.sh (make test does) or set %s", msg, EnvAddr)
}

// Addr returns the shared server's address from SIMBA_ZK_ADDR, or skips the
// test (fails it under SIMBA_REQUIRE_SERVERS=1) when it is not set.
func Addr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		Unavailable(t, "no ZooKeeper server: %s is not set", EnvAddr)
	}
	return addr
}

// Connect opens a plain go-zookeeper connection to addr for inspecting the
// server (addr may name the servers of an ensemble, see [Ensemble.Addr]). It is closed, and its goroutines have exited, when the test ends.
func Connect(t testing.TB, addr string) *zk.Conn {
	t.Helper()
	c, closeConn, err := dial(addr)
	if err != nil {
		t.Fatalf("zktest: %v", err)
	}
	t.Cleanup(closeConn)
	return c
}

// ConnectAs is Connect for a connection that has presented the digest
// credentials given ("user:password"), to inspect znodes whose ACL admits
// only them.
func ConnectAs(t testing.TB, addr string, digests ...string) *zk.Conn {
	t.Helper()
	c := Connect(t, addr)
	for _, d := range digests {
		if err := c.AddAuth("digest", []byte(d)); err != nil {
			t.Fatalf("zktest: add digest credentials: %v", err)
		}
	}
	return c
}

// dial opens a plain go-zookeeper connection to addr (or to one of the
// servers of an ensemble, comma-separated; see [Ensemble.Addr]) and waits
// for its session; closeConn closes it and waits for its goroutines.
func dial(addr string) (c *zk.Conn, closeConn func(), err error) {
	c, events, err := zk.Connect(strings.Split(addr, ","), 4*time.Second,
		zk.WithLogger(log.New(io.Discard, "", 0)), zk.WithLogInfo(false))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	closeConn = func() {
		c.Close()
		for range events {
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			closeConn()
			return nil, nil, fmt.Errorf("no session with %s after 10s", addr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c, closeConn, nil
}

// Snapshot returns [Tree] of root, read on a connection of its own that is
// closed, its goroutines gone, when Snapshot returns.
func Snapshot(addr, root string) ([]Node, error) {
	c, closeConn, err := dial(addr)
	if err != nil {
		return nil, err
	}
	defer closeConn()
	return Tree(c, root)
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// Root returns a znode path for the test alone, under /simba-test (on the
// server at addr, or the ensemble [Ensemble.Addr] names), and
// registers a clean-up that fails the test if anything but empty directory
// znodes and records (see [Leftovers]) is left under it once the test's
// own clean-ups have run (it waits up to 6s, longer than the largest
// session timeout the test server grants, for sessions that were abandoned
// to expire), then deletes it.
// Call it before the clean-ups that close the test's backends are
// registered, so that it runs after them.
func Root(t testing.TB, addr string) string {
	t.Helper()
	name := strings.Trim(unsafeChars.ReplaceAllString(t.Name(), "_"), "_.-")
	if len(name) > 80 {
		name = name[:80]
	}
	root := fmt.Sprintf("/simba-test/%s-%08x", name, rand.Uint32())
	t.Cleanup(func() {
		c, closeConn, err := dial(addr)
		if err != nil {
			t.Errorf("zktest: checking what is left under %s: %v", root, err)
			return
		}
		defer closeConn()
		var left []Node
		deadline := time.Now().Add(6 * time.Second)
		for {
			var err error
			left, err = Leftovers(c, root)
			if err != nil {
				t.Errorf("zktest: reading what is left under %s: %v", root, err)
				return
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, n := range left {
			t.Errorf("zktest: left under the root: %s", n)
		}
		if err := DeleteTree(c, root); err != nil {
			t.Errorf("zktest: deleting %s: %v", root, err)
		}
	})
	return root
}

// Node is one znode.
type Node struct {
	Path string  // the znode's full path
	Stat zk.Stat // its stat, as read
	Data []byte  // its data
}

// Ephemeral reports whether the znode is ephemeral, and its owner session.
// (The server shows 0 as the owner of container and TTL znodes.)
func (n Node) Ephemeral() (owner int64, ok bool) {
	return n.Stat.EphemeralOwner, n.Stat.EphemeralOwner != 0
}

// Directory reports whether the znode is an empty-handed directory: not
// ephemeral and without data, such as the container znodes simba creates
// for its leases and groups (the server deletes those once they are empty).
func (n Node) Directory() bool {
	_, eph := n.Ephemeral()
	return !eph && len(n.Data) == 0
}

// String describes the znode.
func (n Node) String() string {
	kind := "persistent"
	if owner, ok := n.Ephemeral(); ok {
		kind = fmt.Sprintf("ephemeral of session %016x", uint64(owner))
	}
	return fmt.Sprintf("%s (%s, czxid %d, %d bytes, %d children)", n.Path, kind, n.Stat.Czxid, len(n.Data), n.Stat.NumChildren)
}

// Tree lists every znode under root, root excluded, parents before their
// children, siblings in name order. A missing root has no znodes.
func Tree(c *zk.Conn, root string) ([]Node, error) {
	var out []Node
	var walk func(string) error
	walk = func(p string) error {
		children, _, err := c.Children(p)
		if err == zk.ErrNoNode {
			return nil
		}
		if err != nil {
			return fmt.Errorf("children of %s: %w", p, err)
		}
		slices.Sort(children)
		for _, ch := range children {
			cp := p + "/" + ch
			data, st, err := c.Get(cp)
			if err == zk.ErrNoNode {
				continue
			}
			if err != nil {
				return fmt.Errorf("get %s: %w", cp, err)
			}
			out = append(out, Node{Path: cp, Stat: *st, Data: data})
			if err := walk(cp); err != nil {
				return err
			}
		}
		return nil
	}
	return out, walk(root)
}

// RecordsDir is the znode, under a backend's root, below which the
// ZooKeeper backend keeps its records (backend.Records): persistent
// znodes that outlive the sessions that wrote them, by design.
const RecordsDir = "/rec"

// Record reports whether the znode is one of the records kept under root
// (see [RecordsDir]): persistent, below root+RecordsDir.
func (n Node) Record(root string) bool {
	_, eph := n.Ephemeral()
	return !eph && strings.HasPrefix(n.Path, root+RecordsDir+"/")
}

// Leftovers returns the znodes under root that a closed client must not
// leave: every znode but empty-handed directories (see [Node.Directory])
// and records (see [Node.Record]).
func Leftovers(c *zk.Conn, root string) ([]Node, error) {
	nodes, err := Tree(c, root)
	return slices.DeleteFunc(nodes, func(n Node) bool { return n.Directory() || n.Record(root) }), err
}

// DeleteTree deletes root and everything under it.
func DeleteTree(c *zk.Conn, root string) error {
	nodes, err := Tree(c, root)
	if err != nil {
		return err
	}
	slices.Reverse(nodes) // children first
	for _, n := range nodes {
		if err := c.Delete(n.Path, -1); err != nil && err != zk.ErrNoNode {
			return fmt.Errorf("delete %s: %w", n.Path, err)
		}
	}
	if err := c.Delete(root, -1); err != nil && err != zk.ErrNoNode {
		return fmt.Errorf("delete %s: %w", root, err)
	}
	return nil
}

// EnvContainerCheck names how often the shared server deletes empty
// container znodes, when the script that started it says so.
const EnvContainerCheck = "SIMBA_ZK_CONTAINER_CHECK_MS"

// ContainerCheckInterval returns how often the shared server deletes empty
// container znodes, or 0 when unknown (a server not started by
// scripts/with-zookeeper.sh).
func ContainerCheckInterval() time.Duration {
	ms, err := strconv.Atoi(os.Getenv(EnvContainerCheck))
	if err != nil || ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
