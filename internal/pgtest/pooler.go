package pgtest

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/simba-go/simba/internal/servers"
)

// Pooler is a PgBouncer of one test's own in pool_mode=transaction, in
// front of a PostgreSQL server: each transaction (each statement outside
// one) may run on another server connection, so that a LISTEN does not
// outlast its statement and named prepared statements do not carry over.
// It listens on 127.0.0.1, on a free port.
type Pooler struct {
	t      testing.TB
	dir    string
	port   int
	user   string
	dbname string
	cmd    *exec.Cmd
	exited chan struct{}
}

// pgbouncerBin returns the path of pgbouncer, or "": Debian puts it in
// /usr/sbin, which is not on every PATH.
func pgbouncerBin() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer"
	}
	return ""
}

// StartPooler starts a PgBouncer in pool_mode=transaction in front of the
// server of dsn (DSN(t), or a [Server]'s DSN) and waits until a query
// through it answers; the test's clean-up stops it, and shows its log if
// the test failed. Every login to the pooler is trusted and runs on the
// server as the user of dsn, with dsn's password, in dsn's database. It
// skips t (fails it under SIMBA_REQUIRE_SERVERS=1) when PgBouncer is not
// installed (scripts/with-postgres-redis.sh installs Debian's pgbouncer),
// and fails t when it does not start.
func StartPooler(t testing.TB, dsn string) *Pooler {
	t.Helper()
	bin := pgbouncerBin()
	if bin == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("pgtest: PgBouncer is not installed and %s=1: install Debian's pgbouncer package", EnvRequire)
		}
		t.Skip("pgtest: PgBouncer is not installed: install Debian's pgbouncer package")
	}
	srv, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: the server's DSN: %v", err)
	}
	cred, err := serverCredential()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	dir, err := os.MkdirTemp("", "simba-pgbouncer-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if cred != nil {
		// PgBouncer refuses to run as root: it runs as the postgres user,
		// and writes its log in dir.
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	p := &Pooler{t: t, dir: dir, user: srv.User, dbname: srv.Database}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("pgtest: the log of PgBouncer on %s:\n%s", p.Addr(), p.Log())
		}
	})
	userlist := fmt.Sprintf("%q \"\"\n", srv.User)
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(userlist), 0o644); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	target := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", srv.Host, srv.Port, iniValue(srv.Database), iniValue(srv.User))
	if srv.Password != "" {
		target += " password=" + iniValue(srv.Password)
	}
	for attempt := 1; ; attempt++ {
		if p.port, err = servers.FreePort(); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		ini := strings.Join([]string{
			"[databases]",
			iniValue(srv.Database) + " = " + target,
			"[pgbouncer]",
			"listen_addr = 127.0.0.1",
			"listen_port = " + strconv.Itoa(p.port),
			"unix_socket_dir =",
			"auth_type = trust",
			"auth_file = " + filepath.Join(dir, "userlist.txt"),
			"pool_mode = transaction",
			"max_client_conn = 500",
			"default_pool_size = 20",
			"server_reset_query =",
			"ignore_startup_parameters = extra_float_digits",
			"logfile = " + filepath.Join(dir, "pgbouncer.log"),
			"log_connections = 0",
			"log_disconnections = 0",
			"",
		}, "\n")
		if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o644); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		err = p.start(bin, cred)
		if err == nil {
			return p
		}
		p.kill()
		if attempt == 3 {
			t.Fatalf("pgtest: PgBouncer did not start: %v\n%s", err, p.Log())
		}
	}
}

// iniValue quotes s for a value of pgbouncer.ini's [databases] section
// if it needs it.
func iniValue(s string) string {
	if s != "" && !strings.ContainsAny(s, " '\\=") {
		return s
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// start runs pgbouncer and waits until a query through it answers.
func (p *Pooler) start(bin string, cred *syscall.Credential) error {
	cmd := exec.Command(bin, filepath.Join(p.dir, "pgbouncer.ini"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting pgbouncer: %w", err)
	}
	p.cmd = cmd
	var err error
	p.exited, err = awaitServing(cmd, p.DSN(), true, func() string { return fmt.Sprintf("pgbouncer exited (%v)", cmd.ProcessState) })
	return err
}

// Addr returns the pooler's address, "127.0.0.1:port".
func (p *Pooler) Addr() string { return fmt.Sprintf("127.0.0.1:%d", p.port) }

// DSN returns the DSN of the server's database through the pooler, with
// default_query_exec_mode=exec: PgBouncer 1.18 keeps no prepared
// statements across transactions, which pgx's default mode needs (see
// the package documentation of backend/postgres).
func (p *Pooler) DSN() string {
	return p.DSNWith("default_query_exec_mode=exec")
}

// DSNWith returns the DSN of the server's database through the pooler
// with the settings given ("key=value", joined with & in the URL's
// query), after sslmode=disable.
func (p *Pooler) DSNWith(settings ...string) string {
	u := url.URL{Scheme: "postgres", User: url.User(p.user), Host: p.Addr(), Path: "/" + p.dbname,
		RawQuery: strings.Join(append([]string{"sslmode=disable"}, settings...), "&")}
	return u.String()
}

// Log returns PgBouncer's log.
func (p *Pooler) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "pgbouncer.log"))
	return string(b)
}

// kill ends PgBouncer at once, if it runs (a clean-up).
func (p *Pooler) kill() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM) // immediate shutdown (SIGINT waits for the clients)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}
