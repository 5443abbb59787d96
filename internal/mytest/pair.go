package mytest

import (
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/internal/faultproxy"
)

// VIP is the address clients use for "the primary", which a fail-over
// moves to another server, as a virtual IP or a DNS name is moved: a
// [faultproxy.Proxy] whose target is the current primary. It is a fault
// proxy like any other ([VIP.Proxy]).
type VIP struct {
	t      testing.TB
	proxy  *faultproxy.Proxy
	mu     sync.Mutex
	target *Server
}

// NewVIP starts a VIP in front of target; the test's clean-up closes it.
// It fails the test if it cannot listen.
func NewVIP(t testing.TB, target *Server) *VIP {
	t.Helper()
	p, err := faultproxy.New(target.Addr())
	if err != nil {
		t.Fatalf("mytest: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return &VIP{t: t, proxy: p, target: target}
}

// Addr returns the VIP's address, "127.0.0.1:port".
func (v *VIP) Addr() string { return v.proxy.Addr() }

// DSN returns the DSN, in go-sql-driver/mysql's format, of the database
// simba as the user simba, with parseTime=true (a Server's, see
// [Server.DSN]), through the VIP.
func (v *VIP) DSN() string {
	cfg, err := mysql.ParseDSN(v.Target().DSN())
	if err != nil { // a Server's DSN parses
		panic(err)
	}
	cfg.Addr = v.Addr()
	return cfg.FormatDSN()
}

// Proxy returns the fault proxy that is the VIP, for the faults of the
// clients' link to the primary.
func (v *VIP) Proxy() *faultproxy.Proxy { return v.proxy }

// Target returns the server the VIP forwards to.
func (v *VIP) Target() *Server {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.target
}

// MoveTo moves the VIP to s: new connections go to s, and those open (to
// the old target) are reset, as a moved virtual IP resets them (the new
// server knows nothing of them). [faultproxy.Proxy.Retarget] alone
// moves a DNS name, whose clients keep their connections to the old
// server.
func (v *VIP) MoveTo(s *Server) {
	v.mu.Lock()
	v.target = s
	v.mu.Unlock()
	v.proxy.Retarget(s.Addr())
	v.proxy.Reset()
}

// Pair is a primary, a replica of it, and the VIP that clients reach the
// primary through: a replicated MariaDB server that fails over.
type Pair struct {
	Primary *Server
	Replica *Replica
	VIP     *VIP
}

// StartPair starts a primary (StartPrimary with opts), a replica of it in
// mode (StartReplica), and a VIP in front of the primary (NewVIP), all
// ended by the test's clean-up. It makes one datadir with
// mariadb-install-db, for the two (see StartPrimary), and starts the two
// servers at once.
func StartPair(t testing.TB, mode Mode, opts ...ServerOption) *Pair {
	t.Helper()
	primary := newPrimary(t, opts...)
	replica := newReplica(t, primary, mode)
	launchAll(t, primary, replica.Server) // the replica's start needs nothing of the primary
	primary.setUpPrimary()
	replica.replicate()
	return &Pair{Primary: primary, Replica: replica, VIP: NewVIP(t, primary)}
}

// DSN returns the DSN clients use: the VIP's.
func (p *Pair) DSN() string { return p.VIP.DSN() }

// Failover promotes the replica ([Replica.Promote]) and moves the VIP to
// it ([VIP.MoveTo]). What becomes of the old primary is the test's to say,
// before or after: Kill, Stop, Pause, or its clients cut off at its
// VIP.Proxy.
func (p *Pair) Failover() {
	p.Replica.t.Helper()
	p.Replica.Promote()
	p.VIP.MoveTo(p.Replica.Server)
}
