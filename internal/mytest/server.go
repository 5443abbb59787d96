package mytest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/internal/servers"

	"github.com/simba-go/simba/internal/sigstop"
)

// Server is a MariaDB server of one test's own, for the faults that the
// shared server must not suffer: a crash, a restart, a pause. Its datadir
// is made by mariadb-install-db in a temporary directory, with the user
// simba (password simba, ALL PRIVILEGES on *.* WITH GRANT OPTION) and the
// database simba, as scripts/with-mariadb.sh makes the shared one; it
// listens on 127.0.0.1 only, on a port that stays the same across
// restarts, and, unlike the shared one, flushes its redo log at every
// commit (innodb_flush_log_at_trx_commit=1), so that what was committed
// survives [Server.Kill]. StartServer takes about 3 to 4 seconds on a
// 2-core machine, nearly all of it mariadb-install-db's (mariadbd starts
// in about half a second, also after a crash).
type Server struct {
	t        testing.TB
	mariadbd string
	dir      string // the temporary directory: data/, server.log, init.sql
	data     string
	tmp      string // its tmpdir, its own: see newServer
	port     int
	args     []string // WithServerArgs
	clock    string   // WithFakeClock: the file of libfaketime's offset
	cred     *syscall.Credential
	cmd      *exec.Cmd
	exited   chan struct{}
}

// waitServer bounds a start or a stop of a Server.
const waitServer = 30 * time.Second

// settings are the options of mariadbd that keep a Server small and quick
// to start, for mariadb-install-db's bootstrap too.
var settings = []string{
	"--skip-name-resolve",
	"--innodb-buffer-pool-size=32M",
	"--innodb-log-file-size=16M",
	"--innodb-flush-log-at-trx-commit=1",
}

// initSQL makes the user and the database of a Server, run by
// mariadb-install-db after its own (FLUSH PRIVILEGES loads the grant
// tables, without which its bootstrap takes no CREATE USER).
const initSQL = `FLUSH PRIVILEGES;
CREATE USER 'simba'@'%' IDENTIFIED BY 'simba';
GRANT ALL PRIVILEGES ON *.* TO 'simba'@'%' WITH GRANT OPTION;
CREATE DATABASE simba;
`

// binary returns the path of MariaDB's program name: on the PATH, or in
// one of dirs (Debian puts mariadbd in /usr/sbin, which is not on every
// PATH), or "".
func binary(name string, dirs ...string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// ServerOption configures a [Server] of [StartServer].
type ServerOption func(*serverConfig)

type serverConfig struct {
	args      []string
	fakeClock bool
}

// libfaketime is Debian's libfaketime (package faketime).
const libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

// WithFakeClock runs mariadbd under libfaketime, its wall clock offset by
// what [Server.StepClock] sets (nothing at first); its monotonic clock is
// left alone. The test fails (or skips, without SIMBA_REQUIRE_SERVERS=1)
// when libfaketime is not installed (Debian's faketime package, which
// scripts/with-mariadb.sh installs).
func WithFakeClock() ServerOption {
	return func(c *serverConfig) { c.fakeClock = true }
}

// WithServerArgs adds options to mariadbd's command line, after those of
// the Server, which they override (e.g.
// "--innodb-flush-log-at-trx-commit=2", "--max-connections=10"), at every
// start.
func WithServerArgs(args ...string) ServerOption {
	return func(c *serverConfig) { c.args = append(c.args, args...) }
}

// serverCredential returns the credential to run MariaDB's programs with:
// the mysql user's when running as root (mariadbd refuses to run as root),
// else nil (oneself).
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		return nil, fmt.Errorf("running as root, and no mysql user to run MariaDB as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// configure applies the options to s, before its datadir is made: the
// arguments of WithServerArgs, and the clock file of WithFakeClock (which
// skips t, or fails it under SIMBA_REQUIRE_SERVERS=1, when libfaketime is
// not installed).
func (s *Server) configure(opts []ServerOption) {
	t := s.t
	t.Helper()
	var cfg serverConfig
	for _, o := range opts {
		o(&cfg)
	}
	s.args = append(s.args, cfg.args...)
	if !cfg.fakeClock {
		return
	}
	if _, err := os.Stat(libfaketime); err != nil {
		msg := fmt.Sprintf("mytest: %s is missing: install Debian's faketime package (scripts/with-mariadb.sh does) to step a server's clock", libfaketime)
		if servers.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s.clock = filepath.Join(s.dir, "faketime")
	if err := os.WriteFile(s.clock, []byte("+0\n"), 0o644); err != nil {
		t.Fatalf("mytest: writing %s: %v", s.clock, err)
	}
}

// StartServer makes a datadir and starts its server; the test's clean-up
// kills it and removes the directory. It skips t (fails it under
// SIMBA_REQUIRE_SERVERS=1) when MariaDB is not installed, and fails t when
// the server does not start.
func StartServer(t testing.TB, opts ...ServerOption) *Server {
	t.Helper()
	s := newServer(t)
	s.configure(opts)
	if err := s.install(); err != nil {
		t.Fatalf("mytest: %v", err)
	}
	s.launch()
	return s
}

// newServer makes the directories of a Server, removed by the test's
// clean-up: an empty datadir, owned by the user the server runs as. It
// skips t (fails it under SIMBA_REQUIRE_SERVERS=1) when MariaDB is not
// installed.
func newServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, mariadbd: binary("mariadbd", "/usr/sbin", "/usr/local/sbin", "/usr/libexec")}
	if s.mariadbd == "" || binary("mariadb-install-db", "/usr/bin", "/usr/local/bin") == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("mytest: MariaDB is not installed (no mariadbd or mariadb-install-db) and %s=1: install Debian's mariadb-server package", EnvRequire)
		}
		t.Skip("mytest: MariaDB is not installed (no mariadbd or mariadb-install-db): install Debian's mariadb-server package")
	}
	var err error
	if s.dir, err = os.MkdirTemp("", "simba-mytest-"); err != nil {
		t.Fatalf("mytest: making the server's directory: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(s.dir) })
	s.data = filepath.Join(s.dir, "data")
	if err := os.Mkdir(s.data, 0o700); err != nil {
		t.Fatalf("mytest: making the datadir: %v", err)
	}
	// A tmpdir of its own: in the shared /tmp, a bootstrap of
	// mariadb-install-db was seen failing on a temporary table's file
	// ("Could not remove temporary table", then "Unknown table
	// 'mysql.tmp_user_sys'") while other servers started and stopped.
	s.tmp = filepath.Join(s.dir, "tmp")
	if err := os.Mkdir(s.tmp, 0o700); err != nil {
		t.Fatalf("mytest: making the tmpdir: %v", err)
	}
	if s.cred, err = serverCredential(); err != nil {
		t.Fatalf("mytest: %v", err)
	}
	if s.cred != nil {
		// The mysql user reaches its datadir and init.sql through dir.
		if err := os.Chmod(s.dir, 0o755); err != nil {
			t.Fatalf("mytest: %v", err)
		}
		for _, d := range []string{s.data, s.tmp} {
			if err := os.Chown(d, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				t.Fatalf("mytest: handing %s to the mysql user: %v", d, err)
			}
		}
	}
	return s
}

// launch starts the server of a new datadir on a free port (trying three),
// failing the test if it does not start; the test's clean-up kills it.
func (s *Server) launch() {
	s.t.Helper()
	s.t.Cleanup(s.kill)
	for attempt := 1; ; attempt++ {
		var err error
		s.port, err = servers.FreePort()
		if err != nil {
			s.t.Fatalf("mytest: finding a free port: %v", err)
		}
		err = s.start()
		if err == nil {
			return
		}
		s.kill()
		if attempt == 3 {
			s.t.Fatalf("mytest: the server did not start: %v", err)
		}
	}
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// DSN returns the DSN, in go-sql-driver/mysql's format, of the server's
// database simba as the user simba, with parseTime=true.
func (s *Server) DSN() string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = "simba", "simba"
	cfg.Net, cfg.Addr = "tcp", s.Addr()
	cfg.DBName = "simba"
	cfg.ParseTime = true
	return cfg.FormatDSN()
}

// Exec runs sql on a connection of its own to the server, as the user
// simba, failing the test on an error.
func (s *Server) Exec(sql string, args ...any) {
	s.t.Helper()
	if err := execOn(s.DSN(), []string{sql}, args...); err != nil {
		s.t.Fatalf("mytest: %s: %v", sql, err)
	}
}

// start starts the server and waits until it answers.
func (s *Server) start() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("opening the server's log: %w", err)
	}
	defer logf.Close()
	args := append([]string{"--no-defaults", "--datadir=" + s.data, "--tmpdir=" + s.tmp,
		"--port=" + strconv.Itoa(s.port), "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(s.data, "mariadbd.sock"),
		"--pid-file=" + filepath.Join(s.data, "mariadbd.pid"),
		"--performance-schema=OFF", "--max-connections=100"}, settings...)
	args = append(args, s.args...)
	cmd := exec.Command(s.mariadbd, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf // mariadbd logs to standard error
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if s.clock != "" {
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+libfaketime, "FAKETIME_TIMESTAMP_FILE="+s.clock,
			"FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1")
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting mariadbd: %w", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func(exited chan struct{}) { cmd.Wait(); close(exited) }(s.exited)
	return s.await()
}

// await waits until the server answers a ping, for up to waitServer.
func (s *Server) await() error {
	db, err := sql.Open("mysql", s.DSN())
	if err != nil {
		return fmt.Errorf("opening the DSN: %w", err)
	}
	defer db.Close()
	end := time.Now().Add(waitServer)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("mariadbd exited: %s", s.logTail())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(end) {
			return fmt.Errorf("not serving after %v: %v", waitServer, err)
		}
	}
}

// Log returns the server's log (what it wrote since StartServer, across
// restarts).
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	return string(b)
}

// logTail returns the end of the server's log.
func (s *Server) logTail() string {
	b := s.Log()
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return b
}

// signal sends sig to mariadbd (one process: its threads take it); for
// SIGSTOP it returns once every thread is stopped (package sigstop).
func (s *Server) signal(sig syscall.Signal) error {
	if s.cmd == nil {
		return errors.New("the server is not running")
	}
	return sigstop.Signal(s.cmd.Process, sig)
}

// wait waits for mariadbd to exit, for up to waitServer, failing the test
// if it does not.
func (s *Server) wait(what string) {
	s.t.Helper()
	select {
	case <-s.exited:
		s.cmd = nil
	case <-time.After(waitServer):
		s.t.Fatalf("mytest: the server %s did not exit within %v", what, waitServer)
	}
}

// Kill crashes the server: mariadbd is killed with SIGKILL (paused or
// not), as a machine that loses power. Nothing is flushed or written at
// the end, connections die without a word, and the server may be started
// again ([Server.Start]), recovering from its redo log: with every
// transaction that was committed, as the redo log is flushed at each
// commit (unless [WithServerArgs] changed innodb_flush_log_at_trx_commit).
// It fails the test if the server does not run, or has not exited within
// 30 seconds.
func (s *Server) Kill() {
	s.t.Helper()
	if err := s.signal(syscall.SIGKILL); err != nil {
		s.t.Fatalf("mytest: killing the server: %v", err)
	}
	s.wait("killed")
}

// Stop shuts the server down cleanly (SIGTERM: connections are ended,
// in-flight transactions rolled back, the buffer pool flushed), resuming
// it first if it was paused, and fails the test if it is still up after
// 30 seconds.
func (s *Server) Stop() {
	s.t.Helper()
	if err := s.signal(syscall.SIGTERM); err != nil {
		s.t.Fatalf("mytest: stopping the server: %v", err)
	}
	if err := s.signal(syscall.SIGCONT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Fatalf("mytest: resuming the server to stop it: %v", err)
	}
	s.wait("stopped")
}

// Start starts the server again after Kill or Stop, with the same datadir
// and on the same port, failing the test if it does not answer within 30
// seconds.
func (s *Server) Start() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatal("mytest: starting the server: it is running")
	}
	if err := s.start(); err != nil {
		s.t.Fatalf("mytest: restarting the server: %v", err)
	}
}

// Pause stops mariadbd with SIGSTOP and returns once every one of its
// threads is stopped: connections stay open, and nothing answers (a new
// connection is accepted by the kernel, and gets no greeting), until
// Resume. The clean-up kills a server that a failing test left paused.
func (s *Server) Pause() {
	s.t.Helper()
	if err := s.signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("mytest: pausing the server: %v", err)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.t.Helper()
	if err := s.signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("mytest: resuming the server: %v", err)
	}
}

// kill ends the server at once, if it runs (a clean-up): SIGCONT, in case
// it is paused, then SIGKILL; its data is thrown away.
func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT)
	s.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(waitServer):
		s.t.Errorf("mytest: the server (pid %d) did not exit within %v of SIGKILL", s.cmd.Process.Pid, waitServer)
	}
	s.cmd = nil
}

// StepClock sets the offset of the wall clock of a server started
// [WithFakeClock] to d from the machine's (a step forward for a positive
// d), at once: libfaketime reads it at every reading of the clock.
func (s *Server) StepClock(d time.Duration) {
	s.t.Helper()
	if s.clock == "" {
		s.t.Fatal("mytest: StepClock of a server started without WithFakeClock")
	}
	off := fmt.Sprintf("%+.6f\n", d.Seconds())
	tmp := s.clock + ".new"
	if err := os.WriteFile(tmp, []byte(off), 0o644); err != nil {
		s.t.Fatalf("mytest: writing %s: %v", tmp, err)
	}
	if err := os.Rename(tmp, s.clock); err != nil {
		s.t.Fatalf("mytest: %v", err)
	}
}
