package kubetest

import (
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/faultproxy"
)

// StartPeer starts a second kube-apiserver on the etcd of s, a running
// server, as a highly available control plane runs several: the same
// etcd (so the same objects), the same serving certificate (its
// certificate directory: clients trust both alike), token file, client
// authority and service-account keys (so every credential of s works on
// both), on a port of its own. It waits until the peer is ready and stops
// it when the test ends (before s: clean-ups run last first). The peer's
// Admin, User and ConfigVia give configurations that reach it, and its
// Stop, Crash, Start, Pause and Resume act on it alone; its Etcd is the
// etcd of s. Stopping s leaves the etcd to the peer.
func (s *Server) StartPeer(t testing.TB) *Server {
	t.Helper()
	ca := s.serverCA()
	if ca == nil {
		t.Fatalf("kubetest: StartPeer: the kube-apiserver on %s has not served yet", s.addr)
	}
	dir := t.TempDir()
	p := &Server{
		t:       t,
		bin:     s.bin,
		etcd:    s.etcd,
		addr:    freeAddr(t),
		logFile: filepath.Join(dir, "kube-apiserver.log"),
		caFile:  s.caFile, // the same --cert-dir: the server reuses the files it finds there
		token:   s.token,
		users:   s.users,
		ca:      ca,
	}
	_, port, _ := net.SplitHostPort(p.addr)
	p.args = slices.Clone(s.args)
	for i, a := range p.args {
		if strings.HasPrefix(a, "--secure-port=") {
			p.args[i] = "--secure-port=" + port
		}
	}
	t.Cleanup(func() {
		p.mu.Lock()
		shown := p.logShown
		p.mu.Unlock()
		if t.Failed() && !shown {
			t.Logf("kubetest: the end of the log of the peer kube-apiserver on %s:\n%s", p.addr, p.logEnd())
		}
	})
	t.Cleanup(p.Stop)
	p.Start()
	return p
}

const (
	// HealthEvery is the interval of a [Front]'s health checks.
	HealthEvery = 100 * time.Millisecond
	// healthTimeout bounds each health check of a Front.
	healthTimeout = time.Second
)

// Front is the load balancer in front of the kube-apiservers of a highly
// available control plane (a virtual IP, or a TCP load balancer), as
// clients in production reach them: one address, forwarding each new
// connection to one server, the target, and moving the target to another
// server when the target fails its health check. Every [HealthEvery] it
// asks the target's /readyz (as the administrator, for up to a second);
// when the answer is not 200, it moves the target to the next server
// after it (in the order given, round) whose /readyz answers 200, and
// keeps the target where it is if none does. It does not move back when
// the old target recovers. Connections open to a server stay with it (a
// killed server's end with it); new ones go to the target of the moment.
// The serving certificate is for 127.0.0.1, the front's host, so a
// configuration through it ([Server.ConfigVia]) checks it as it would
// the server's.
type Front struct {
	proxy   *faultproxy.Proxy
	servers []*Server
	stop    chan struct{}
	done    chan struct{}

	mu    sync.Mutex
	cur   int
	moves []Move
}

// Move is one move of a [Front]'s target.
type Move struct {
	At       time.Time
	From, To string // the servers' addresses
}

// StartFront starts a [Front] to servers (at least one, all running; the
// first is the target), and closes it when the test ends (before the
// servers stop, if they were started before it).
func StartFront(t testing.TB, servers ...*Server) *Front {
	t.Helper()
	if len(servers) == 0 {
		t.Fatal("kubetest: StartFront: no server")
	}
	p, err := faultproxy.New(servers[0].addr)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	f := &Front{proxy: p, servers: slices.Clone(servers), stop: make(chan struct{}), done: make(chan struct{})}
	go f.check()
	t.Cleanup(f.close)
	return f
}

// Addr returns the front's host:port, for [Server.ConfigVia].
func (f *Front) Addr() string { return f.proxy.Addr() }

// Target returns the server new connections go to.
func (f *Front) Target() *Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers[f.cur]
}

// Moves returns the moves of the target so far, oldest first.
func (f *Front) Moves() []Move {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.moves)
}

// close stops the health checks and the proxy, and its connections.
func (f *Front) close() {
	close(f.stop)
	<-f.done
	f.proxy.Close()
}

// check runs the health checks until the front closes.
func (f *Front) check() {
	defer close(f.done)
	tick := time.NewTicker(HealthEvery)
	defer tick.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
		f.mu.Lock()
		cur := f.cur
		f.mu.Unlock()
		if f.servers[cur].ready(healthTimeout) == nil {
			continue
		}
		for i := 1; i < len(f.servers); i++ {
			next := (cur + i) % len(f.servers)
			if f.servers[next].ready(healthTimeout) != nil {
				continue
			}
			f.mu.Lock()
			f.cur = next
			f.moves = append(f.moves, Move{At: time.Now(), From: f.servers[cur].addr, To: f.servers[next].addr})
			f.proxy.Retarget(f.servers[next].addr)
			f.mu.Unlock()
			break
		}
	}
}
