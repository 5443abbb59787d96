package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/certs"
	"github.com/simba-go/simba/internal/pgtest"
)

// The tests of the command against a real PostgreSQL, the one
// scripts/with-postgres-redis.sh starts ($SIMBA_PG_DSN), each in a schema
// of its own (--prefix).

// pgSecret is the password the tests put in DSNs: the test server trusts
// every login, so it logs in anyway, and it must never be printed.
const pgSecret = "pg-s3cret-Passw0rd"

// pgDSNAs returns dsn with its user, and password if not "", replaced.
func pgDSNAs(t *testing.T, dsn, user, password string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("the test server's DSN %q: %v", dsn, err)
	}
	u.User = url.User(user)
	if password != "" {
		u.User = url.UserPassword(user, password)
	}
	return u.String()
}

// requireNoPGSecret fails the test if r printed pgSecret.
func requireNoPGSecret(t *testing.T, what string, r result) {
	t.Helper()
	if strings.Contains(r.stdout+r.stderr, pgSecret) {
		t.Errorf("%s: the DSN's password is printed\n%v", what, r)
	}
}

// The end-to-end scenarios, with the built command, on PostgreSQL; the
// nodes are in-process clients, and opsdemo processes (-postgres) where a
// node must crash.
func TestEndToEndPostgres(t *testing.T) {
	t.Parallel() // servers of its own; the command-line tests do not touch the process environment
	if testing.Short() {
		t.Skip("builds the command and uses a real PostgreSQL")
	}
	dsn := pgtest.DSN(t)
	bins := build(t)
	var list []scenario
	for _, sc := range scenarios {
		switch sc.name {
		case "Errors": // etcd's and ZooKeeper's flags; TestPostgresBadInput
		default:
			list = append(list, sc)
		}
	}
	runSome(t, list, func(t *testing.T) *cluster {
		schema := pgtest.Schema(t)
		return &cluster{
			bins: bins, kind: "postgres",
			args: []string{"--postgres", dsn, "--prefix", schema},
			newBackend: func() (backend.Backend, error) {
				return postgres.New(dsn, postgres.WithSchema(schema))
			},
		}
	})
}

// Every command works against PostgreSQL while nodes run on it, with the
// DSN from the flag, the environment or a config file; a read-only role
// reads and is refused an operation; a role without permission, or none,
// is refused; a password in the DSN is never printed.
func TestPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("uses a real PostgreSQL")
	}
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t)
	nodeBackend := func() backend.Backend {
		b, err := postgres.New(dsn, postgres.WithSchema(schema))
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
	pg := []string{"--postgres", pgDSNAs(t, dsn, "postgres", pgSecret), "--prefix", schema}
	eventually(t, 30*time.Second, "report has run and billing is held", func() bool {
		r := runIn(t, nil, append([]string{"status", "--json"}, pg...)...)
		requireNoPGSecret(t, "status", r)
		if r.code != exitOK {
			return false
		}
		o := decode[overview](t, r.stdout)
		return o.Jobs.Total == 1 && o.Groups.Held == 4
	})

	t.Run("EveryCommand", func(t *testing.T) {
		for _, args := range everyCommand("20s") {
			r := runIn(t, nil, append(args, pg...)...)
			requireNoPGSecret(t, "simba "+strings.Join(args, " "), r)
			if r.code != exitOK {
				t.Errorf("simba %s: %v", strings.Join(args, " "), r)
			}
		}
		// The commands resign and trigger report: its new holder writes its
		// status soon after it wins, not at once.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			r := runIn(t, nil, append([]string{"status", "report", "--json"}, pg...)...)
			v := decode[leaseView](t, r.stdout)
			terms := rec.elected("report")
			last := terms[len(terms)-1]
			if r.code == exitOK && v.Holder != nil && v.Holder.Token == last.Token {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("status report: %+v, want the holder of the last term, token %d, within 30s\n%v", v.Holder, last.Token, r)
				break
			}
		}
		out := runIn(t, nil, append([]string{"status"}, pg...)...).stdout
		if want := "postgres at postgres@"; !strings.Contains(out, want) || !strings.Contains(out, "(schema "+schema+")") {
			t.Errorf("status does not name the backend as %q... (schema %s):\n%s", want, schema, out)
		}
	})

	t.Run("DisableAndEnable", func(t *testing.T) {
		// The holder hands off after the command returns: --wait waits
		// for it, or the status below races the hand-off.
		r := runIn(t, nil, append([]string{"disable", "report", "--reason", "pg e2e", "--wait"}, pg...)...)
		if r.code != exitOK || !strings.Contains(r.stdout, "disabled report: nothing of it is held") {
			t.Fatalf("disable: %v", r)
		}
		v := decode[leaseView](t, runIn(t, nil, append([]string{"status", "report", "--json"}, pg...)...).stdout)
		if v.State != "disabled" || v.Held {
			t.Errorf("status while disabled: %+v", v)
		}
		if r := runIn(t, nil, append([]string{"enable", "report"}, pg...)...); r.code != exitOK {
			t.Fatalf("enable: %v", r)
		}
		eventually(t, 20*time.Second, "report is held again", func() bool {
			v := decode[leaseView](t, runIn(t, nil, append([]string{"status", "report", "--json"}, pg...)...).stdout)
			return v.State == "held"
		})
		audit := runIn(t, nil, append([]string{"audit", "report"}, pg...)...)
		if audit.code != exitOK || !strings.Contains(audit.stdout, "pg e2e") {
			t.Errorf("audit report lacks the disable's reason: %v", audit)
		}
	})

	t.Run("EnvironmentAndConfigFile", func(t *testing.T) {
		env := map[string]string{envPostgres: dsn, envPrefix: "/" + schema + "/"}
		if r := runIn(t, env, "jobs"); r.code != exitOK || !strings.Contains(r.stdout, "report") {
			t.Errorf("jobs from $%s and $%s=/%s/: %v", envPostgres, envPrefix, schema, r)
		}
		dir := t.TempDir()
		cfg := writeFile(t, filepath.Join(dir, "config.yaml"), fmt.Sprintf("backend: postgres\npostgres: %s\nprefix: %s\ntimeout: 8s\npassword-file: password\n", dsn, schema))
		writeFile(t, filepath.Join(dir, "password"), pgSecret+"\n")
		r := runIn(t, nil, "elections", "--config", cfg)
		requireNoPGSecret(t, "elections from --config", r)
		if r.code != exitOK || !strings.Contains(r.stdout, "ingest") {
			t.Errorf("elections from --config: %v", r)
		}
		// The environment wins over the file.
		if r := runIn(t, map[string]string{envZK: "127.0.0.1:1"}, "jobs", "--config", cfg); r.code == exitOK || !strings.Contains(r.stderr, "zookeeper at 127.0.0.1:1") {
			t.Errorf("jobs with $%s over a config file naming postgres: %v", envZK, r)
		}
	})

	// The admin reads through a View: no session, no write.
	t.Run("ReadOnlyRole", func(t *testing.T) {
		role := pgtest.UniqueName(t)
		pgtest.Exec(t, "CREATE ROLE "+role+" LOGIN")
		t.Cleanup(func() {
			pgtest.Exec(t, "DROP OWNED BY "+role)
			pgtest.Exec(t, "DROP ROLE "+role)
		})
		pgtest.Exec(t, fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s", schema, role))
		pgtest.Exec(t, fmt.Sprintf("GRANT SELECT ON ALL TABLES IN SCHEMA %s TO %s", schema, role))
		viewer := []string{"--postgres", pgDSNAs(t, dsn, role, pgSecret), "--prefix", schema}
		for _, args := range readCommands {
			r := runIn(t, nil, append(args, viewer...)...)
			requireNoPGSecret(t, "simba "+strings.Join(args, " "), r)
			if r.code != exitOK {
				t.Errorf("simba %s as the read-only role: %v", strings.Join(args, " "), r)
			}
		}
		r := runIn(t, nil, append([]string{"disable", "report", "--reason", "not allowed"}, viewer...)...)
		requireOneLine(t, "disable as the read-only role", r, exitRefused, "user "+role, "permission denied")
		requireNoPGSecret(t, "disable as the read-only role", r)
	})

	t.Run("RoleWithoutPermission", func(t *testing.T) {
		role := pgtest.UniqueName(t)
		pgtest.Exec(t, "CREATE ROLE "+role+" LOGIN")
		t.Cleanup(func() { pgtest.Exec(t, "DROP ROLE "+role) })
		r := runIn(t, nil, "status", "--postgres", pgDSNAs(t, dsn, role, pgSecret), "--prefix", schema)
		requireOneLine(t, "status as a role without permission", r, exitRefused, "user "+role, "permission denied")
		requireNoPGSecret(t, "status as a role without permission", r)
	})

	t.Run("UnknownRole", func(t *testing.T) {
		role := pgtest.UniqueName(t)
		r := runIn(t, nil, "status", "--postgres", pgDSNAs(t, dsn, role, pgSecret), "--prefix", schema)
		requireOneLine(t, "status as a role that does not exist", r, exitRefused, "refused the login of user "+role, "does not exist")
		requireNoPGSecret(t, "status as a role that does not exist", r)
	})
}

// A DSN that does not parse, settings that are not PostgreSQL's, and a
// config file holding a password: exit 2, one line, no password.
func TestPostgresBadInput(t *testing.T) {
	dir := t.TempDir()
	withPassword := writeFile(t, filepath.Join(dir, "secret.yaml"), "backend: postgres\npostgres: postgres://simba:"+pgSecret+"@db/app\n")
	noBackend := writeFile(t, filepath.Join(dir, "nobackend.yaml"), "postgres: postgres://simba@db/app\n")
	for _, tc := range []struct {
		what string
		args []string
		code int
		want []string
	}{
		{"a URL with a bad port", []string{"--postgres", "postgres://simba:" + pgSecret + "@db:x/app"}, exitUsage, []string{"--postgres: the PostgreSQL DSN does not parse"}},
		{"a URL that does not parse", []string{"--postgres", "postgres://simba:" + pgSecret + "@[db/app"}, exitUsage, []string{"does not parse"}},
		{"key=value with a bad port", []string{"--postgres", "host=db password=" + pgSecret + " port=x"}, exitUsage, []string{"does not parse"}},
		{"quoted key=value, unterminated", []string{"--postgres", "host=db password='" + pgSecret}, exitUsage, []string{"does not parse"}},
		{"--postgres and --etcd", []string{"--postgres", "postgres://db/app", "--etcd", "127.0.0.1:1"}, exitUsage, []string{"--etcd and --postgres both given"}},
		{"--cacert", []string{"--postgres", "postgres://db/app", "--cacert", "ca.pem"}, exitUsage, []string{"--cacert (from --cacert) is for etcd and ZooKeeper", "sslrootcert"}},
		{"--user", []string{"--postgres", "postgres://db/app", "--user", "simba"}, exitUsage, []string{"PostgreSQL takes the user in the DSN"}},
		{"a bad schema", []string{"--postgres", "postgres://db/app", "--prefix", "/simba/jobs/"}, exitUsage, []string{`--prefix "/simba/jobs/"`, "want 1-57 characters"}},
		{"a password in the config file", []string{"--config", withPassword}, exitUsage, []string{"the DSN holds a password, and a config file holds no secrets"}},
		{"postgres without backend", []string{"--config", noBackend}, exitUsage, []string{"postgres (a DSN) is for backend: postgres"}},
	} {
		r := runIn(t, nil, append([]string{"status"}, tc.args...)...)
		if r.code != tc.code {
			t.Errorf("%s: exit %d, want %d\n%v", tc.what, r.code, tc.code, r)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr lacks %q\n%v", tc.what, w, r)
			}
		}
		if first, _, _ := strings.Cut(r.stderr, "\n"); strings.Count(first, "simba: ") != 1 {
			t.Errorf("%s: want one message line\n%v", tc.what, r)
		}
		requireNoPGSecret(t, tc.what, r)
	}
}

// A PostgreSQL server of the test's own that checks passwords
// (scram-sha-256) and serves TLS with a certificate of the test's CA: the
// command logs in with the password and sslmode=verify-full, from the flag
// and from $SIMBA_POSTGRES (the password also from $SIMBA_PASSWORD); a
// wrong password and a CA that did not sign the server's certificate are
// each one line, exit status 5, naming the problem and never the password.
func TestPostgresPasswordAndTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a PostgreSQL server")
	}
	dir := t.TempDir()
	f, err := certs.Generate(filepath.Join(dir, "tls"), "ops")
	if err != nil {
		t.Fatal(err)
	}
	srv := pgtest.StartServer(t, pgtest.WithPasswordUser("ops", pgSecret), pgtest.WithTLS(f))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server's log:\n%s", srv.Log())
		}
	})
	other, err := certs.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	otherCA := writeFile(t, filepath.Join(dir, "other-ca.crt"), string(other.CertPEM))
	// dsn is the server's DSN as ops, with password if not "", and TLS
	// checked against ca.
	dsn := func(password, ca string) string {
		u := url.URL{Scheme: "postgres", User: url.User("ops"), Host: srv.Addr(), Path: "/postgres",
			RawQuery: url.Values{"sslmode": {"verify-full"}, "sslrootcert": {ca}}.Encode()}
		if password != "" {
			u.User = url.UserPassword("ops", password)
		}
		return u.String()
	}
	schema := "ops_schema"
	where := "postgres at ops@" + srv.Addr() + "/postgres (schema " + schema + ")"

	r := runIn(t, nil, "status", "--postgres", dsn(pgSecret, f.CA), "--prefix", schema)
	requireNoPGSecret(t, "status with the password over verify-full", r)
	if r.code != exitOK || !strings.Contains(r.stdout, where) {
		t.Errorf("status with the password over verify-full: want exit 0 naming %s\n%v", where, r)
	}
	env := map[string]string{envPostgres: dsn("", f.CA), envPassword: pgSecret, envPrefix: schema}
	r = runIn(t, env, "elections")
	requireNoPGSecret(t, "elections from $SIMBA_POSTGRES and $SIMBA_PASSWORD", r)
	if r.code != exitOK {
		t.Errorf("elections from $%s and $%s: %v", envPostgres, envPassword, r)
	}
	r = runIn(t, map[string]string{envPostgres: dsn(pgSecret, f.CA)}, "jobs", "--prefix", schema)
	requireNoPGSecret(t, "jobs from $SIMBA_POSTGRES", r)
	if r.code != exitOK {
		t.Errorf("jobs from $%s with the password in it: %v", envPostgres, r)
	}

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"a wrong password", nil, []string{"--postgres", dsn("wrong-password", f.CA)},
			[]string{where + " refused the login of user ops", "wrong password", "password authentication failed"}},
		{"a wrong password from $SIMBA_POSTGRES", map[string]string{envPostgres: dsn("wrong-password", f.CA)}, nil,
			[]string{"refused the login of user ops", "wrong password"}},
		{"a wrong password from $SIMBA_PASSWORD", map[string]string{envPostgres: dsn("", f.CA), envPassword: "wrong-password"}, nil,
			[]string{"refused the login of user ops", "wrong password"}},
		{"no password", nil, []string{"--postgres", dsn("", f.CA)},
			[]string{"refused the login of user ops"}},
		{"a CA that did not sign the server's certificate", nil, []string{"--postgres", dsn(pgSecret, otherCA)},
			[]string{where + ": TLS handshake failed", "not signed by the CA of sslrootcert " + otherCA}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			r := runIn(t, tc.env, append([]string{"status", "--prefix", schema, "--timeout", "10s"}, tc.args...)...)
			requireOneLine(t, tc.name, r, exitRefused, tc.want...)
			requireNoPGSecret(t, tc.name, r)
			t.Logf("%s: exit %d: %s", tc.name, r.code, strings.TrimSpace(r.stderr))
		})
	}
}

// The command through PgBouncer in transaction mode, with the DSN's
// default_query_exec_mode=exec (see the package documentation of
// backend/postgres): it reads, and writes an operation, while a node runs
// on the server directly.
func TestPostgresThroughPooler(t *testing.T) {
	if testing.Short() {
		t.Skip("uses a real PostgreSQL and PgBouncer")
	}
	dsn := pgtest.DSN(t)
	p := pgtest.StartPooler(t, dsn)
	schema := pgtest.Schema(t)
	b, err := postgres.New(dsn, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // after the node
	startNode(t, b, "a", securedTTL, &recorder{}).schedule(t, "report", simba.FixedRate(time.Hour))
	pg := []string{"--postgres", p.DSN(), "--prefix", schema}
	eventually(t, 30*time.Second, "report is held", func() bool {
		r := runIn(t, nil, append([]string{"status", "report", "--json"}, pg...)...)
		return r.code == exitOK && decode[leaseView](t, r.stdout).State == "held"
	})
	for _, args := range [][]string{{"status"}, {"jobs"}, {"disable", "report", "--reason", "through the pooler"}, {"enable", "report"}, {"audit", "report"}} {
		if r := runIn(t, nil, append(args, pg...)...); r.code != exitOK {
			t.Errorf("simba %s through the pooler: %v", strings.Join(args, " "), r)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("PgBouncer's log:\n%s", p.Log())
		}
	})
}

// TestPostgresSessionsThroughPooler: 50 sessions in a row through
// PgBouncer in transaction mode, commands and consoles by turns, while a
// node on the server directly writes its status records (each write a
// NOTIFY on the schema's channel). A LISTEN of theirs left on a server
// connection would receive those notifications while PgBouncer has lent
// it to no client: PgBouncer logs "got packet 'A' from server when not
// linked", and 1.18 can exit on it ("server in bad state"), taking every
// application behind it down. The backend sees the pooler and never
// LISTENs through it: PgBouncer's log stays free of "not linked", and it
// answers the last session.
func TestPostgresSessionsThroughPooler(t *testing.T) {
	if testing.Short() {
		t.Skip("uses a real PostgreSQL and PgBouncer")
	}
	dsn := pgtest.DSN(t)
	p := pgtest.StartPooler(t, dsn)
	schema := pgtest.Schema(t)
	b, err := postgres.New(dsn, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // after the node
	startNode(t, b, "a", securedTTL, &recorder{}).schedule(t, "report", simba.FixedRate(50*time.Millisecond))
	pg := []string{"--postgres", p.DSN(), "--prefix", schema}
	// Held, and its status record written (the holder writes it off the
	// task's path, after the lease is held: the console's page of the job
	// is not found before it is).
	eventually(t, 30*time.Second, "report is held and has run", func() bool {
		r := runIn(t, nil, append([]string{"status", "report", "--json"}, pg...)...)
		if r.code != exitOK {
			return false
		}
		v := decode[leaseView](t, r.stdout)
		return v.State == "held" && v.LastRun != nil
	})
	commands := [][]string{{"status"}, {"jobs"}, {"history", "report"}, {"audit"}, {"elections"}, {"groups"}}
	for i := range 50 {
		if i%2 == 0 {
			args := commands[(i/2)%len(commands)]
			if r := runIn(t, nil, append(args, pg...)...); r.code != exitOK {
				t.Fatalf("session %d, simba %s through the pooler: %v", i, strings.Join(args, " "), r)
			}
			continue
		}
		r := &consoleRun{t: t, out: &lockedBuffer{}, errb: &lockedBuffer{}, done: make(chan int, 1)}
		c := &cli{stdout: r.out, stderr: r.errb, getenv: func(string) string { return "" }, open: openBackend}
		startConsoleCLI(t, c, r, append([]string{"--listen", "127.0.0.1:0"}, pg...)...)
		if r.url == "" {
			t.Fatalf("session %d, simba console through the pooler exited:\n%s\n%s", i, r.out, r.errb)
		}
		for _, page := range []string{"/", "/jobs/report"} {
			resp, err := http.Get(r.url + page)
			if err != nil {
				t.Fatalf("session %d, the console's %s: %v", i, page, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("session %d, the console's %s: %s", i, page, resp.Status)
			}
		}
		if code := r.stop(); code != exitOK {
			t.Fatalf("session %d, simba console stopped with %d:\n%s\n%s", i, code, r.out, r.errb)
		}
	}
	if r := runIn(t, nil, append([]string{"status"}, pg...)...); r.code != exitOK {
		t.Fatalf("simba status through the pooler after 50 sessions: %v", r)
	}
	if log := p.Log(); strings.Contains(log, "not linked") {
		t.Errorf("PgBouncer received notifications on a server connection lent to no client (a LISTEN left through it by a session):\n%s", log)
	}
}

// TestPostgresNoListen: on the server directly, a console LISTENs on its
// schema's channel (pg_stat_activity shows the listening connection's
// statement); with --postgres-no-listen, or postgres-no-listen: true in
// the config file, it never does, and still serves.
func TestPostgresNoListen(t *testing.T) {
	if testing.Short() {
		t.Skip("uses a real PostgreSQL")
	}
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	listening := func() int {
		var n int
		if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE query = $1", `LISTEN "simba.`+schema+`"`).Scan(&n); err != nil {
			t.Fatalf("reading pg_stat_activity: %v", err)
		}
		return n
	}
	console := func(env map[string]string, args ...string) *consoleRun {
		r := &consoleRun{t: t, out: &lockedBuffer{}, errb: &lockedBuffer{}, done: make(chan int, 1)}
		c := &cli{stdout: r.out, stderr: r.errb, getenv: func(k string) string { return env[k] }, open: openBackend}
		startConsoleCLI(t, c, r, append([]string{"--listen", "127.0.0.1:0", "--prefix", schema}, args...)...)
		if r.url == "" {
			t.Fatalf("simba console exited:\n%s\n%s", r.out, r.errb)
		}
		resp, err := http.Get(r.url + "/")
		if err != nil {
			t.Fatalf("the console's page: %v", err)
		}
		resp.Body.Close()
		return r
	}

	r := console(nil, "--postgres", dsn)
	eventually(t, 30*time.Second, "the console LISTENs on the server directly", func() bool { return listening() == 1 })
	r.stop()
	eventually(t, 30*time.Second, "the console's listening connection is closed", func() bool { return listening() == 0 })

	cfg := writeFile(t, filepath.Join(t.TempDir(), "config.yaml"), "backend: postgres\npostgres: "+dsn+"\npostgres-no-listen: true\n")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"the flag", nil, []string{"--postgres", dsn, "--postgres-no-listen"}},
		{"the config file", map[string]string{envConfig: cfg}, nil},
	} {
		r := console(tc.env, tc.args...)
		time.Sleep(time.Second) // the time it took to LISTEN above, many times over
		if n := listening(); n != 0 {
			t.Errorf("%s: %d connection(s) LISTENing with postgres-no-listen", tc.name, n)
		}
		r.stop()
	}
}
