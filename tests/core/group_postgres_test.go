package core_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/pgtest"
	"github.com/simba-go/simba/internal/scenario"
)

// pgGroupTTL is the session TTL of the PostgreSQL group scenarios, granted
// as asked (to the millisecond). Renewals every 667ms, margin 200ms.
const pgGroupTTL = 2 * time.Second

// TestPostgresGroups runs the group scenarios (internal/scenario) on
// the shared PostgreSQL server (SIMBA_PG_DSN, see internal/pgtest): each
// scenario has a schema of its own, dropped at its end, and each node
// reaches the server through a fault proxy of its own
// (internal/faultproxy), which cuts every connection of its pool, the
// listening one included.
func TestPostgresGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("real time on a real PostgreSQL server: skipped with -short")
	}
	dsn := pgtest.DSN(t) // skip (or fail under SIMBA_REQUIRE_SERVERS=1) without a server
	scenario.RunGroupScenarios(t, postgresGroups(t, dsn, pgGroupTTL, true))
}

// postgresGroups is the group backend of the PostgreSQL server dsn names,
// with session TTL ttl and a schema per scenario; each node reaches the
// server through a proxy of its own if proxied, else directly (with no
// link to cut). dsn must be a URL, so that the proxy can take its host's
// place.
func postgresGroups(t *testing.T, dsn string, ttl time.Duration, proxied bool) scenario.GroupBackend {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Fatalf("%s=%q: want a postgres:// URL with a host (%v)", pgtest.EnvDSN, dsn, err)
	}
	return scenario.GroupBackend{TTL: ttl, Cluster: func(t *testing.T) scenario.GroupCluster {
		// Schema's clean-up, registered first, drops the schema after the
		// nodes have closed their clients and backends.
		schema := pgtest.Schema(t)
		return scenario.GroupCluster{Node: func(t *testing.T, name string) (backend.Backend, scenario.GroupLink) {
			t.Helper()
			nodeURL := *u
			var link scenario.GroupLink
			if proxied {
				px := scenario.NewProxyLink(t, u.Host)
				nodeURL.Host, link = px.Addr(), px
			}
			q := nodeURL.Query()
			q.Set("application_name", "simba-group-"+name)
			nodeURL.RawQuery = q.Encode()
			b, err := postgres.New(nodeURL.String(), postgres.WithSchema(schema), postgres.WithLogger(scenario.Logger(t, name+"/postgres")))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := b.Close(); err != nil {
					t.Errorf("backend of %s: Close: %v", name, err)
				}
			})
			return b, link
		}}
	}}
}

// TestPostgresGroupBenchmark is TestEtcdGroupBenchmark's join and leave
// rounds (benchGroupRounds) on the PostgreSQL server SIMBA_PG_DSN names,
// every node connecting directly:
//
//	SIMBA_GROUP_BENCH=1 ./scripts/with-postgres-redis.sh go test -C tests -run '^TestPostgresGroupBenchmark$' -v -count=1 ./core/
//
// The server of scripts/with-postgres-redis.sh does not fsync; to measure
// one that does, point SIMBA_PG_DSN at it (see docs/bench-groups.md).
func TestPostgresGroupBenchmark(t *testing.T) {
	if os.Getenv(groupBenchEnv) == "" {
		t.Skipf("set %s=1 to run the group benchmark", groupBenchEnv)
	}
	dsn := pgtest.DSN(t)
	var out strings.Builder
	fmt.Fprintf(&out, "%d partitions over %d nodes (7, and an 8th joining and leaving), TTL %v, PostgreSQL on loopback (%s), GOMAXPROCS %d.\n",
		benchPartitions, benchNodes, benchTTL, pgSettings(t, dsn), runtimeProcs())
	benchGroupRounds(t, postgresGroups(t, dsn, benchTTL, false), "PostgreSQL", &out)
	t.Logf("report:\n\n%s", out.String())
}

// pgSettings describes the server's version and durability settings, for
// the benchmark's report.
func pgSettings(t *testing.T, dsn string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting to %s: %v", pgtest.EnvDSN, err)
	}
	defer conn.Close(ctx)
	var version, fsync, syncCommit string
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')").Scan(&version, &fsync, &syncCommit); err != nil {
		t.Fatalf("reading the server's settings: %v", err)
	}
	return fmt.Sprintf("server %s, fsync %s, synchronous_commit %s", version, fsync, syncCommit)
}
