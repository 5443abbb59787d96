package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/pgtest"
	"github.com/simba-go/simba/internal/plant"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	plant.ForRun()
	goleak.VerifyTestMain(m)
}

func TestNodeRunsAndHandsOff(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd server and a node for two seconds")
	}
	srv := etcdtest.Start(t)
	runNode(t, []string{"-etcd", strings.Join(srv.Endpoints(), ",")}, "etcd at "+strings.Join(srv.Endpoints(), ","))
}

// TestNodeRunsAndHandsOffOnPostgres is TestNodeRunsAndHandsOff on the
// PostgreSQL server of scripts/with-postgres-redis.sh, in a schema of the
// test's own (-prefix).
func TestNodeRunsAndHandsOffOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a node on PostgreSQL for two seconds")
	}
	dsn, schema := pgtest.DSN(t), pgtest.Schema(t)
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("%s: %v", pgtest.EnvDSN, err)
	}
	runNode(t, []string{"-postgres", dsn, "-prefix", "/" + schema + "/"},
		fmt.Sprintf("PostgreSQL at %s/%s (schema %s)\n", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), cfg.Database, schema))
}

// runNode runs node a on the backend that flags name for two seconds, and
// checks that it said it runs on where, took, ran and handed off.
func runNode(t *testing.T, flags []string, where string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var out strings.Builder
	args := append(flags, "-member", "a", "-ttl", "1s", "-report", "500ms", "-partitions", "2", "-v")
	if code := runMain(ctx, args, &out, &out); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		"a: running ingest, report (every 500ms) and billing (2 partitions, every 1s) on " + where,
		"a: took ingest with token ",
		"a: took report with token ",
		"a: report runs with token ",
		"a: took billing.0 with token ",
		"a: billing partition 1 runs with token ",
		"a: handed off report (token ",
		"a: stopped",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestDeadBackend: against a backend that does not answer, the node says
// so and exits after -start-timeout, rather than print nothing until it is
// interrupted; its every line is in its one format.
func TestDeadBackend(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	// Nothing reaches slog's default logger (the library's default since
	// it logs by default): the node gives its own to the client and the
	// backend.
	var logged await.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out strings.Builder
	code := runMain(ctx, []string{"-etcd", closed, "-member", "a", "-ttl", "1s", "-start-timeout", "3s"}, &out, &out)
	if s := logged.String(); s != "" {
		t.Errorf("logged to slog's default logger, in another format:\n%s", s)
	}
	want := "opsdemo: no session on etcd at " + closed + " within 3s (-start-timeout): is it running, and is the address right?\n"
	if code != 1 || !strings.HasSuffix(out.String(), want) {
		t.Fatalf("exit %d, output:\n%s\nwant exit 1 (not an interruption a minute later) ending with %q", code, out.String(), want)
	}
	line := regexp.MustCompile(`^(\d\d:\d\d:\d\d\.\d{3} a: |opsdemo: )`)
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if !line.MatchString(l) {
			t.Errorf("a line of another format: %q", l)
		}
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-frob"}, 2, "flag provided but not defined"},
		{[]string{"extra"}, 2, `unexpected arguments ["extra"]`},
		{[]string{"-etcd", "", "-zk", "", "-postgres", ""}, 1, "no backend"},
		{[]string{"-etcd", "a:1", "-zk", "b:2"}, 1, "give one of -etcd, -zk and -postgres"},
		{[]string{"-zk", "b:2", "-postgres", "postgres://db/app"}, 1, "give one of -etcd, -zk and -postgres"},
		{[]string{"-postgres", "postgres://simba:s3cret@db:x/app"}, 1, "-postgres: cannot parse `postgres://simba:xxxxx@db:x/app`: invalid port"},
		{[]string{"-postgres", "postgres://db/app", "-prefix", "/a/b/"}, 1, `-postgres: simba/postgres: schema name "a/b"`},
	} {
		var out strings.Builder
		if code := runMain(t.Context(), tc.args, &out, &out); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%q: exit %d, output %q; want %d, %q", tc.args, code, out.String(), tc.code, tc.want)
		}
	}
}
