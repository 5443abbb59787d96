package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/internal/certs"
	"github.com/simba-go/simba/internal/mytest"
)

// The tests of the command against a real MariaDB, the one
// scripts/with-mariadb.sh starts ($SIMBA_MYSQL_DSN), each in a database of
// its own (mytest.DatabaseDSN), as users of their own.

// mySecret is the password of the users the tests make: it must never be
// printed.
const mySecret = "my-s3cret-Passw0rd"

// myDSNAs returns dsn with its user, and password if not "", replaced.
func myDSNAs(t testing.TB, dsn, user, password string) string {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("the test server's DSN: %v", err)
	}
	cfg.User, cfg.Passwd = user, password
	return cfg.FormatDSN()
}

// myDatabase returns the database of a DSN.
func myDatabase(t testing.TB, dsn string) string {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("the test server's DSN: %v", err)
	}
	return cfg.DBName
}

// myUser makes a user of the test's own on the test server, with password
// mySecret and the grants given (each a privilege list, granted on the
// database db), dropped at the end of the test, and returns its name.
func myUser(t testing.TB, db string, grants ...string) string {
	t.Helper()
	name := fmt.Sprintf("cli_%08x", rand.Uint32())
	mytest.Exec(t, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", name, mySecret))
	t.Cleanup(func() { mytest.Exec(t, fmt.Sprintf("DROP USER '%s'@'%%'", name)) })
	for _, g := range grants {
		mytest.Exec(t, fmt.Sprintf("GRANT %s ON `%s`.* TO '%s'@'%%'", g, db, name))
	}
	return name
}

// requireNoMySecret fails the test if r printed mySecret.
func requireNoMySecret(t *testing.T, what string, r result) {
	t.Helper()
	if strings.Contains(r.stdout+r.stderr, mySecret) {
		t.Errorf("%s: the DSN's password is printed\n%v", what, r)
	}
}

// Every command works against MariaDB while nodes run on it, with the DSN
// from the flag, the environment or a config file; a read-only user reads
// and is refused an operation; a user without permission, a wrong
// password, or no such user, is refused; a password is never printed.
func TestMySQL(t *testing.T) {
	if testing.Short() {
		t.Skip("uses a real MariaDB")
	}
	dsn := mytest.DatabaseDSN(t)
	db := myDatabase(t, dsn)
	nodeBackend := func() backend.Backend {
		b, err := mysql.New(dsn, mysql.WithTablePrefix("app_"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() }) // after the node
		return b
	}
	rec := &recorder{}
	a := startNode(t, nodeBackend(), "a", securedTTL, rec)
	a.schedule(t, "report", simba.FixedRate(time.Hour))
	a.whileLeader(t, "ingest")
	a.group(t, "billing", 4)
	startNode(t, nodeBackend(), "z", securedTTL, rec).whileLeader(t, "ingest")
	ops := myUser(t, db, "ALL")
	my := []string{"--mysql", myDSNAs(t, dsn, ops, mySecret), "--prefix", "app"}
	eventually(t, 30*time.Second, "report has run and billing is held", func() bool {
		r := runIn(t, nil, append([]string{"status", "--json"}, my...)...)
		requireNoMySecret(t, "status", r)
		if r.code != exitOK {
			return false
		}
		o := decode[overview](t, r.stdout)
		return o.Jobs.Total == 1 && o.Groups.Held == 4
	})

	t.Run("EveryCommand", func(t *testing.T) {
		for _, args := range everyCommand("20s") {
			r := runIn(t, nil, append(args, my...)...)
			requireNoMySecret(t, "simba "+strings.Join(args, " "), r)
			if r.code != exitOK {
				t.Errorf("simba %s: %v", strings.Join(args, " "), r)
			}
		}
		out := runIn(t, nil, append([]string{"status"}, my...)...).stdout
		if want := "mysql at " + ops + "@127.0.0.1:"; !strings.Contains(out, want) || !strings.Contains(out, "/"+db+" (tables app_*)") {
			t.Errorf("status does not name the backend as %q.../%s (tables app_*):\n%s", want, db, out)
		}
	})

	t.Run("EnvironmentAndConfigFile", func(t *testing.T) {
		env := map[string]string{envMySQL: myDSNAs(t, dsn, ops, ""), envPassword: mySecret, envPrefix: "/app/"}
		if r := runIn(t, env, "jobs"); r.code != exitOK || !strings.Contains(r.stdout, "report") {
			t.Errorf("jobs from $%s, $%s and $%s=/app/: %v", envMySQL, envPassword, envPrefix, r)
		}
		dir := t.TempDir()
		cfg := writeFile(t, filepath.Join(dir, "config.yaml"), fmt.Sprintf("backend: mysql\nmysql: %s\nprefix: app_\ntimeout: 8s\npassword-file: password\n", myDSNAs(t, dsn, ops, "")))
		writeFile(t, filepath.Join(dir, "password"), mySecret+"\n")
		r := runIn(t, nil, "elections", "--config", cfg)
		requireNoMySecret(t, "elections from --config", r)
		if r.code != exitOK || !strings.Contains(r.stdout, "ingest") {
			t.Errorf("elections from --config: %v", r)
		}
		// The environment wins over the file.
		if r := runIn(t, map[string]string{envZK: "127.0.0.1:1"}, "jobs", "--config", cfg); r.code == exitOK || !strings.Contains(r.stderr, "zookeeper at 127.0.0.1:1") {
			t.Errorf("jobs with $%s over a config file naming mysql: %v", envZK, r)
		}
	})

	// The admin reads through a View: no session, no write.
	t.Run("ReadOnlyUser", func(t *testing.T) {
		viewer := []string{"--mysql", myDSNAs(t, dsn, myUser(t, db, "SELECT"), mySecret), "--prefix", "app"}
		for _, args := range readCommands {
			r := runIn(t, nil, append(args, viewer...)...)
			requireNoMySecret(t, "simba "+strings.Join(args, " "), r)
			if r.code != exitOK {
				t.Errorf("simba %s as the read-only user: %v", strings.Join(args, " "), r)
			}
		}
		r := runIn(t, nil, append([]string{"disable", "report", "--reason", "not allowed"}, viewer...)...)
		requireOneLine(t, "disable as the read-only user", r, exitRefused, "may not do this", "command denied")
		requireNoMySecret(t, "disable as the read-only user", r)
	})

	t.Run("UserWithoutPermission", func(t *testing.T) {
		user := myUser(t, db)
		r := runIn(t, nil, "status", "--mysql", myDSNAs(t, dsn, user, mySecret), "--prefix", "app")
		requireOneLine(t, "status as a user without permission", r, exitRefused, "refused user "+user+" the database", "Access denied")
		requireNoMySecret(t, "status as a user without permission", r)
	})

	t.Run("WrongPassword", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			env  map[string]string
			args []string
		}{
			{"in the DSN", nil, []string{"--mysql", myDSNAs(t, dsn, ops, "wrong-password")}},
			{"from $SIMBA_PASSWORD", map[string]string{envMySQL: myDSNAs(t, dsn, ops, ""), envPassword: "wrong-password"}, nil},
			{"none", nil, []string{"--mysql", myDSNAs(t, dsn, ops, "")}},
		} {
			r := runIn(t, tc.env, append([]string{"status", "--prefix", "app"}, tc.args...)...)
			requireOneLine(t, "a wrong password "+tc.name, r, exitRefused, "mysql at "+ops+"@", "refused the login of user "+ops, "Access denied")
		}
	})

	t.Run("UnknownUser", func(t *testing.T) {
		user := fmt.Sprintf("cli_none_%08x", rand.Uint32())
		r := runIn(t, nil, "status", "--mysql", myDSNAs(t, dsn, user, mySecret), "--prefix", "app")
		requireOneLine(t, "status as a user that does not exist", r, exitRefused, "refused the login of user "+user)
		requireNoMySecret(t, "status as a user that does not exist", r)
	})
}

// myTables returns a checksum of each of the tables of database db, and
// the number of its session rows, read on the test server.
func myTables(t *testing.T, conn *sql.DB, db string) (map[string]int64, int) {
	t.Helper()
	rows, err := conn.QueryContext(t.Context(), "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", db)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, n := range names {
		var table string
		var sum sql.NullInt64
		if err := conn.QueryRowContext(t.Context(), fmt.Sprintf("CHECKSUM TABLE `%s`.`%s` EXTENDED", db, n)).Scan(&table, &sum); err != nil {
			t.Fatalf("CHECKSUM TABLE %s: %v", n, err)
		}
		sums[n] = sum.Int64
	}
	var sessions int
	if err := conn.QueryRowContext(t.Context(), fmt.Sprintf("SELECT COUNT(*) FROM `%s`.simba_sessions", db)).Scan(&sessions); err != nil {
		t.Fatal(err)
	}
	return sums, sessions
}

// The commands that show, a --watch and the console, as a user that may
// write, leave the tables as they were (no session row, no record), and
// no connection of theirs open on the server.
func TestMySQLReadOnlyWritesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("uses a real MariaDB")
	}
	dsn := mytest.DatabaseDSN(t)
	db := myDatabase(t, dsn)
	b, err := mysql.New(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	n := startNode(t, b, "a", securedTTL, &recorder{})
	n.schedule(t, "report", simba.FixedRate(time.Hour))
	n.group(t, "billing", 2)
	ops := myUser(t, db, "ALL")
	my := []string{"--mysql", myDSNAs(t, dsn, ops, mySecret)}
	eventually(t, 30*time.Second, "report has run and billing is held", func() bool {
		r := runIn(t, nil, append([]string{"status", "--json"}, my...)...)
		if r.code != exitOK {
			return false
		}
		o := decode[overview](t, r.stdout)
		return o.Jobs.Total == 1 && o.Groups.Held == 2
	})
	if err := n.client.Close(); err != nil {
		t.Fatalf("closing the node: %v", err)
	}
	b.Close()

	conn, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before, sessions := myTables(t, conn, db)
	if len(before) == 0 || sessions != 0 {
		t.Fatalf("before the commands: tables %v, %d session rows: want the backend's tables and no session", before, sessions)
	}

	for _, args := range readCommands {
		r := runIn(t, nil, append(args, my...)...)
		requireNoMySecret(t, "simba "+strings.Join(args, " "), r)
		if r.code != exitOK {
			t.Errorf("simba %s: %v", strings.Join(args, " "), r)
		}
	}
	// A --watch of three rounds or so, interrupted.
	var out, errb strings.Builder
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	c := &cli{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }, open: openBackend, probe: probe}
	if code := c.run(ctx, append([]string{"status", "--watch", "--interval", "500ms"}, my...)); code != exitOK || !strings.Contains(out.String(), "jobs       1") {
		t.Errorf("status --watch: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	cancel()
	// The console, its pages read.
	r := &consoleRun{t: t, out: &lockedBuffer{}, errb: &lockedBuffer{}, done: make(chan int, 1)}
	startConsoleCLI(t, &cli{stdout: r.out, stderr: r.errb, getenv: func(string) string { return "" }, open: openBackend}, r, append([]string{"--listen", "127.0.0.1:0"}, my...)...)
	if r.url == "" {
		t.Fatalf("simba console exited:\n%s\n%s", r.out, r.errb)
	}
	for _, page := range []string{"/", "/jobs/report"} {
		resp, err := http.Get(r.url + page)
		if err != nil {
			t.Fatalf("the console's %s: %v", page, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the console's %s: %s", page, resp.Status)
		}
	}
	if code := r.stop(); code != exitOK {
		t.Errorf("simba console stopped with %d:\n%s\n%s", code, r.out, r.errb)
	}

	after, sessions := myTables(t, conn, db)
	if sessions != 0 {
		t.Errorf("%d session rows after the commands that show: want none", sessions)
	}
	for name, sum := range before {
		if after[name] != sum {
			t.Errorf("table %s changed (checksum %d, then %d) under the commands that show", name, sum, after[name])
		}
	}
	if len(after) != len(before) {
		t.Errorf("tables %v, then %v", before, after)
	}
	// Nothing of the commands' stays connected to the server.
	eventually(t, 10*time.Second, "no connection of user "+ops+" is left", func() bool {
		var left int
		if err := conn.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?", ops).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
}

// A DSN that does not parse, settings that are not MySQL's, TLS settings
// that contradict the DSN's, a bad prefix and a config file holding a
// password: exit 2, one line, no password; nothing is connected to.
func TestMySQLBadInput(t *testing.T) {
	dir := t.TempDir()
	withPassword := writeFile(t, filepath.Join(dir, "secret.yaml"), "backend: mysql\nmysql: ops:"+mySecret+"@tcp(db:3306)/app\n")
	noBackend := writeFile(t, filepath.Join(dir, "nobackend.yaml"), "mysql: ops@tcp(db:3306)/app\n")
	endpoints := writeFile(t, filepath.Join(dir, "endpoints.yaml"), "backend: mysql\nendpoints: [db:3306]\n")
	for _, tc := range []struct {
		what string
		env  map[string]string
		args []string
		want []string
	}{
		{"an address not closed", nil, []string{"--mysql", "ops:" + mySecret + "@tcp(db:3306/app"}, []string{"--mysql: the MySQL DSN does not parse", "missing closing brace"}},
		{"no slash", nil, []string{"--mysql", "ops:" + mySecret + "@tcp(db:3306)"}, []string{"does not parse", "want user@tcp(host:3306)/database"}},
		{"a bad parameter", map[string]string{envMySQL: "ops:" + mySecret + "@tcp(db:3306)/app?parseTime=perhaps"}, nil, []string{"$SIMBA_MYSQL: the MySQL DSN does not parse"}},
		{"a TLS name of nothing registered", nil, []string{"--mysql", "ops:" + mySecret + "@tcp(db:3306)/app?tls=custom"}, []string{"unknown config name: custom", "--cacert"}},
		{"no database", nil, []string{"--mysql", "ops:" + mySecret + "@tcp(db:3306)/"}, []string{"the MySQL DSN names no database"}},
		{"--mysql and --postgres", nil, []string{"--mysql", "ops@tcp(db:3306)/app", "--postgres", "postgres://db/app"}, []string{"--postgres and --mysql both given"}},
		{"$SIMBA_MYSQL and $SIMBA_ETCD", map[string]string{envMySQL: "ops@tcp(db:3306)/app", envEtcd: "127.0.0.1:1"}, nil, []string{"both $SIMBA_ETCD and $SIMBA_MYSQL are set", "--etcd or --mysql"}},
		{"--user", nil, []string{"--mysql", "ops@tcp(db:3306)/app", "--user", "simba"}, []string{"MySQL takes the user in the DSN"}},
		{"--zk-auth", nil, []string{"--mysql", "ops@tcp(db:3306)/app", "--zk-auth", "a:b"}, []string{"--zk-auth is for ZooKeeper; MySQL takes the user in the DSN"}},
		{"tls=false and --insecure-skip-tls-verify", nil, []string{"--mysql", "ops@tcp(db:3306)/app?tls=false", "--insecure-skip-tls-verify"}, []string{"the DSN's tls=false and the TLS settings", "disagree"}},
		{"a missing --cacert", nil, []string{"--mysql", "ops@tcp(db:3306)/app", "--cacert", filepath.Join(dir, "missing.crt")}, []string{"CA certificates from --cacert"}},
		{"a bad prefix", nil, []string{"--mysql", "ops:" + mySecret + "@tcp(db:3306)/app", "--prefix", "/simba/jobs/"}, []string{`--prefix "/simba/jobs/"`, `table prefix "simba/jobs_"`, "want 1-40 characters"}},
		{"a password in the config file", nil, []string{"--config", withPassword}, []string{"mysql: the DSN holds a password, and a config file holds no secrets"}},
		{"mysql without backend", nil, []string{"--config", noBackend}, []string{"mysql (a DSN) is for backend: mysql"}},
		{"endpoints for mysql", nil, []string{"--config", endpoints}, []string{"backend mysql takes mysql: DSN"}},
	} {
		r := runIn(t, tc.env, append([]string{"status"}, tc.args...)...)
		if r.code != exitUsage {
			t.Errorf("%s: exit %d, want %d\n%v", tc.what, r.code, exitUsage, r)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr lacks %q\n%v", tc.what, w, r)
			}
		}
		if first, _, _ := strings.Cut(r.stderr, "\n"); strings.Count(first, "simba: ") != 1 {
			t.Errorf("%s: want one message line\n%v", tc.what, r)
		}
		requireNoMySecret(t, tc.what, r)
	}
}

// A server that refuses the connection fails the command at once; one
// that accepts it and says nothing fails it at --timeout: exit 3, one
// line, never a hang.
func TestMySQLUnreachable(t *testing.T) {
	closed := closedAddr(t)
	r := runIn(t, nil, "status", "--mysql", "ops:"+mySecret+"@tcp("+closed+")/app", "--timeout", "60s")
	requireOneLine(t, "a refused connection", r, exitUnreachable, "mysql at ops@"+closed+"/app: failed while opening a session", "connection refused")
	requireNoMySecret(t, "a refused connection", r)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // says nothing
		}
	}()
	start := time.Now()
	r = runIn(t, nil, "jobs", "--mysql", "ops@tcp("+l.Addr().String()+")/app", "--timeout", "1s")
	took := time.Since(start)
	requireOneLine(t, "a silent server", r, exitUnreachable, "mysql at ops@"+l.Addr().String()+"/app: no answer within 1s", "--mysql, $SIMBA_MYSQL")
	if took > 15*time.Second {
		t.Errorf("a silent server failed the command after %v of a 1s --timeout", took.Round(time.Millisecond))
	}
}

// The DSN and the settings that go with it come from a flag, the
// environment or the config file, in that order; --prefix names the
// tables; TLS files and the password come from the config file.
func TestMySQLTarget(t *testing.T) {
	b := memory.New()
	defer b.Close()
	dir := t.TempDir()
	if _, err := certs.Generate(filepath.Join(dir, "tls"), "ops"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "pw"), "file-password\n")
	cfg := writeFile(t, filepath.Join(dir, "config.yaml"), `backend: mysql
mysql: ops@tcp(file-db:3306)/app?parseTime=true
prefix: /file/
cacert: tls/ca.crt
cert: tls/client.crt
key: tls/client.key
password-file: pw
`)
	for _, tc := range []struct {
		name     string
		env      map[string]string
		args     []string
		want     string
		password string
		tls      bool
	}{
		{"the flag", map[string]string{}, []string{"--mysql", "ops:pw-not-shown@tcp(db:3307)/app"}, "mysql at ops@db:3307/app", "", false},
		{"the environment, with a prefix", map[string]string{envMySQL: "ops@tcp(db)/app", envPrefix: "/simba/"}, nil, "mysql at ops@db:3306/app (tables simba_*)", "", false},
		{"a flag beats the environment", map[string]string{envMySQL: "ops@tcp(db)/app", envEtcd: "e:2379"}, []string{"--mysql", "x@unix(/run/mysqld/mysqld.sock)/other", "--prefix", "app_"}, "mysql at x@/run/mysqld/mysqld.sock/other (tables app_*)", "", false},
		{"the config file", map[string]string{envConfig: cfg}, nil, "mysql at ops@file-db:3306/app (tables file_*)", "file-password", true},
		{"the environment over the file", map[string]string{envConfig: cfg, envMySQL: "env@tcp(env-db)/app", envPassword: "env-password"}, nil, "mysql at env@env-db:3306/app (tables file_*)", "env-password", true},
		{"--password over the file's password-file", map[string]string{envConfig: cfg}, []string{"--password", "flag-password"}, "mysql at ops@file-db:3306/app (tables file_*)", "flag-password", true},
		{"--insecure-skip-tls-verify", map[string]string{}, []string{"--mysql", "ops@tcp(db)/app?tls=true", "--insecure-skip-tls-verify"}, "mysql at ops@db:3306/app", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, b)
			h.env = tc.env
			h.ok(append([]string{"elections"}, tc.args...)...)
			got := h.opened[0]
			if got.String() != tc.want {
				t.Errorf("target %q, want %q", got, tc.want)
			}
			if got.sec.password != tc.password {
				t.Errorf("password %q, want %q", got.sec.password, tc.password)
			}
			if (got.sec.tls != nil) != tc.tls {
				t.Errorf("TLS %v, want %v", got.sec.tls != nil, tc.tls)
			}
			c, err := mysqlConfig(got)
			if err != nil {
				t.Fatalf("mysqlConfig: %v", err)
			}
			if (c.TLS != nil) != tc.tls {
				t.Errorf("the driver's TLS %v, want %v", c.TLS != nil, tc.tls)
			}
			if tc.password != "" && c.Passwd != tc.password {
				t.Errorf("the driver's password %q, want %q", c.Passwd, tc.password)
			}
		})
	}
	for prefix, want := range map[string]string{"/simba/": "simba_", "simba": "simba_", "simba_": "simba_", "/myapp/": "myapp_", "": ""} {
		if got := tablePrefixOf(prefix); got != want {
			t.Errorf("tablePrefixOf(%q) = %q, want %q", prefix, got, want)
		}
	}
	h := newHarness(t, b)
	if out := h.ok(completeCommand, "--", "--my"); strings.TrimSpace(out) != "--mysql" {
		t.Errorf("completion of --my: %q", out)
	}
	if out := h.ok("help"); !strings.Contains(out, "-mysql DSN") || !strings.Contains(out, "MySQL") {
		t.Errorf("help does not document --mysql:\n%s", out)
	}
}

// A MariaDB server of the test's own that serves TLS with a certificate
// of the test's CA, and users that require TLS, and a client certificate:
// the command logs in with --cacert (from the flag and from a config file),
// --cert and --key; a CA that did not sign the server's certificate, no
// TLS, and no client certificate are each one line, exit status 5.
func TestMySQLTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a MariaDB server")
	}
	dir, err := os.MkdirTemp("", "simba-cli-mytls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f, err := certs.Generate(dir, "certified")
	if err != nil {
		t.Fatal(err)
	}
	// The server runs as the mysql user when the tests run as root.
	for _, p := range []string{dir, f.ServerKey} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	srv := mytest.StartServer(t, mytest.WithServerArgs("--ssl-ca="+f.CA, "--ssl-cert="+f.ServerCert, "--ssl-key="+f.ServerKey))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server's log:\n%s", srv.Log())
		}
	})
	srv.Exec(fmt.Sprintf("CREATE USER 'ops'@'%%' IDENTIFIED BY '%s' REQUIRE SSL", mySecret))
	srv.Exec("GRANT ALL ON simba.* TO 'ops'@'%'")
	srv.Exec(fmt.Sprintf("CREATE USER 'certified'@'%%' IDENTIFIED BY '%s' REQUIRE X509", mySecret))
	srv.Exec("GRANT ALL ON simba.* TO 'certified'@'%'")
	other, err := certs.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	otherCA := writeFile(t, filepath.Join(t.TempDir(), "other-ca.crt"), string(other.CertPEM))
	dsn := func(user, password, params string) string {
		return user + ":" + password + "@tcp(" + srv.Addr() + ")/simba" + params
	}
	where := "mysql at ops@" + srv.Addr() + "/simba"

	r := runIn(t, nil, "status", "--mysql", dsn("ops", mySecret, ""), "--cacert", f.CA)
	requireNoMySecret(t, "status over TLS", r)
	if r.code != exitOK || !strings.Contains(r.stdout, where) {
		t.Errorf("status over TLS, --cacert: want exit 0 naming %s\n%v", where, r)
	}
	cfgDir := t.TempDir()
	writeFile(t, filepath.Join(cfgDir, "password"), mySecret+"\n")
	cfg := writeFile(t, filepath.Join(cfgDir, "config.yaml"), fmt.Sprintf("backend: mysql\nmysql: %s\ncacert: %s\ncert: %s\nkey: %s\npassword-file: password\n",
		dsn("certified", "", "?tls=true"), f.CA, f.ClientCert, f.ClientKey))
	r = runIn(t, map[string]string{envConfig: cfg}, "elections")
	requireNoMySecret(t, "elections with a client certificate from the config file", r)
	if r.code != exitOK {
		t.Errorf("elections with a client certificate from the config file: %v", r)
	}

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"a CA that did not sign the server's certificate", []string{"--mysql", dsn("ops", mySecret, ""), "--cacert", otherCA},
			[]string{where + ": TLS handshake failed", "not signed by the CA of --cacert"}},
		{"the system's CAs", []string{"--mysql", dsn("ops", mySecret, "?tls=true")},
			[]string{where + ": TLS handshake failed", "not signed by the system's CAs"}},
		{"no TLS for a user that requires it", []string{"--mysql", dsn("ops", mySecret, "")},
			[]string{where + " refused the login of user ops"}},
		{"no client certificate", []string{"--mysql", dsn("certified", mySecret, ""), "--cacert", f.CA},
			[]string{"refused the login of user certified"}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			r := runIn(t, nil, append([]string{"status", "--timeout", "10s"}, tc.args...)...)
			requireOneLine(t, tc.name, r, exitRefused, tc.want...)
			requireNoMySecret(t, tc.name, r)
			t.Logf("%s: exit %d: %s", tc.name, r.code, strings.TrimSpace(r.stderr))
		})
	}
}
