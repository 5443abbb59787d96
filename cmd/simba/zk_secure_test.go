package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/zktest"
)

// Digest credentials of the ZooKeeper tests: app runs the nodes, viewer
// may read their znodes, mallory is anyone else.
const (
	zkApp     = "app:zk-app-secret"
	zkViewer  = "viewer:zk-viewer-secret"
	zkMallory = "mallory:zk-mallory-secret"
)

// securedZK is a root on a ZooKeeper server of the test's own whose
// znodes are app's, readable by viewer.
type securedZK struct {
	addr, root string
	app        *zk.Conn // authenticated as app
}

func startSecuredZK(t *testing.T) *securedZK {
	t.Helper()
	srv := zktest.StartServer(t)
	base := fmt.Sprintf("/secured-%08x", rand.Uint32())
	plain := zktest.Connect(t, srv.Addr)
	if _, err := plain.Create(base, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	s := &securedZK{addr: srv.Addr, root: base + "/app", app: zktest.ConnectAs(t, srv.Addr, zkApp)}
	t.Cleanup(func() { // after the nodes
		if err := zktest.DeleteTree(s.app, base); err != nil {
			t.Errorf("deleting %s: %v", base, err)
		}
	})
	return s
}

// acl is the nodes' ACL: everything to app, reads to viewer.
func zkACL() []zk.ACL {
	u, p, _ := strings.Cut(zkViewer, ":")
	return append(zk.AuthACL(zk.PermAll), zk.DigestACL(zk.PermRead, u, p)...)
}

func (s *securedZK) nodeBackend(t *testing.T) backend.Backend {
	t.Helper()
	b, err := zookeeper.New([]string{s.addr}, zookeeper.WithRoot(s.root),
		zookeeper.WithAuth("digest", []byte(zkApp)), zookeeper.WithACL(zkACL()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func (s *securedZK) args(auth string) []string {
	a := []string{"--zk", s.addr, "--prefix", s.root}
	if auth != "" {
		a = append(a, "--zk-auth", auth)
	}
	return a
}

// tree returns the znodes under the root that hold data (see dataTree).
func (s *securedZK) tree(t *testing.T) string {
	t.Helper()
	return dataTree(t, s.app, s.root)
}

// dataTree returns every znode under root that holds data (records,
// leases, members), with its data version: what a write would create or
// change. Empty directories are left out: the server deletes those of the
// leases by itself once a closed node has left them.
func dataTree(t *testing.T, c *zk.Conn, root string) string {
	t.Helper()
	nodes, err := zktest.Tree(c, root)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, n := range nodes {
		if !n.Directory() {
			fmt.Fprintf(&b, "%s v%d\n", n.Path, n.Stat.Version)
		}
	}
	return b.String()
}

// Every command works with the nodes' digest credentials; without them or
// with a wrong password the command is refused with one line and exit
// status 5, and writes nothing; the viewer, whom the ACL lets read, reads.
func TestSecuredZooKeeper(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real ZooKeeper")
	}
	s := startSecuredZK(t)
	rec := &recorder{}
	a := startNode(t, s.nodeBackend(t), "a", e2eTTL, rec)
	a.schedule(t, "report", simba.FixedRate(time.Hour))
	a.whileLeader(t, "ingest")
	a.group(t, "billing", 4)
	startNode(t, s.nodeBackend(t), "z", e2eTTL, rec).whileLeader(t, "ingest")
	app := s.args(zkApp)
	eventually(t, 30*time.Second, "report has run and billing is held", func() bool {
		r := runIn(t, nil, append([]string{"status", "--json"}, app...)...)
		if r.code != exitOK {
			return false
		}
		o := decode[overview](t, r.stdout)
		return o.Jobs.Total == 1 && o.Groups.Held == 4
	})

	// Before the operations below: the records the command creates get
	// its default ACL, app's alone (see docs/OPERATING.md), which the
	// viewer cannot read.
	t.Run("ReadOnlyUser", func(t *testing.T) {
		requireExitOK(t, "the viewer", readCommands, s.args(zkViewer))
	})

	t.Run("TheNodesCredentials", func(t *testing.T) {
		requireExitOK(t, "app", everyCommand("20s"), app)
		if r := runIn(t, map[string]string{envZKAuth: zkApp}, append([]string{"jobs"}, s.args("")...)...); r.code != exitOK {
			t.Errorf("jobs with $%s: %v", envZKAuth, r)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		for _, tc := range []struct {
			name, auth string
			want       []string
		}{
			{"no credentials", "", []string{"refused access without credentials", "not authenticated"}},
			{"a wrong password", "app:wrong-password", []string{"refused access as app", "not authenticated"}},
			{"another user", zkMallory, []string{"refused access as mallory", "not authenticated"}},
		} {
			for _, args := range [][]string{{"status"}, {"disable", "report", "--reason", "refused"}} {
				r := runIn(t, nil, append(args, s.args(tc.auth)...)...)
				requireOneLine(t, tc.name+": "+strings.Join(args, " "), r, exitRefused, tc.want...)
				if strings.Contains(r.stderr, "zk-mallory-secret") {
					t.Errorf("a password is printed: %v", r)
				}
				t.Logf("%s: simba %s: exit %d: %s", tc.name, strings.Join(args, " "), r.code, strings.TrimSpace(r.stderr))
			}
		}
	})
}

// A refused command writes nothing: with no node running, the tree under
// the root is the same after it.
func TestSecuredZooKeeperRefusedWritesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real ZooKeeper")
	}
	s := startSecuredZK(t)
	rec := &recorder{}
	n := startNode(t, s.nodeBackend(t), "a", e2eTTL, rec)
	n.schedule(t, "report", simba.FixedRate(time.Hour))
	eventually(t, 15*time.Second, "report has run", func() bool {
		return runIn(t, nil, append([]string{"history", "report"}, s.args(zkApp)...)...).code == exitOK
	})
	if r := runIn(t, nil, append([]string{"disable", "report", "--reason", "before"}, s.args(zkApp)...)...); r.code != exitOK {
		t.Fatalf("disable as app: %v", r)
	}
	n.client.Close()
	before := s.tree(t)
	for _, auth := range []string{"", "app:wrong-password", zkMallory} {
		for _, args := range [][]string{{"enable", "report"}, {"trigger", "report"}, {"drain", "a"}} {
			r := runIn(t, nil, append(args, s.args(auth)...)...)
			if r.code != exitRefused {
				t.Errorf("simba %s with %q: %v", strings.Join(args, " "), auth, r)
			}
		}
	}
	if after := s.tree(t); after != before {
		t.Errorf("the tree changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
