package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/zktest"
)

// The digest credentials of the tests: alice runs the deployment, mallory
// is another identity on the same server.
const (
	alicePassword   = "alice:secret"
	malloryPassword = "mallory:other"
)

var (
	aliceACL   = zk.DigestACL(zk.PermAll, "alice", "secret")
	malloryACL = zk.DigestACL(zk.PermAll, "mallory", "other")
	worldACL   = zk.WorldACL(zk.PermAll)
)

func withAlice() zookeeper.Option { return zookeeper.WithAuth("digest", []byte(alicePassword)) }

// Without WithACL the ACL follows WithAuth: the creator's alone with
// credentials, anyone's without; WithACL, given before or after WithAuth,
// wins.
func TestDefaultACL(t *testing.T) {
	t.Parallel()
	readable := append(zk.AuthACL(zk.PermAll), zk.WorldACL(zk.PermRead)...)
	for _, tc := range []struct {
		name string
		opts []zookeeper.Option
		want []zk.ACL
	}{
		{"no auth", nil, worldACL},
		{"auth", []zookeeper.Option{withAlice()}, zk.AuthACL(zk.PermAll)},
		{"auth twice", []zookeeper.Option{withAlice(), zookeeper.WithAuth("digest", []byte(malloryPassword))}, zk.AuthACL(zk.PermAll)},
		{"auth then world", []zookeeper.Option{withAlice(), zookeeper.WithACL(worldACL...)}, worldACL},
		{"world then auth", []zookeeper.Option{zookeeper.WithACL(worldACL...), withAlice()}, worldACL},
		{"auth, world reads", []zookeeper.Option{withAlice(), zookeeper.WithACL(readable...)}, readable},
		{"no auth, digest", []zookeeper.Option{zookeeper.WithACL(aliceACL...)}, aliceACL},
	} {
		b, err := zookeeper.New([]string{"zk1"}, tc.opts...)
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, b.ACL(), tc.name)
		acl := b.ACL()
		acl[0].Perms = 0
		assert.Equal(t, tc.want, b.ACL(), "%s: ACL returns a copy", tc.name)
		require.NoError(t, b.Close())
	}
}

// dialAs opens a plain go-zookeeper connection to addr that has presented
// the digest credentials given (none: an anonymous client), and waits for
// its session. It is closed, its goroutines gone, when the test ends.
func dialAs(t *testing.T, addr string, digests ...string) *zk.Conn {
	t.Helper()
	c, closeConn, err := dialDigest(addr, digests...)
	require.NoError(t, err)
	t.Cleanup(closeConn)
	return c
}

func dialDigest(addr string, digests ...string) (*zk.Conn, func(), error) {
	c, events, err := zk.Connect([]string{addr}, 4*time.Second,
		zk.WithLogger(log.New(io.Discard, "", 0)), zk.WithLogInfo(false))
	if err != nil {
		return nil, nil, err
	}
	closeConn := func() {
		c.Close()
		for range events {
		}
	}
	for deadline := time.Now().Add(10 * time.Second); c.State() != zk.StateHasSession; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			closeConn()
			return nil, nil, fmt.Errorf("no session with %s after 10s", addr)
		}
	}
	for _, d := range digests {
		if err := c.AddAuth("digest", []byte(d)); err != nil {
			closeConn()
			return nil, nil, fmt.Errorf("add auth %s: %w", d, err)
		}
	}
	return c, closeConn, nil
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// securedRoot returns a root of the test's own for backends whose znodes
// are not anyone's: <base>/app/simba, where base is a persistent world
// znode under /simba-test that the test creates (so that /simba-test
// itself is never created with a test's ACL, which would lock the other
// tests out of it), and app and simba are left for the backend to create.
// zktest.Root cannot be used: its clean-up reads anonymously. When the
// test ends (call securedRoot before creating the backends, so that this
// runs after they are closed), it checks that nothing but directories and
// records is left under base, reading as every identity given, then
// deletes it all.
func securedRoot(t *testing.T, addr string, digests ...string) string {
	t.Helper()
	name := strings.Trim(unsafeName.ReplaceAllString(t.Name(), "_"), "_.-")
	base := fmt.Sprintf("/simba-test/%s-%08x", name, rand.Uint32())
	c := dialAs(t, addr)
	for attempt := 0; ; attempt++ {
		_, err := c.Create(base, nil, 0, worldACL)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, zk.ErrNoNode, "create %s", base)
		require.Less(t, attempt, 5, "create %s", base)
		// /simba-test is missing (or was just reaped, being an empty container).
		if _, err := c.CreateContainer("/simba-test", nil, zk.FlagContainer, worldACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			require.NoError(t, err, "create /simba-test")
		}
	}
	t.Cleanup(func() {
		c, closeConn, err := dialDigest(addr, digests...)
		if err != nil {
			t.Errorf("checking what is left under %s: %v", base, err)
			return
		}
		defer closeConn()
		var left []zktest.Node
		for deadline := time.Now().Add(6 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			left, err = zktest.Tree(c, base)
			if err != nil {
				t.Errorf("reading what is left under %s: %v", base, err)
				return
			}
			left = slices.DeleteFunc(left, func(n zktest.Node) bool {
				return n.Directory() || strings.Contains(n.Path, zktest.RecordsDir+"/")
			})
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
		}
		for _, n := range left {
			t.Errorf("left under %s: %s", base, n)
		}
		if err := zktest.DeleteTree(c, base); err != nil {
			t.Errorf("deleting %s: %v", base, err)
		}
	})
	return base + "/app/simba"
}

// populate gives session s of b a lease, a membership and a fenced record
// (so every kind of znode: the root and its missing parents, the lease,
// group and record directories, a lease, a member, a record), and returns
// the lease and the paths of the lease, member and record znodes.
func populate(t *testing.T, b *zookeeper.Backend, s backend.Session) (l backend.Lease, lease, member, record string) {
	t.Helper()
	l, err := s.Acquire(t.Context(), "ingest")
	require.NoError(t, err)
	require.NoError(t, s.Join(t.Context(), "workers", backend.Member{ID: "n1", Data: []byte("host-1")}))
	_, err = s.(backend.Records).PutRecord(t.Context(), "status/ingest", []byte("ok"), backend.Condition{Lease: "ingest", Token: l.Token()})
	require.NoError(t, err)
	root := b.Root()
	return l, zookeeper.CandidacyPath(l), root + "/group/workers/" + s.ID(), root + "/rec/status/ingest/="
}

// aclOf reads the ACL of path on c.
func aclOf(t *testing.T, c *zk.Conn, path string) []zk.ACL {
	t.Helper()
	acl, _, err := c.GetACL(path)
	require.NoError(t, err, "get ACL of %s", path)
	return acl
}

// With credentials and no WithACL, every znode the backend creates, from
// the root's missing parents down, is its creator's alone: a client
// without the credentials, or with others, can neither read, write,
// create nor delete anything, and sees only that the znodes exist.
func TestAuthCreatesCreatorOnlyZnodes(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := securedRoot(t, addr, alicePassword)
	b := newBackendAt(t, addr, root, withAlice())
	s := open(t, b)
	keepAlive(t, s)
	l, lease, member, record := populate(t, b, s)

	alice := dialAs(t, addr, alicePassword)
	base := strings.TrimSuffix(root, "/app/simba")
	nodes, err := zktest.Tree(alice, base)
	require.NoError(t, err)
	var paths []string
	for _, n := range nodes {
		paths = append(paths, n.Path)
		assert.Equal(t, aliceACL, aclOf(t, alice, n.Path), n.Path)
	}
	for _, p := range []string{base + "/app", root, root + "/lease", lease, root + "/group", root + "/group/workers", member, root + "/rec", root + "/rec/status", root + "/rec/status/ingest", record} {
		assert.Contains(t, paths, p)
	}

	for who, c := range map[string]*zk.Conn{"anonymous": dialAs(t, addr), "mallory": dialAs(t, addr, malloryPassword)} {
		for _, p := range []string{root, lease, member, record} {
			_, _, err := c.Get(p)
			assert.ErrorIs(t, err, zk.ErrNoAuth, "%s: get %s", who, p)
			_, err = c.Set(p, []byte("forged"), -1)
			assert.ErrorIs(t, err, zk.ErrNoAuth, "%s: set %s", who, p)
			assert.ErrorIs(t, c.Delete(p, -1), zk.ErrNoAuth, "%s: delete %s", who, p)
			_, err = c.SetACL(p, worldACL, -1)
			assert.ErrorIs(t, err, zk.ErrNoAuth, "%s: set ACL of %s", who, p)
			ok, _, err := c.Exists(p)
			assert.NoError(t, err, "%s: exists %s is not checked", who, p)
			assert.True(t, ok, "%s: exists %s", who, p)
		}
		for _, dir := range []string{root, root + "/lease", root + "/group/workers", root + "/rec/status"} {
			_, _, err := c.Children(dir)
			assert.ErrorIs(t, err, zk.ErrNoAuth, "%s: children of %s", who, dir)
			_, err = c.Create(dir+"/forged", nil, 0, worldACL)
			assert.ErrorIs(t, err, zk.ErrNoAuth, "%s: create under %s", who, dir)
		}
		_, err := c.Create(root+"/lease/other", nil, zk.FlagEphemeral, worldACL)
		assert.ErrorIs(t, err, zk.ErrNoAuth, "%s: forge a holder", who)
	}

	select {
	case <-l.Lost():
		t.Fatal("the lease was lost")
	default:
	}
	got, err := s.(backend.Records).GetRecord(t.Context(), "status/ingest")
	require.NoError(t, err)
	assert.Equal(t, "ok", string(got.Value))
	require.NoError(t, l.Release(t.Context()))
	require.NoError(t, s.Leave(t.Context(), "workers"))
}

// Two clients with the same credentials share the root as without ACLs:
// the second reads what the first wrote, waits while the first holds the
// lease, and takes over once it has closed, with a higher token.
func TestAuthSameCredentialsShare(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := securedRoot(t, addr, alicePassword)
	first := client(t, newBackendAt(t, addr, root, withAlice()), time.Second)
	second := client(t, newBackendAt(t, addr, root, withAlice()), time.Second)

	ch := make(chan started, 2)
	var terms termLog
	firstTask, err := first.Election("ingest").RunWhileLeader(terms.task("first", ch))
	require.NoError(t, err)
	t1 := next(t, ch, 10*time.Second, "the first client's term")
	require.Equal(t, "first", t1.who)
	secondTask, err := second.Election("ingest").RunWhileLeader(terms.task("second", ch))
	require.NoError(t, err)
	if s, ok := await(ch, 2*time.Second); ok {
		t.Fatalf("%s started a term while the first client held the lease", s.who)
	}

	// The second client's backend reads and writes what the first created.
	b := newBackendAt(t, addr, root, withAlice())
	s := open(t, b)
	keepAlive(t, s)
	r := s.(backend.Records)
	recs, err := r.ListRecords(t.Context(), "status/")
	require.NoError(t, err)
	assert.NotEmpty(t, recs, "the first client's status records")
	_, err = r.PutRecord(t.Context(), "notes/x", []byte("1"), backend.Condition{})
	require.NoError(t, err)
	require.NoError(t, r.DeleteRecord(t.Context(), "notes/x", backend.Condition{}))
	held, err := s.(backend.LeaseLister).HeldLeases(t.Context(), "")
	require.NoError(t, err)
	assert.Equal(t, []string{"ingest"}, held)
	require.NoError(t, s.Close(t.Context()))

	require.NoError(t, firstTask.Close())
	t2 := next(t, ch, 10*time.Second, "the second client takes over")
	assert.Equal(t, "second", t2.who)
	assert.Greater(t, t2.term.Token(), t1.term.Token())
	require.NoError(t, secondTask.Close())
	terms.check(t)
}

// A client with other credentials cannot take part: its session opens and
// renews (exists is not checked), but everything else fails with an error
// matching zk.ErrNoAuth, and it never holds the lease.
func TestAuthOtherCredentialsRefused(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := securedRoot(t, addr, alicePassword)
	b := newBackendAt(t, addr, root, withAlice())
	s := open(t, b)
	keepAlive(t, s)
	l, _, _, _ := populate(t, b, s)

	other := open(t, newBackendAt(t, addr, root, zookeeper.WithAuth("digest", []byte(malloryPassword))))
	_, err := other.KeepAlive(t.Context())
	require.NoError(t, err)
	keepAlive(t, other)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for _, name := range []string{"ingest", "report"} { // held, free
		start := time.Now()
		_, err = other.Acquire(ctx, name)
		assert.ErrorIs(t, err, zk.ErrNoAuth, "acquire %s", name)
		assert.Less(t, time.Since(start), time.Second, "acquire %s returns the refusal, not retrying", name)
	}
	assert.ErrorIs(t, other.Join(t.Context(), "workers", backend.Member{ID: "n2"}), zk.ErrNoAuth)
	_, err = other.Members(t.Context(), "workers")
	assert.ErrorIs(t, err, zk.ErrNoAuth)
	r := other.(backend.Records)
	_, err = r.GetRecord(t.Context(), "status/ingest")
	assert.ErrorIs(t, err, zk.ErrNoAuth)
	_, err = r.PutRecord(t.Context(), "status/ingest", []byte("forged"), backend.Condition{})
	assert.ErrorIs(t, err, zk.ErrNoAuth)
	_, err = r.PutRecord(t.Context(), "new", []byte("forged"), backend.Condition{})
	assert.ErrorIs(t, err, zk.ErrNoAuth)
	assert.ErrorIs(t, r.DeleteRecord(t.Context(), "status/ingest", backend.Condition{}), zk.ErrNoAuth)

	select {
	case <-l.Lost():
		t.Fatal("the lease was lost")
	default:
	}
	require.NoError(t, l.Release(t.Context()))
	require.NoError(t, s.Leave(t.Context(), "workers"))
}

// The creator's ACL asked for explicitly by a client without credentials:
// the server refuses every create (zk.ErrInvalidACL), and Acquire says so
// at once.
func TestCreatorACLWithoutCredentials(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	s := open(t, newBackendAt(t, addr, root, zookeeper.WithACL(zk.AuthACL(zk.PermAll)...)))
	start := time.Now()
	_, err := s.Acquire(t.Context(), "ingest")
	assert.ErrorIs(t, err, zk.ErrInvalidACL)
	assert.Less(t, time.Since(start), time.Second)
	_, err = s.(backend.Records).PutRecord(t.Context(), "k", []byte("v"), backend.Condition{})
	assert.ErrorIs(t, err, zk.ErrInvalidACL)
	ok, _, err := zktest.Connect(t, addr).Exists(root)
	require.NoError(t, err)
	assert.False(t, ok, "nothing was created")
}

// WithACL(zk.WorldACL(zk.PermAll)) keeps the old behaviour for a client
// with credentials: anyone reads its znodes, and deletes its lease.
func TestAuthWithWorldACL(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := securedRoot(t, addr, alicePassword)
	b := newBackendAt(t, addr, root, withAlice(), zookeeper.WithACL(worldACL...))
	s := open(t, b)
	keepAlive(t, s)
	l, lease, member, record := populate(t, b, s)
	anyone := dialAs(t, addr)
	for _, p := range []string{root, root + "/lease", lease, member, record} {
		assert.Equal(t, worldACL, aclOf(t, anyone, p), p)
		_, _, err := anyone.Get(p)
		assert.NoError(t, err, "get %s", p)
	}
	require.NoError(t, anyone.Delete(lease, -1))
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost not closed after the znode was deleted")
	}
	require.NoError(t, s.Leave(t.Context(), "workers"))
}

// Without credentials the znodes stay anyone's, as before.
func TestNoAuthStaysWorld(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	b := newBackendAt(t, addr, root)
	s := open(t, b)
	keepAlive(t, s)
	l, lease, member, record := populate(t, b, s)
	anyone := zktest.Connect(t, addr)
	nodes, err := zktest.Tree(anyone, root)
	require.NoError(t, err)
	paths := []string{root}
	for _, n := range nodes {
		paths = append(paths, n.Path)
	}
	assert.Subset(t, paths, []string{lease, member, record})
	for _, p := range paths {
		assert.Equal(t, worldACL, aclOf(t, anyone, p), p)
	}
	require.NoError(t, l.Release(t.Context()))
	require.NoError(t, s.Leave(t.Context(), "workers"))
}

// The ACL of the package documentation that opens reads: anyone reads,
// only the creator's identities write, create and delete.
func TestAuthWorldReadable(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := securedRoot(t, addr, alicePassword)
	b := newBackendAt(t, addr, root, withAlice(),
		zookeeper.WithACL(append(zk.AuthACL(zk.PermAll), zk.WorldACL(zk.PermRead)...)...))
	s := open(t, b)
	keepAlive(t, s)
	l, lease, member, record := populate(t, b, s)
	want := append(slices.Clone(aliceACL), zk.WorldACL(zk.PermRead)...)
	anyone, alice := dialAs(t, addr), dialAs(t, addr, alicePassword)
	for _, p := range []string{root, root + "/lease", lease, member, record} {
		assert.Equal(t, want, aclOf(t, alice, p), p)
		masked := []zk.ACL{{Perms: zk.PermAll, Scheme: "digest", ID: "alice:x"}, want[1]}
		assert.Equal(t, masked, aclOf(t, anyone, p), "%s: the server hides the digest from a reader without admin rights", p)
		_, _, err := anyone.Get(p)
		assert.NoError(t, err, "get %s", p)
		_, err = anyone.Set(p, []byte("forged"), -1)
		assert.ErrorIs(t, err, zk.ErrNoAuth, "set %s", p)
		assert.ErrorIs(t, anyone.Delete(p, -1), zk.ErrNoAuth, "delete %s", p)
	}
	_, _, err := anyone.Children(root + "/lease")
	assert.NoError(t, err)
	_, err = anyone.Create(root+"/lease/other", nil, zk.FlagEphemeral, worldACL)
	assert.ErrorIs(t, err, zk.ErrNoAuth, "forge a holder")
	require.NoError(t, l.Release(t.Context()))
	require.NoError(t, s.Leave(t.Context(), "workers"))
}

// A deployment that turns credentials on keeps the world ACL of the znodes
// created before: the root, the records and their directories, under which
// anyone still deletes and creates, until an operator sets the ACLs (as
// zkCli.sh's "setAcl -R <root> auth::cdrwa" does, after "addauth").
func TestAuthKeepsEarlierWorldZnodes(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	root := securedRoot(t, addr, alicePassword)
	open1 := open(t, newBackendAt(t, addr, root))
	keepAlive(t, open1)
	_, err := open1.(backend.Records).PutRecord(t.Context(), "old/k", []byte("1"), backend.Condition{})
	require.NoError(t, err)
	require.NoError(t, open1.Close(t.Context()))

	s := open(t, newBackendAt(t, addr, root, withAlice()))
	keepAlive(t, s)
	r := s.(backend.Records)
	_, err = r.PutRecord(t.Context(), "old/k", []byte("2"), backend.Condition{})
	require.NoError(t, err, "a world record is still the deployment's")
	_, err = r.PutRecord(t.Context(), "new/k", []byte("1"), backend.Condition{})
	require.NoError(t, err)
	l, err := s.Acquire(t.Context(), "ingest")
	require.NoError(t, err)

	anyone := dialAs(t, addr)
	alice := dialAs(t, addr, alicePassword)
	for p, want := range map[string][]zk.ACL{
		root:                               worldACL,
		root + "/rec":                      worldACL,
		root + "/rec/old":                  worldACL,
		root + "/rec/old/k/=":              worldACL,
		root + "/rec/new":                  aliceACL,
		root + "/rec/new/k/=":              aliceACL,
		root + "/lease":                    aliceACL, // created after: it did not exist
		root + "/lease/ingest":             aliceACL,
		root + "/rec/new/k":                aliceACL,
		root + "/rec/old/k":                worldACL,
		strings.TrimSuffix(root, "/simba"): worldACL,
	} {
		assert.Equal(t, want, aclOf(t, alice, p), p)
	}
	_, err = anyone.Create(root+"/rec/forged", nil, 0, worldACL)
	assert.NoError(t, err, "create under a world directory")
	require.NoError(t, anyone.Delete(root+"/rec/forged", -1))
	_, err = anyone.Set(root+"/rec/old/k/=", []byte("forged"), -1)
	assert.NoError(t, err, "write a world record")

	// The operator's fix: every znode under the root gets the creator's ACL.
	nodes, err := zktest.Tree(alice, root)
	require.NoError(t, err)
	for _, p := range append([]string{root}, pathsOf(nodes)...) {
		_, err := alice.SetACL(p, zk.AuthACL(zk.PermAll), -1)
		require.NoError(t, err, "set ACL of %s", p)
	}
	_, err = anyone.Create(root+"/rec/forged", nil, 0, worldACL)
	assert.ErrorIs(t, err, zk.ErrNoAuth)
	_, err = anyone.Set(root+"/rec/old/k/=", []byte("forged"), -1)
	assert.ErrorIs(t, err, zk.ErrNoAuth)
	_, err = r.PutRecord(t.Context(), "old/k", []byte("3"), backend.Condition{})
	require.NoError(t, err)
	require.NoError(t, l.Release(t.Context()))
}

func pathsOf(nodes []zktest.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Path)
	}
	return out
}
