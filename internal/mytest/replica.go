package mytest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"

	"github.com/simba-go/simba/internal/servers"
)

// Mode is how a primary waits for a [Replica] when it commits.
type Mode int

const (
	// Async is MariaDB's default: the primary acknowledges a commit once
	// it has written it to its own binary log and redo log, without
	// waiting for the replica, which may lag, and which a fail-over
	// promotes without what it had not received.
	Async Mode = iota
	// Sync is MariaDB's semi-synchronous replication (built in since 10.3:
	// rpl_semi_sync_master_enabled on the primary,
	// rpl_semi_sync_slave_enabled on the replica), made strict: a commit
	// is acknowledged once the replica has written it to its relay log
	// (rpl_semi_sync_master_wait_point = AFTER_SYNC: nor is it seen by
	// other sessions on the primary before), and waits while the replica
	// cannot be reached, for up to rpl_semi_sync_master_timeout, here 24
	// days, after which MariaDB would fall back to asynchronous
	// replication (MariaDB has no unbounded wait).
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

// semiSyncTimeout is the primary's rpl_semi_sync_master_timeout in Sync
// mode, in milliseconds (24 days): long enough that no test sees the
// primary fall back to asynchronous replication.
const semiSyncTimeout = 1 << 31

// The replication user, created on a primary by [StartPrimary].
const (
	replUser     = "repl"
	replPassword = "repl"
)

// serverIDs numbers the servers of StartPrimary and StartReplica in a test
// binary: each has a server_id of its own, as replication requires.
var serverIDs atomic.Uint32

// replicationArgs are the options of mariadbd that make a server a
// primary, or a replica that can be promoted to one: binary logging in the
// datadir (log_bin, with the replica's own writes and those it replicates:
// log_slave_updates), row-based, with GTIDs checked strictly, made durable
// at each commit (sync_binlog=1; innodb_flush_log_at_trx_commit=1 is a
// Server's already), and server_id id.
func replicationArgs(id uint32) []string {
	return []string{
		"--server-id=" + strconv.FormatUint(uint64(id), 10),
		"--log-bin=mariadb-bin",
		"--log-bin-index=mariadb-bin.index",
		"--relay-log=relay-bin",
		"--relay-log-index=relay-bin.index",
		"--log-slave-updates=ON",
		"--binlog-format=ROW",
		"--gtid-strict-mode=ON",
		"--sync-binlog=1",
	}
}

// primaryInfo is what StartPrimary keeps of a primary for its replicas.
type primaryInfo struct {
	pristine string   // a copy of its datadir as mariadb-install-db made it
	args     []string // the test's options (WithServerArgs), for its replicas too
}

// primaries holds the primaryInfo of each Server of StartPrimary, until
// the end of its test.
var primaries sync.Map // *Server → primaryInfo

// StartPrimary is [StartServer] for a replication primary: binary logging
// (log_bin, binlog_format=ROW, gtid_strict_mode, sync_binlog=1,
// log_slave_updates; innodb_flush_log_at_trx_commit=1 as every Server's)
// with a server_id of its own, and a replication user (repl, with
// REPLICATION SLAVE). The user simba lacks READ_ONLY ADMIN (REVOKEd), so
// that read_only keeps it off a replica, as it keeps an application's
// user. Before the server first starts, StartPrimary keeps a copy of its
// datadir, made by mariadb-install-db and never started: [StartReplica]
// copies it for a replica instead of running mariadb-install-db again.
// That copy is identical to the primary's starting point, and everything
// the primary did since is in its binary log (nothing is ever purged), so
// a replica that replicates it from the first GTID (an empty
// gtid_slave_pos) is consistent with it. It fails the test as StartServer
// does, and skips it when MariaDB is not installed.
func StartPrimary(t testing.TB, opts ...ServerOption) *Server {
	t.Helper()
	s := newPrimary(t, opts...)
	s.launch()
	s.setUpPrimary()
	return s
}

// newPrimary makes the datadir of a primary, and the copy of it that its
// replicas start from, and registers it for StartReplica; it does not
// start it.
func newPrimary(t testing.TB, opts ...ServerOption) *Server {
	t.Helper()
	s := newServer(t)
	rep := replicationArgs(serverIDs.Add(1))
	s.args = rep
	s.configure(opts)
	userArgs := s.args[len(rep):]
	if err := s.install(); err != nil {
		t.Fatalf("mytest: %v", err)
	}
	pristine := filepath.Join(s.dir, "pristine")
	if err := copyDir(s.data, pristine); err != nil {
		t.Fatalf("mytest: keeping a copy of the primary's datadir: %v", err)
	}
	primaries.Store(s, primaryInfo{pristine: pristine, args: userArgs})
	t.Cleanup(func() { primaries.Delete(s) })
	return s
}

// setUpPrimary makes, on a primary that runs, the replication user, and
// takes READ_ONLY ADMIN from simba.
func (s *Server) setUpPrimary() {
	s.t.Helper()
	s.admin("CREATE USER "+replUser+"@'%' IDENTIFIED BY '"+replPassword+"'",
		"GRANT REPLICATION SLAVE ON *.* TO "+replUser+"@'%'",
		"REVOKE READ_ONLY ADMIN ON *.* FROM simba@'%'")
}

// launchAll starts servers of new datadirs (see launch) at once, each on
// a free port (trying three), failing the test if one does not start; the
// test's clean-up kills them.
func launchAll(t testing.TB, all ...*Server) {
	t.Helper()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, s := range all {
		t.Cleanup(s.kill)
		wg.Go(func() {
			for attempt := 1; attempt <= 3; attempt++ {
				port, err := servers.FreePort()
				if err != nil {
					errs[i] = fmt.Errorf("finding a free port: %w", err)
					return
				}
				s.port = port
				if errs[i] = s.start(); errs[i] == nil {
					return
				}
				s.kill()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("mytest: the server did not start: %v", err)
		}
	}
}

// install makes the server's datadir with mariadb-install-db, with the
// user and the database of initSQL, as StartServer does.
func (s *Server) install() error {
	initFile := filepath.Join(s.dir, "init.sql")
	if err := os.WriteFile(initFile, []byte(initSQL), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", initFile, err)
	}
	args := append([]string{"--no-defaults", "--datadir=" + s.data, "--tmpdir=" + s.tmp, "--skip-test-db",
		"--auth-root-authentication-method=normal", "--extra-file=" + initFile}, settings...)
	cmd := exec.Command(binary("mariadb-install-db", "/usr/bin", "/usr/local/bin"), args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	return nil
}

// copyDir copies directory src, with its files' owners and modes, to dst,
// which it makes if it does not exist (cp -a).
func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp -a %s %s: %v: %s", src, dst, err, out)
	}
	return nil
}

// Replica is a replica of a primary of [StartPrimary], replicating by
// GTID, read-only (read_only=ON: it answers reads), a Server of the test's
// own in every other respect (Stop, Start, Pause, Kill, Exec, ...). Its
// replication connection to the primary goes through a
// [faultproxy.Proxy], [Replica.Link], so that a test can cut it or slow it
// down, and the replica miss the primary's last commits.
type Replica struct {
	*Server
	primary *Server
	link    *faultproxy.Proxy
	mode    Mode
}

// StartReplica makes a replica of primary, a Server of [StartPrimary]
// that runs, and starts it: its datadir a copy of the primary's as
// mariadb-install-db made it (see StartPrimary), a server_id of its own,
// binary logging as the primary's (so that, promoted, it is a primary
// like it, its binary log holding what it replicated too), read_only=ON,
// and the primary's options of WithServerArgs; then CHANGE MASTER TO the
// primary through a fault proxy of its own (MASTER_USE_GTID=slave_pos,
// from the first GTID, as the user repl, MASTER_CONNECT_RETRY=1 so that it
// reconnects within a second) and START SLAVE. In [Sync] mode it first
// makes primary semi-synchronous (see Sync), for its restarts too, and the
// replica a semi-synchronous replica (with several, the primary waits
// for one's acknowledgement). It returns once the replica's
// replication threads run (and, in Sync mode, the primary counts it as a
// semi-synchronous replica) and it has replayed what the primary had
// written ([Replica.WaitReplayed]). The test's clean-up kills the replica,
// closes its proxy and removes its directory. It fails the test on an
// error, and skips it (fails it under SIMBA_REQUIRE_SERVERS=1) when
// MariaDB is not installed.
func StartReplica(t testing.TB, primary *Server, mode Mode) *Replica {
	t.Helper()
	r := newReplica(t, primary, mode)
	r.launch()
	r.replicate()
	return r
}

// newReplica makes the datadir of a replica of primary, and its link; it
// does not start it.
func newReplica(t testing.TB, primary *Server, mode Mode) *Replica {
	t.Helper()
	if mode != Async && mode != Sync {
		t.Fatalf("mytest: StartReplica: unknown mode %v", mode)
	}
	v, ok := primaries.Load(primary)
	if !ok {
		t.Fatalf("mytest: StartReplica: the primary %s was not started by StartPrimary", primary.Addr())
	}
	info := v.(primaryInfo)
	link, err := faultproxy.New(primary.Addr()) // retargeted by replicate: primary may have no port yet
	if err != nil {
		t.Fatalf("mytest: %v", err)
	}
	t.Cleanup(func() { link.Close() })
	s := newServer(t)
	if err := copyDir(info.pristine, s.data); err != nil {
		t.Fatalf("mytest: making the replica's datadir: %v", err)
	}
	s.args = append(replicationArgs(serverIDs.Add(1)), info.args...)
	s.args = append(s.args, "--read-only=ON")
	if mode == Sync {
		s.args = append(s.args, "--rpl-semi-sync-slave-enabled=ON",
			"--rpl-semi-sync-slave-kill-conn-timeout=1") // see Promote
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mytest: the end of the log of replica %s:\n%s", s.Addr(), s.logTail())
			t.Logf("mytest: the end of the log of its primary %s:\n%s", primary.Addr(), primary.logTail())
		}
	})
	return &Replica{Server: s, primary: primary, link: link, mode: mode}
}

// replicate starts a replica that runs replicating its primary, which
// runs (set up by setUpPrimary), and waits until it has caught up.
func (r *Replica) replicate() {
	r.t.Helper()
	t, s, primary, mode := r.t, r.Server, r.primary, r.mode
	r.link.Retarget(primary.Addr())
	_, linkPort, err := net.SplitHostPort(r.link.Addr())
	if err != nil {
		t.Fatalf("mytest: the address of the replica's link: %v", err)
	}
	if mode == Sync {
		semi := []string{
			"--rpl-semi-sync-master-enabled=ON",
			"--rpl-semi-sync-master-wait-point=AFTER_SYNC",
			"--rpl-semi-sync-master-wait-no-slave=ON",
			"--rpl-semi-sync-master-timeout=" + strconv.Itoa(semiSyncTimeout),
		}
		primary.args = append(primary.args, semi...) // for its restarts
		primary.admin("SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC",
			"SET GLOBAL rpl_semi_sync_master_wait_no_slave = ON",
			fmt.Sprintf("SET GLOBAL rpl_semi_sync_master_timeout = %d", semiSyncTimeout),
			"SET GLOBAL rpl_semi_sync_master_enabled = ON")
	}
	s.admin(fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %s, MASTER_USER = '%s', MASTER_PASSWORD = '%s', MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1",
		linkPort, replUser, replPassword),
		"START SLAVE")
	var seen string
	await.Until(t, waitServer, fmt.Sprintf("mytest: replica %s replicating (%s) from its primary", s.Addr(), mode), func() bool {
		st, err := s.slaveStatus()
		if err != nil {
			seen = err.Error()
			return false
		}
		seen = fmt.Sprintf("Slave_IO_Running %s, Slave_SQL_Running %s, Last_IO_Error %q, Last_SQL_Error %q",
			st["Slave_IO_Running"], st["Slave_SQL_Running"], st["Last_IO_Error"], st["Last_SQL_Error"])
		if st["Slave_IO_Running"] != "Yes" || st["Slave_SQL_Running"] != "Yes" {
			return false
		}
		if mode == Sync {
			var clients, status string
			if err := primary.queryRow("SELECT (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS'), (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_STATUS')", nil, &clients, &status); err != nil {
				seen += "; the primary: " + err.Error()
				return false
			}
			seen += fmt.Sprintf("; the primary's Rpl_semi_sync_master_clients %s, Rpl_semi_sync_master_status %s", clients, status)
			return clients != "0" && status == "ON"
		}
		return true
	}, func() string { return seen + "; the replica's log:\n" + s.logTail() })
	r.WaitReplayed()
}

// Mode returns the replica's replication mode.
func (r *Replica) Mode() Mode { return r.mode }

// Link returns the fault proxy that the replica's replication connection
// to its primary goes through: Blackhole cuts replication (the replica
// keeps serving reads and receives nothing; in Sync mode the primary's
// commits wait), DelayReplies makes the replica lag, Reset ends the
// connection (the replica reconnects within a second).
func (r *Replica) Link() *faultproxy.Proxy { return r.link }

// Primary returns the server the replica replicates.
func (r *Replica) Primary() *Server { return r.primary }

// WaitReplayed waits until the replica has applied everything the primary
// had written to its binary log when WaitReplayed was called (its
// gtid_binlog_pos, waited for with MASTER_GTID_WAIT), so that what was
// committed on the primary before is there on the replica. It fails the
// test if the primary does not answer, or the replica has not applied it
// within 30 seconds (as when its Link is cut).
func (r *Replica) WaitReplayed() {
	r.t.Helper()
	pos := r.primary.GTIDPos()
	if pos == "" {
		return // nothing written yet
	}
	var applied string
	await.Until(r.t, waitServer, fmt.Sprintf("mytest: WaitReplayed: replica %s applying the primary's binary log up to %s", r.Addr(), pos), func() bool {
		var res sql.NullInt64
		if err := r.queryRow("SELECT MASTER_GTID_WAIT(?, 0.5), @@gtid_slave_pos", []any{pos}, &res, &applied); err != nil {
			applied = err.Error()
			return false
		}
		return res.Valid && res.Int64 == 0
	}, func() string { return "applied up to " + applied })
}

// sqlThreadDone is the state of the replica's SQL thread once it has
// applied all it received.
const sqlThreadDone = "Slave has read all relay log"

// Promote promotes the replica and returns once it is a primary that
// accepts writes: it stops receiving (STOP SLAVE IO_THREAD: in Sync mode
// that tries to reach the primary to end its side of the connection, for
// up to a second, rpl_semi_sync_slave_kill_conn_timeout, when it is gone
// or cut off), waits until it has applied all it received (its SQL thread
// having read all its relay log: a transaction received in part is rolled
// back), then STOP SLAVE, RESET SLAVE ALL (it forgets its primary, and
// replicates nothing after a restart), SET GLOBAL read_only = OFF and, in
// Sync mode, turns its side of semi-synchronous replication off; a
// restart keeps it a primary. Its
// new commits carry its own server_id in their GTIDs (see
// [Server.GTIDPos]), in the same domain: an old primary that committed
// after the replica stopped receiving has GTIDs the promoted replica does
// not (the two diverged). The old primary is left as it is: a test stops
// it, kills it or cuts it off before or after, as the fail-over it plays.
// Promote fails the test if the replica is not one, or is not a writable
// primary within 30 seconds.
func (r *Replica) Promote() {
	r.t.Helper()
	r.admin("STOP SLAVE IO_THREAD")
	var seen string
	await.Until(r.t, waitServer, fmt.Sprintf("mytest: promoting replica %s: applying what it received", r.Addr()), func() bool {
		st, err := r.slaveStatus()
		if err != nil {
			seen = err.Error()
			return false
		}
		seen = fmt.Sprintf("Slave_SQL_Running %s, Slave_SQL_Running_State %q, Last_SQL_Error %q", st["Slave_SQL_Running"], st["Slave_SQL_Running_State"], st["Last_SQL_Error"])
		if st == nil || st["Slave_SQL_Running"] != "Yes" {
			r.t.Fatalf("mytest: promoting replica %s: it does not replicate: %s", r.Addr(), seen)
		}
		return strings.HasPrefix(st["Slave_SQL_Running_State"], sqlThreadDone)
	}, func() string { return seen })
	r.admin("STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF")
	r.args = append(r.args, "--read-only=OFF")
	if r.mode == Sync {
		r.admin("SET GLOBAL rpl_semi_sync_slave_enabled = OFF")
		r.args = append(r.args, "--rpl-semi-sync-slave-enabled=OFF")
	}
	await.Until(r.t, waitServer, fmt.Sprintf("mytest: replica %s promoted accepting writes", r.Addr()), func() bool {
		var readOnly int
		if err := r.queryRow("SELECT @@global.read_only", nil, &readOnly); err != nil {
			seen = err.Error()
			return false
		}
		st, err := r.slaveStatus()
		if err != nil {
			seen = err.Error()
			return false
		}
		seen = fmt.Sprintf("read_only %d, replicating %v", readOnly, st != nil)
		return readOnly == 0 && st == nil
	}, func() string { return seen })
}

// GTIDPos returns the server's gtid_binlog_pos: the GTID
// (domain-server_id-sequence) of the last transaction in its binary log,
// for each replication domain (only domain 0 here), or "" before the
// first, failing the test if it does not answer. A replica's is its
// primary's once it has applied all of it (log_slave_updates).
func (s *Server) GTIDPos() string {
	s.t.Helper()
	var pos string
	if err := s.queryRow("SELECT @@global.gtid_binlog_pos", nil, &pos); err != nil {
		s.t.Fatalf("mytest: the GTID position of %s: %v", s.Addr(), err)
	}
	return pos
}

// ServerID returns the server's server_id, failing the test if it does
// not answer.
func (s *Server) ServerID() uint32 {
	s.t.Helper()
	var id uint32
	if err := s.queryRow("SELECT @@global.server_id", nil, &id); err != nil {
		s.t.Fatalf("mytest: the server_id of %s: %v", s.Addr(), err)
	}
	return id
}

// adminDSN returns the DSN of the server's user root, through its unix
// socket (mariadb-install-db makes root@localhost with no password): the
// helpers' own statements run as root, which has the privileges that
// StartPrimary takes from simba.
func (s *Server) adminDSN() string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net, cfg.Addr = "unix", filepath.Join(s.data, "mariadbd.sock")
	return cfg.FormatDSN()
}

// admin runs stmts, one after the other, on a connection of its own to
// the server as root (see adminDSN), failing the test on an error.
func (s *Server) admin(stmts ...string) {
	s.t.Helper()
	if err := execOn(s.adminDSN(), stmts); err != nil {
		s.t.Fatalf("mytest: on %s: %v", s.Addr(), err)
	}
}

// queryRow runs sql on a connection of its own to the server, as root
// (see adminDSN), scanning its one row into dest, within 10 seconds.
func (s *Server) queryRow(sql string, args []any, dest ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := openOne(s.adminDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	return db.QueryRowContext(ctx, sql, args...).Scan(dest...)
}

// slaveStatus returns the server's SHOW SLAVE STATUS (as root), column by
// column, or nil if it replicates nothing.
func (s *Server) slaveStatus() (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := openOne(s.adminDSN())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		return nil, rows.Err()
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	st := make(map[string]string, len(cols))
	for i, c := range cols {
		st[c] = vals[i].String
	}
	return st, rows.Err()
}

// openOne opens dsn for a single connection.
func openOne(dsn string) (*sql.DB, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening the DSN: %w", err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}
