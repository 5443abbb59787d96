package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/servers"
)

// Timing of the embedded cluster: a 20ms heartbeat and a 200ms election
// timeout, twice the timings of etcd's own integration tests, so that the
// three members in the (race-instrumented) test process keep their leader on
// a loaded two-core machine. Leases still go down to 1s.
const (
	etcdTickMs     = 20
	etcdElectionMs = 200
	// etcdExpiryCheck is how often the leader's lessor looks for expired
	// leases.
	etcdExpiryCheck = 500 * time.Millisecond
)

// TestEtcd plays a fault schedule on a 3-member etcd cluster, then the
// negative control and the planted bug.
func TestEtcd(t *testing.T) {
	t.Parallel()
	c := startEtcdCluster(t)
	before := c.raftTerm()
	testBackend(t, c)
	t.Logf("raft elections: %d", c.raftTerm()-before)
}

// etcdCluster is three embedded etcd members on 127.0.0.1, in the test
// process. Each client reaches every member through a proxy of its own.
type etcdCluster struct {
	t       *testing.T
	members []*etcdMember

	mu    sync.Mutex
	links []*etcdLink
	down  []bool // the members that are down, by index
}

type etcdMember struct {
	name       string
	dir        string
	clientHost string
	peerHost   string
	// peerFront is the proxy in front of the member's peer port, which the
	// member advertises to the others: closing it at the end resets the
	// peer connections that stopping the members leaves open (a stopped
	// member's peer server does not end the streams of the others, whose
	// goroutines would outlive the test).
	peerFront *faultproxy.Proxy
	cluster   string // the initial cluster: every member's name=peer URL
	e         *embed.Etcd
}

// startEtcdCluster starts three members and waits until they serve; they
// stop when the test ends.
func startEtcdCluster(t *testing.T) *etcdCluster {
	c := &etcdCluster{t: t, down: make([]bool, 3)}
	ports, err := freePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	// The data directories first: t.TempDir registers their removal with
	// its first call, and clean-ups run last registered first, so c.close,
	// registered after, stops the members before their directories go. The
	// other way round the members ran on for the length of c.close with
	// their directories gone, and a member whose file purge (every 30s)
	// came then ended the test process: os.Exit(1) from its logger's Fatal.
	var dirs []string
	for range 3 {
		dirs = append(dirs, filepath.Join(t.TempDir(), "etcd"))
	}
	t.Cleanup(c.close)
	var initial []string
	for i := range 3 {
		m := &etcdMember{name: fmt.Sprintf("m%d", i), dir: dirs[i],
			clientHost: ports[2*i], peerHost: ports[2*i+1]}
		if m.peerFront, err = faultproxy.New(m.peerHost); err != nil {
			t.Fatal(err)
		}
		c.members = append(c.members, m)
		initial = append(initial, fmt.Sprintf("%s=http://%s", m.name, m.peerFront.Addr()))
	}
	errs := make(chan error, 3)
	for _, m := range c.members {
		m.cluster = strings.Join(initial, ",")
		go func() {
			e, err := m.launch()
			m.e = e
			errs <- err
		}()
	}
	for range c.members {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// freePorts returns n distinct "127.0.0.1:port" addresses nothing listens
// on, below the kernel's ephemeral range (servers.FreePort): members
// restart on theirs.
func freePorts(n int) ([]string, error) {
	var out []string
	for len(out) < n {
		a, err := servers.FreeAddr()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// launch starts the member on its data and addresses, and waits until it
// serves (which takes a quorum).
func (m *etcdMember) launch() (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.TickMs = etcdTickMs
	cfg.ElectionMs = etcdElectionMs
	client := url.URL{Scheme: "http", Host: m.clientHost}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{{Scheme: "http", Host: m.peerHost}}
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: m.peerFront.Addr()}}
	cfg.InitialCluster = m.cluster
	cfg.InitialClusterToken = "simba-chaos"
	cfg.ClusterState = embed.ClusterStateFlagNew // ignored once the data exist
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(fatalLogger("etcd member " + m.name))
	cfg.LogLevel = "error"
	// No fsync: on a shared test machine a stalled fsync holds raft up for
	// longer than a TTL. The data survive a stop, as the process does not
	// crash.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd member %s: %w", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd member %s: %w", m.name, err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd member %s not ready after 60s", m.name)
	}
}

func (c *etcdCluster) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.links {
		l.close()
	}
	for _, m := range c.members {
		if m.e != nil {
			m.e.Close()
			m.e = nil
		}
	}
	for _, m := range c.members {
		if m.peerFront != nil {
			m.peerFront.Close()
		}
	}
}

func (c *etcdCluster) kind() string { return backendEtcd }

func (c *etcdCluster) newSpace() string {
	var b [4]byte
	rand.Read(b[:])
	return "/simba-chaos/" + hex.EncodeToString(b[:]) + "/"
}

func (c *etcdCluster) canRestart() bool { return true }

// expiryLag: the lessor's expiry check, and the leader change a member
// restart may cause: the new leader extends every lease by an election
// timeout, and is elected within two election timeouts.
func (c *etcdCluster) expiryLag() time.Duration {
	return etcdExpiryCheck + 3*etcdElectionMs*time.Millisecond
}

// raftTerm returns the raft term of a running member: it counts elections.
func (c *etcdCluster) raftTerm() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if m.e != nil {
			return m.e.Server.Term()
		}
	}
	return 0
}

// etcdLink is one client's proxies, one per member.
type etcdLink struct{ proxies []*faultproxy.Proxy }

func (c *etcdCluster) newLink() (link, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := &etcdLink{}
	for i, m := range c.members {
		p, err := faultproxy.New(m.clientHost)
		if err != nil {
			l.close()
			return nil, err
		}
		if c.down[i] {
			p.Refuse()
		}
		l.proxies = append(l.proxies, p)
	}
	c.links = append(c.links, l)
	return l, nil
}

func (l *etcdLink) endpoints() []string {
	var out []string
	for _, p := range l.proxies {
		out = append(out, p.Addr())
	}
	return out
}

func (l *etcdLink) blackhole() {
	for _, p := range l.proxies {
		p.Blackhole()
	}
}

func (l *etcdLink) heal() {
	for _, p := range l.proxies {
		p.Heal()
	}
}

func (l *etcdLink) close() {
	for _, p := range l.proxies {
		p.Close()
	}
}

// stopServer stops member m, or for -1 crashes the leader: a hard stop,
// without handing leadership over. The clients' connections to it are
// reset first (a stopping etcd waits for open streams to end).
func (c *etcdCluster) stopServer(member int) (what, kind string, start func() error, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.down, true); i >= 0 {
		return "", "", nil, fmt.Errorf("member %s is down already", c.members[i].name)
	}
	return c.stopLocked(member)
}

// stopLocked stops member m, or for -1 crashes the leader, whether or not
// another is down already (a second one down loses the quorum).
func (c *etcdCluster) stopLocked(member int) (what, kind string, start func() error, err error) {
	i, crash := member, member < 0
	if crash {
		i = c.leaderLocked()
		if i < 0 {
			return "", "", nil, errors.New("no leader to crash")
		}
	}
	m := c.members[i]
	leader, kind := "", "follower stopped"
	if m.e.Server.Leader() == m.e.Server.MemberID() {
		leader, kind = " (the leader)", "leader stopped"
	}
	if crash {
		kind = "leader crashed"
	}
	for _, l := range c.links {
		l.proxies[i].Refuse()
	}
	if crash {
		m.e.Server.HardStop()
	}
	m.e.Close()
	m.e = nil
	c.down[i] = true
	what = fmt.Sprintf("member %s%s stopped", m.name, leader)
	if crash {
		what = fmt.Sprintf("member %s%s crashed", m.name, leader)
	}
	return what, kind, func() error { return c.restart(i) }, nil
}

// leaderLocked returns the index of the leader, or -1.
func (c *etcdCluster) leaderLocked() int {
	for _, m := range c.members {
		if m.e == nil {
			continue
		}
		lead := m.e.Server.Leader()
		for i, x := range c.members {
			if x.e != nil && x.e.Server.MemberID() == lead {
				return i
			}
		}
	}
	return -1
}

// restart starts member i again and lets the clients reach it.
func (c *etcdCluster) restart(i int) error {
	m := c.members[i]
	e, err := m.launch()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		return err
	}
	m.e = e
	for _, l := range c.links {
		l.proxies[i].Accept()
	}
	c.down[i] = false
	return nil
}

// leftovers lists the keys under prefix, read from the members directly,
// but for the status and history records under prefix+"rec/", which are
// kept on purpose and bound to no etcd lease.
func (c *etcdCluster) leftovers(prefix string) ([]string, error) {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientHost)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: fatalLogger("etcd client (leftovers)"), DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("reading the keys under %s: %w", prefix, err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		// Status and history records outlive their writers by design;
		// they are bound to no session.
		if strings.HasPrefix(string(kv.Key), prefix+"rec/") && kv.Lease == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("key %s (lease %x)", kv.Key, kv.Lease))
	}
	return out, nil
}

// fatalLogger is a zap logger for the embedded etcd members and their
// clients: it drops everything below DPanic, and writes DPanic, Panic and
// Fatal entries, with the stack and the name given, to stderr. etcd ends
// the process on its Fatal errors (os.Exit(1)) whatever the logger writes,
// so with zap.NewNop a test process dies with status 1 and not a word of
// why.
func fatalLogger(name string) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), zapcore.DPanicLevel)
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.DPanicLevel), zap.ErrorOutput(zapcore.Lock(os.Stderr))).
		Named(name)
}
