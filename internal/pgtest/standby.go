package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
)

// Mode is how a primary waits for a [Standby] when it commits.
type Mode int

const (
	// Async is PostgreSQL's default (and Patroni's): the primary
	// acknowledges a commit once it has written it to its own WAL, without
	// waiting for the standby, which may lag, and which a fail-over
	// promotes without what it had not received.
	Async Mode = iota
	// Sync names the standby in the primary's synchronous_standby_names: a
	// commit is acknowledged once the standby has flushed it too, and
	// waits, without a bound, while the standby cannot be reached.
	Sync
)

// String returns "async" or "sync".
func (m Mode) String() string {
	switch m {
	case Async:
		return "async"
	case Sync:
		return "sync"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Standby is a streaming-replication standby of a [Server] (a hot standby:
// it answers reads), a Server of the test's own in every other respect
// (Stop, Start, Pause, Kill, Exec, Timeline, ...). Its replication
// connection to the primary goes through a [faultproxy.Proxy], [Standby.Link],
// so that a test can cut it or slow it down, and the standby miss the
// primary's last commits.
type Standby struct {
	*Server
	primary *Server
	link    *faultproxy.Proxy
	name    string
	mode    Mode
}

// standbys numbers the standbys of a test binary, for their names.
var standbys atomic.Int64

// StartStandby makes a standby of primary, a Server of [StartServer]
// that runs, and starts it: a physical replication slot on primary, a base
// backup (pg_basebackup), standby.signal, and a primary_conninfo through a
// fault proxy of its own, with application_name [Standby.Name]. It turns
// synchronous_commit on, PostgreSQL's default, on primary for every role
// (ALTER ROLE ALL SET, which new sessions read and a client's own SET
// overrides; a Server of StartServer runs with it off), so that a
// commit primary acknowledged is in its WAL, and a primary killed
// ([Server.Kill]) and started again has it. In [Sync] mode it then makes
// primary wait for this standby (see Sync): a primary has one
// synchronous standby, the last of StartStandby's. It returns
// once primary reports the standby streaming (and, in Sync mode,
// synchronous). The test's clean-up kills the standby, closes its proxy
// and removes its directory. It fails the test on an error, and skips it
// (fails it under SIMBA_REQUIRE_SERVERS=1) when PostgreSQL is not
// installed.
func StartStandby(t testing.TB, primary *Server, mode Mode) *Standby {
	t.Helper()
	if mode != Async && mode != Sync {
		t.Fatalf("pgtest: StartStandby: unknown mode %v", mode)
	}
	name := fmt.Sprintf("pgtest_standby_%d", standbys.Add(1))
	link, err := faultproxy.New(primary.Addr())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { link.Close() })
	_, linkPort, err := net.SplitHostPort(link.Addr())
	if err != nil {
		t.Fatalf("pgtest: the address of the standby's link: %v", err)
	}
	primary.Exec("SELECT pg_create_physical_replication_slot($1, true)", name)
	s := newServer(t)
	backup := exec.Command(filepath.Join(s.bin, "pg_basebackup"), "-D", s.data, "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port),
		"-U", "postgres", "-X", "stream", "-S", name, "-c", "fast", "--no-sync")
	backup.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := backup.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: pg_basebackup of %s: %v\n%s", primary.Addr(), err, out)
	}
	// The primary's postgresql.auto.conf came with the backup: what is
	// appended here comes after it, and wins.
	auto, err := os.ReadFile(filepath.Join(s.data, "postgresql.auto.conf"))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	conf := string(auto) + "\n# pgtest.StartStandby\n" +
		fmt.Sprintf("primary_conninfo = %s\n", quoteLiteral(fmt.Sprintf("host=127.0.0.1 port=%s user=postgres application_name=%s", linkPort, name))) +
		fmt.Sprintf("primary_slot_name = %s\n", quoteLiteral(name)) +
		"synchronous_standby_names = ''\n" + // a primary's, not the standby's once promoted
		"wal_retrieve_retry_interval = '100ms'\n" // reconnect soon after a cut heals
	if err := s.writeFile("postgresql.auto.conf", []byte(conf), 0o600); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := s.writeFile("standby.signal", nil, 0o600); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s.launch()
	sb := &Standby{Server: s, primary: primary, link: link, name: name, mode: mode}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgtest: the end of the log of standby %s:\n%s", name, s.logTail())
			t.Logf("pgtest: the end of the log of its primary:\n%s", primary.logTail())
		}
	})
	primary.Exec("ALTER ROLE ALL SET synchronous_commit = on")
	want := "async"
	if mode == Sync {
		primary.Exec(fmt.Sprintf("ALTER SYSTEM SET synchronous_standby_names = %s", quoteLiteral(pgx.Identifier{name}.Sanitize())))
		primary.Exec("SELECT pg_reload_conf()")
		want = "sync"
	}
	var state string
	await.Until(t, waitServer, fmt.Sprintf("pgtest: standby %s streaming (%s) from its primary", name, want), func() bool {
		err := primary.queryRow("SELECT state || ' ' || sync_state FROM pg_stat_replication WHERE application_name = $1", []any{name}, &state)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			state = "not connected"
		case err != nil:
			state = err.Error()
		}
		return err == nil && state == "streaming "+want
	}, func() string { return state + "; the standby's log:\n" + s.logTail() })
	return sb
}

// Name returns the standby's name: its application_name, the name of its
// replication slot on the primary and, in Sync mode, in
// synchronous_standby_names.
func (s *Standby) Name() string { return s.name }

// Mode returns the standby's replication mode.
func (s *Standby) Mode() Mode { return s.mode }

// Link returns the fault proxy that the standby's replication connection
// to its primary goes through: Blackhole cuts replication (the standby
// keeps serving reads and receives nothing; in Sync mode the primary's
// commits wait), DelayReplies makes the standby lag, Reset ends the
// connection (the standby reconnects within a second).
func (s *Standby) Link() *faultproxy.Proxy { return s.link }

// Primary returns the server the standby replicates.
func (s *Standby) Primary() *Server { return s.primary }

// WaitReplayed waits until the standby has replayed everything the primary
// had written when WaitReplayed was called (a WAL record it writes then,
// pg_logical_emit_message), so that what was committed on the primary
// before is there on the standby. It fails the test if the primary does
// not answer, or the standby has not replayed it within 30 seconds (as
// when its Link is cut).
func (s *Standby) WaitReplayed() {
	s.t.Helper()
	var lsn string
	if err := s.primary.queryRow("SELECT pg_logical_emit_message(false, 'pgtest', 'replayed?')::text", nil, &lsn); err != nil {
		s.t.Fatalf("pgtest: WaitReplayed: marking the primary's WAL: %v", err)
	}
	var replayed string
	await.Until(s.t, waitServer, fmt.Sprintf("pgtest: WaitReplayed: standby %s replaying the primary's WAL up to %s", s.name, lsn), func() bool {
		var done bool
		if err := s.queryRow("SELECT coalesce(pg_last_wal_replay_lsn()::text, 'nothing'), coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", []any{lsn}, &replayed, &done); err != nil {
			replayed = err.Error()
		}
		return done
	}, func() string { return "replayed up to " + replayed })
}

// Promote promotes the standby (pg_promote) and returns once it is a
// primary that accepts writes, on a timeline one above the one it
// replicated, as pg_control_checkpoint reports it (Promote runs a
// CHECKPOINT so that it does at once: without it the control file's
// timeline follows the end-of-recovery checkpoint a moment later). The old
// primary is left as it is: a test stops it, kills it or cuts it off
// before or after, as the fail-over it plays. Promote fails the test if
// the standby is not one, or is not a writable primary within 30 seconds.
func (s *Standby) Promote() {
	s.t.Helper()
	before := s.Timeline()
	var promoted bool
	if err := s.queryRow("SELECT pg_promote(true, 30)", nil, &promoted); err != nil || !promoted {
		s.t.Fatalf("pgtest: promoting standby %s: promoted %v, %v\n%s", s.name, promoted, err, s.logTail())
	}
	var seen error
	await.Until(s.t, waitServer, fmt.Sprintf("pgtest: standby %s promoted accepting writes", s.name), func() bool {
		var xid string
		seen = s.queryRow("SELECT pg_current_xact_id()::text", nil, &xid)
		return seen == nil
	}, func() string { return fmt.Sprint(seen) })
	s.Exec("CHECKPOINT")
	if after := s.Timeline(); after <= before {
		s.t.Fatalf("pgtest: standby %s promoted is on timeline %d, was on %d", s.name, after, before)
	}
}

// Timeline returns the server's timeline, as pg_control_checkpoint reports
// it (the timeline of its last checkpoint or, on a standby, restart
// point), failing the test if it does not answer.
func (s *Server) Timeline() int64 {
	s.t.Helper()
	var tl int64
	if err := s.queryRow("SELECT timeline_id::int8 FROM pg_control_checkpoint()", nil, &tl); err != nil {
		s.t.Fatalf("pgtest: the timeline of %s: %v", s.Addr(), err)
	}
	return tl
}

// SystemID returns the server's database system identifier, as
// pg_control_system reports it: made by initdb, the same on its standbys
// (whose clusters are its base backups), failing the test if it does not
// answer.
func (s *Server) SystemID() int64 {
	s.t.Helper()
	var id int64
	if err := s.queryRow("SELECT system_identifier FROM pg_control_system()", nil, &id); err != nil {
		s.t.Fatalf("pgtest: the system identifier of %s: %v", s.Addr(), err)
	}
	return id
}

// queryRow runs sql on a connection of its own to the server, as the
// postgres user, scanning its one row into dest, within 10 seconds.
func (s *Server) queryRow(sql string, args []any, dest ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

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
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return &VIP{t: t, proxy: p, target: target}
}

// Addr returns the VIP's address, "127.0.0.1:port".
func (v *VIP) Addr() string { return v.proxy.Addr() }

// DSN returns the DSN of the postgres database, as the postgres user,
// through the VIP.
func (v *VIP) DSN() string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", v.Addr())
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

// Pair is a primary, a standby of it, and the VIP that clients reach the
// primary through: a replicated PostgreSQL server that fails over.
type Pair struct {
	Primary *Server
	Standby *Standby
	VIP     *VIP
}

// StartPair starts a primary (StartServer with opts), a standby of it in
// mode (StartStandby), and a VIP in front of the primary (NewVIP), all
// ended by the test's clean-up.
func StartPair(t testing.TB, mode Mode, opts ...ServerOption) *Pair {
	t.Helper()
	primary := StartServer(t, opts...)
	standby := StartStandby(t, primary, mode)
	return &Pair{Primary: primary, Standby: standby, VIP: NewVIP(t, primary)}
}

// DSN returns the DSN clients use: the VIP's.
func (p *Pair) DSN() string { return p.VIP.DSN() }

// Failover promotes the standby ([Standby.Promote]) and moves the VIP to it
// ([VIP.MoveTo]). What becomes of the old primary is the test's to say,
// before or after: Kill, Stop, Pause, or its clients cut off at its
// VIP.Proxy.
func (p *Pair) Failover() {
	p.Standby.t.Helper()
	p.Standby.Promote()
	p.VIP.MoveTo(p.Standby.Server)
}
