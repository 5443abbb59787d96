package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/internal/certs"
	"github.com/simba-go/simba/internal/sigstop"

	"github.com/simba-go/simba/internal/servers"
)

// Server is a PostgreSQL server of one test's own, for the faults that
// the shared server must not suffer: a restart, a pause. Its cluster is
// made by initdb in a temporary directory (trust authentication, no
// fsync, as scripts/with-postgres-redis.sh makes the shared one, unless
// [WithPasswordUser], [WithTLS] or [WithDurableCommits] say otherwise)
// and it listens on
// 127.0.0.1 only, on a port that stays the same across restarts.
type Server struct {
	t      testing.TB
	bin    string
	data   string
	port   int
	cred   *syscall.Credential
	cmd    *exec.Cmd
	exited chan struct{}
	// durable: WithDurableCommits, fsync and synchronous_commit on.
	durable bool
}

// waitServer bounds a start or a stop of a Server.
const waitServer = 30 * time.Second

// bindir returns the directory of initdb and postgres: Debian keeps them
// in /usr/lib/postgresql/<version>/bin, off the PATH.
func bindir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi < vj
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// ServerOption configures a [Server] of [StartServer].
type ServerOption func(*serverConfig)

type serverConfig struct {
	user, password string      // WithPasswordUser
	tls            certs.Files // WithTLS: its ServerCert and ServerKey
	durable        bool        // WithDurableCommits
}

// WithDurableCommits runs the server as production does: fsync,
// synchronous_commit and full_page_writes on (PostgreSQL's defaults), so
// that a commit returns once its WAL is flushed to disk and survives a
// crash of the server ([Server.Kill]), unless the transaction itself
// turned synchronous_commit off. The benchmarks of a durable hand-off and
// the tests of what a crash keeps use it.
func WithDurableCommits() ServerOption {
	return func(c *serverConfig) { c.durable = true }
}

// WithPasswordUser makes the server check the password of every login
// over TCP but the postgres user's (trusted still, for the test's own
// set-up through [Server.DSN]), with scram-sha-256 as pg_hba.conf says,
// and creates the role user (LOGIN, with password, and CREATE on the
// postgres database, so that it may create a schema of its own).
func WithPasswordUser(user, password string) ServerOption {
	return func(c *serverConfig) { c.user, c.password = user, password }
}

// WithTLS makes the server serve TLS (ssl=on) with the server certificate
// and key of f, from internal/certs: for 127.0.0.1, ::1 and localhost,
// signed by f's CA. Clients choose with sslmode: the server accepts
// connections with TLS and without.
func WithTLS(f certs.Files) ServerOption {
	return func(c *serverConfig) { c.tls = f }
}

// serverCredential returns the credential to run PostgreSQL's programs
// with: the postgres user's when running as root (the server and
// PgBouncer refuse to run as root), else nil (oneself).
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and no postgres user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// StartServer makes a cluster and starts its server; the test's clean-up
// stops it and removes the directory. It skips t (fails it under
// SIMBA_REQUIRE_SERVERS=1) when PostgreSQL is not installed, and fails t
// when the server does not start.
func StartServer(t testing.TB, opts ...ServerOption) *Server {
	t.Helper()
	var cfg serverConfig
	for _, o := range opts {
		o(&cfg)
	}
	s := newServer(t)
	s.durable = cfg.durable
	initdb := exec.Command(filepath.Join(s.bin, "initdb"), "-D", s.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	if err := s.configure(cfg); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s.launch()
	if cfg.user != "" {
		s.Exec(fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD %s", pgx.Identifier{cfg.user}.Sanitize(), quoteLiteral(cfg.password)))
		s.Exec(fmt.Sprintf("GRANT CREATE ON DATABASE postgres TO %s", pgx.Identifier{cfg.user}.Sanitize()))
	}
	return s
}

// newServer makes the directories of a Server, removed by the test's
// clean-up: an empty data directory, owned by the user the server runs
// as. It skips t (fails it under SIMBA_REQUIRE_SERVERS=1) when PostgreSQL
// is not installed.
func newServer(t testing.TB) *Server {
	t.Helper()
	bin := bindir()
	if bin == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("pgtest: PostgreSQL is not installed (no initdb) and %s=1: install Debian's postgresql package", EnvRequire)
		}
		t.Skip("pgtest: PostgreSQL is not installed (no initdb): install Debian's postgresql package")
	}
	s := &Server{t: t, bin: bin}
	dir, err := os.MkdirTemp("", "simba-pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s.data = filepath.Join(dir, "data")
	if err := os.Mkdir(s.data, 0o700); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if s.cred, err = serverCredential(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if s.cred != nil {
		// The postgres user reaches its data directory through dir.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		if err := os.Chown(s.data, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	return s
}

// launch starts the server of a new data directory on a free port (trying
// three), failing the test if it does not start; the test's clean-up
// kills it.
func (s *Server) launch() {
	s.t.Helper()
	s.t.Cleanup(s.kill)
	for attempt := 1; ; attempt++ {
		var err error
		s.port, err = servers.FreePort()
		if err != nil {
			s.t.Fatalf("pgtest: %v", err)
		}
		err = s.start()
		if err == nil {
			return
		}
		s.kill()
		if attempt == 3 {
			s.t.Fatalf("pgtest: the server did not start: %v", err)
		}
	}
}

// configure writes, into the new cluster, what the options ask for: the
// pg_hba.conf of WithPasswordUser, the certificate and key of WithTLS
// (owned by the server's user, the key mode 0600 as the server demands),
// and their settings in postgresql.conf.
func (s *Server) configure(cfg serverConfig) error {
	var conf []string
	if cfg.user != "" {
		hba := "# pgtest.WithPasswordUser: the tests' own superuser is trusted, everyone else gives a password\n" +
			"host all postgres 127.0.0.1/32 trust\n" +
			"host replication postgres 127.0.0.1/32 trust\n" +
			"host all all 127.0.0.1/32 scram-sha-256\n"
		if err := s.writeFile("pg_hba.conf", []byte(hba), 0o600); err != nil {
			return err
		}
		conf = append(conf, "password_encryption = 'scram-sha-256'")
	}
	if cfg.tls.ServerCert != "" {
		for _, f := range []struct{ from, to string }{{cfg.tls.ServerCert, "server.crt"}, {cfg.tls.ServerKey, "server.key"}} {
			b, err := os.ReadFile(f.from)
			if err != nil {
				return fmt.Errorf("WithTLS: %w", err)
			}
			if err := s.writeFile(f.to, b, 0o600); err != nil {
				return err
			}
		}
		conf = append(conf, "ssl = on", "ssl_cert_file = 'server.crt'", "ssl_key_file = 'server.key'")
	}
	if len(conf) == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("\n# pgtest.StartServer's options\n" + strings.Join(conf, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeFile writes a file of the data directory, owned by the server's
// user.
func (s *Server) writeFile(name string, b []byte, mode os.FileMode) error {
	path := filepath.Join(s.data, name)
	if err := os.WriteFile(path, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(path, mode); err != nil { // an existing file keeps its mode
		return err
	}
	if s.cred != nil {
		return os.Chown(path, int(s.cred.Uid), int(s.cred.Gid))
	}
	return nil
}

// Exec runs sql on a connection of its own to the server, as the postgres
// user, failing the test on an error.
func (s *Server) Exec(sql string, args ...any) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		s.t.Fatalf("pgtest: connecting: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		s.t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// DSN returns the DSN of the server's postgres database.
func (s *Server) DSN() string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", s.Addr())
}

// start starts the server and waits until it accepts connections.
func (s *Server) start() error {
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(s.data), "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	durability := []string{"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"}
	if s.durable {
		durability = []string{"-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on"}
	}
	args := append([]string{"-D", s.data, "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="}, durability...)
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), append(args, "-c", "max_connections=100")...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	s.cmd = cmd
	s.exited, err = awaitServing(cmd, s.DSN(), false, func() string { return "postgres exited: " + s.logTail() })
	return err
}

// awaitServing waits until a connection to dsn answers (with query, a
// SELECT 1 on it too), for up to waitServer, cmd being the process that
// is to serve it, started. It returns a channel closed when cmd exits,
// and why it does not serve (when cmd exited: died's words).
func awaitServing(cmd *exec.Cmd, dsn string, query bool, died func() string) (exited chan struct{}, _ error) {
	exited = make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	end := time.Now().Add(waitServer)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			if query {
				_, err = conn.Exec(ctx, "SELECT 1")
			}
			conn.Close(context.Background())
		}
		cancel()
		if err == nil {
			return exited, nil
		}
		select {
		case <-exited:
			return exited, errors.New(died())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(end) {
			return exited, fmt.Errorf("not serving after %v: %v", waitServer, err)
		}
	}
}

// Log returns the server's log (what it wrote since StartServer, across
// restarts).
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(s.data), "server.log"))
	return string(b)
}

// logTail returns the end of the server's log.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(s.data), "server.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// signal sends sig to the postmaster.
func (s *Server) signal(sig syscall.Signal) error {
	if s.cmd == nil {
		return errors.New("pgtest: the server is not running")
	}
	return s.cmd.Process.Signal(sig)
}

// signalAll sends sig to the postmaster and then to each of its children:
// the backends and auxiliary processes, which PostgreSQL puts in sessions
// (and so process groups) of their own, out of reach of a signal to the
// postmaster's group. For SIGSTOP it returns once each process is stopped
// (package sigstop).
func (s *Server) signalAll(sig syscall.Signal) error {
	if s.cmd == nil {
		return errors.New("pgtest: the server is not running")
	}
	if err := sigstop.Signal(s.cmd.Process, sig); err != nil {
		return err
	}
	children, err := s.children()
	if err != nil {
		return err
	}
	for _, child := range children {
		if err := sigstop.Kill(child, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signalling process %d of the server: %w", child, err)
		}
	}
	return nil
}

// children returns the process ids of the postmaster's children, as /proc
// lists them.
func (s *Server) children() ([]int, error) {
	pid := strconv.Itoa(s.cmd.Process.Pid)
	procs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	var children []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone
		}
		if f := statFields(b); len(f) < 2 || f[1] != pid {
			continue
		}
		child, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		children = append(children, child)
	}
	return children, nil
}

// Kill crashes the server: every process of it is stopped (as by Pause,
// so that the postmaster starts no other and its children stay its own),
// then killed with SIGKILL, as a machine that loses power. Nothing is
// flushed or written at the end, connections die without a word, and the
// server may be started again ([Server.Start]), recovering from its WAL:
// without what it had not written to its WAL, such as commits
// acknowledged under synchronous_commit=off, which a Server of
// [StartServer] runs with unless [StartStandby] or [WithDurableCommits]
// turned it on (or a transaction turned it off for itself). (Without
// WithDurableCommits fsync is off: what is written survives a crash of
// the server, not of the machine.) It returns once every process of the
// server has exited, and fails the test if the server does not run, or
// has not exited within 30 seconds.
func (s *Server) Kill() {
	s.t.Helper()
	if err := s.signalAll(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("pgtest: stopping the server's processes before killing them: %v", err)
	}
	children, err := s.children()
	if err != nil {
		s.t.Fatalf("pgtest: listing the server's processes: %v", err)
	}
	for _, child := range children {
		if err := syscall.Kill(child, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			s.t.Fatalf("pgtest: killing process %d of the server: %v", child, err)
		}
	}
	if err := s.signal(syscall.SIGKILL); err != nil {
		s.t.Fatalf("pgtest: killing the server: %v", err)
	}
	select {
	case <-s.exited:
		s.cmd = nil
	case <-time.After(waitServer):
		s.t.Fatalf("pgtest: the server killed did not exit within %v", waitServer)
	}
	// The children die on their own time: a Start before the last one
	// has exited finds the shared memory still attached and refuses
	// ("pre-existing shared memory block is still in use").
	end := time.Now().Add(waitServer)
	for _, child := range children {
		for !exited(child) {
			if time.Now().After(end) {
				s.t.Fatalf("pgtest: process %d of the server killed still runs after %v", child, waitServer)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// exited reports whether the process pid has exited: it is gone, or a
// zombie (its memory released) waiting for whoever reaps it.
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := statFields(b)
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// statFields returns the fields of a /proc stat line after the command's
// name: state, ppid, … ("pid (comm) state ppid …", where comm may hold
// spaces and parentheses).
func statFields(b []byte) []string {
	i := strings.LastIndexByte(string(b), ')')
	return strings.Fields(string(b[i+1:]))
}

// Stop shuts the server down fast (SIGINT: sessions are ended, in-flight
// transactions rolled back, a checkpoint written, so that everything
// committed is there after Start), failing the test if it is still up
// after 30 seconds.
func (s *Server) Stop() {
	s.t.Helper()
	if err := s.signal(syscall.SIGINT); err != nil {
		s.t.Fatalf("pgtest: stopping the server: %v", err)
	}
	select {
	case <-s.exited:
		s.cmd = nil
	case <-time.After(waitServer):
		s.t.Fatalf("pgtest: the server did not stop within %v", waitServer)
	}
}

// Start starts the stopped server again, on the same port, failing the
// test if it does not accept connections within 30 seconds.
func (s *Server) Start() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatal("pgtest: the server is running")
	}
	if err := s.start(); err != nil {
		s.t.Fatalf("pgtest: restarting the server: %v", err)
	}
}

// Pause stops every process of the server with SIGSTOP, the postmaster
// first (so that it starts no other): connections stay open, and nothing
// answers, until Resume. The clean-up resumes a server that a failing test
// left paused.
func (s *Server) Pause() {
	s.t.Helper()
	if err := s.signalAll(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("pgtest: pausing the server: %v", err)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.t.Helper()
	if err := s.signalAll(syscall.SIGCONT); err != nil {
		s.t.Fatalf("pgtest: resuming the server: %v", err)
	}
}

// kill ends the server at once, if it runs (a clean-up).
func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	s.signalAll(syscall.SIGCONT)
	s.signal(syscall.SIGQUIT) // immediate shutdown
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.signalAll(syscall.SIGKILL)
		<-s.exited
	}
	s.cmd = nil
}
