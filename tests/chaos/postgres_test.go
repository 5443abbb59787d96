package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/pgtest"
)

// TestPostgres plays a fault schedule on a PostgreSQL server, then the
// negative control and the planted bugs. With PostgreSQL installed it
// starts a server of its own (pgtest.StartServer), which the schedule
// pauses (SIGSTOP of every server process) and restarts (a fast shutdown,
// then a start); otherwise it uses the server named by SIMBA_PG_DSN,
// without either; and without both it skips (fails under
// SIMBA_REQUIRE_SERVERS=1). On either server the schedule ends clients'
// connections with pg_terminate_backend.
func TestPostgres(t *testing.T) {
	t.Parallel()
	testBackend(t, startPostgres(t))
}

// pgOpTimeout bounds the statements of the harness's own (the schema, the
// leftovers, pg_terminate_backend).
const pgOpTimeout = 20 * time.Second

// postgresWorld is one PostgreSQL server; each client reaches it through a
// proxy of its own, with an application_name of its own, by which
// pg_terminate_backend finds its connections.
type postgresWorld struct {
	dsn string         // of the server, direct
	srv *pgtest.Server // nil for the shared server, which is neither paused nor restarted
	id  string         // of this world: in the schemas and application names

	mu      sync.Mutex
	links   []*pgLink
	nextApp int
	schemas []string // created on the shared server, dropped at the end
}

func startPostgres(t *testing.T) *postgresWorld {
	var b [3]byte
	rand.Read(b[:])
	p := &postgresWorld{id: hex.EncodeToString(b[:])}
	t.Cleanup(p.close)
	if srv, ok := startPGServer(t); ok {
		p.srv, p.dsn = srv, srv.DSN()
		return p
	}
	p.dsn = pgtest.DSN(t) // skips or fails without a server
	t.Logf("no PostgreSQL installed: using the server of %s, without pauses or restarts", pgtest.EnvDSN)
	return p
}

// startPGServer starts a server of the test's own, or reports that
// PostgreSQL is not installed (pgtest.StartServer would skip, or fail
// under SIMBA_REQUIRE_SERVERS=1, which is no failure while SIMBA_PG_DSN
// names a server). As for
// ZooKeeper, the server gets a TB whose Fatal panics, so that the pauses
// and restarts, on goroutines of their own, return its failures as errors.
func startPGServer(t *testing.T) (srv *pgtest.Server, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			switch p := p.(type) {
			case skipped:
				t.Logf("%s", string(p))
				srv, ok = nil, false
			case fatalf:
				// Not installed, under SIMBA_REQUIRE_SERVERS=1: a failure
				// only if there is no shared server either.
				if strings.Contains(string(p), "not installed") && os.Getenv(pgtest.EnvDSN) != "" {
					t.Logf("%s", string(p))
					srv, ok = nil, false
					return
				}
				t.Fatal(string(p))
			default:
				panic(p)
			}
		}
	}()
	return pgtest.StartServer(skipTB{softTB{t}}), true
}

type skipped string

// skipTB is a softTB whose Skip panics with a skipped: not installed is
// not a reason to skip while a shared server may be there.
type skipTB struct{ softTB }

func (s skipTB) Skip(args ...any)                 { panic(skipped(fmt.Sprint(args...))) }
func (s skipTB) Skipf(format string, args ...any) { panic(skipped(fmt.Sprintf(format, args...))) }
func (s skipTB) SkipNow()                         { panic(skipped("skipped")) }

// soft runs a method of the server, returning its failure as an error.
func soft(what string, f func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			ff, ok := p.(fatalf)
			if !ok {
				panic(p)
			}
			err = fmt.Errorf("%s: %s", what, string(ff))
		}
	}()
	f()
	return nil
}

func (p *postgresWorld) close() {
	p.mu.Lock()
	links, schemas := p.links, p.schemas
	p.links, p.schemas = nil, nil
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	if p.srv != nil || len(schemas) == 0 {
		return // the server of our own goes with its directory
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgOpTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.dsn)
	if err != nil {
		return // the runs have reported the server's troubles
	}
	defer conn.Close(context.Background())
	for _, s := range schemas {
		conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE")
	}
}

func (p *postgresWorld) kind() string { return backendPostgres }

// newSpace returns a fresh schema name; the run's grant watch creates it.
func (p *postgresWorld) newSpace() string {
	var b [4]byte
	rand.Read(b[:])
	s := "chaos_" + p.id + "_" + hex.EncodeToString(b[:])
	p.mu.Lock()
	defer p.mu.Unlock()
	p.schemas = append(p.schemas, s)
	return s
}

// canRestart: the schedule's server faults are pg_terminate_backend on
// any server, and a pause or a restart on a server of the test's own.
func (p *postgresWorld) canRestart() bool { return true }

// expiryLag: the server expires a session exactly TTL after its last
// renewal's statement, by its own clock, but nothing happens at that
// instant: a waiter's timer wakes it 20ms after the expiry it computed,
// and a waiter whose reads failed while the server was down or paused
// reads again with a backoff of up to 1s.
func (p *postgresWorld) expiryLag() time.Duration { return 1200 * time.Millisecond }

// pgLink is one client's proxy, and the application_name of its
// connections.
type pgLink struct {
	p      *faultproxy.Proxy
	app    string
	dsn    string      // the client's: through the proxy, with app
	closed atomic.Bool // its client has exited
}

func (p *postgresWorld) newLink() (link, error) {
	u, err := url.Parse(p.dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return nil, fmt.Errorf("the DSN %q is not a postgres:// URL with a host: the clients' proxies need one", p.dsn)
	}
	px, err := faultproxy.New(u.Host)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nextApp++
	l := &pgLink{p: px, app: fmt.Sprintf("simba_chaos_%s_%d", p.id, p.nextApp)}
	u.Host = px.Addr()
	q := u.Query()
	q.Set("application_name", l.app)
	u.RawQuery = q.Encode()
	l.dsn = u.String()
	p.links = append(p.links, l)
	return l, nil
}

// endpoints is the client's DSN: openBackend takes it whole.
func (l *pgLink) endpoints() []string { return []string{l.dsn} }
func (l *pgLink) blackhole()          { l.p.Blackhole() }
func (l *pgLink) heal()               { l.p.Heal() }
func (l *pgLink) close()              { l.closed.Store(true); l.p.Close() }

// stopServer applies a server fault, by fault.Member: on a server of the
// test's own -1 pauses it (SIGSTOP of every process, SIGCONT when the
// fault ends) and 0 stops it (a fast shutdown; a start when the fault
// ends); 1 ends every client's connections with pg_terminate_backend, and
// any other (or -1 and 0 on the shared server) one client's, chosen at
// random. pg_terminate_backend is done at once: the fault's time only
// keeps the next server fault away.
func (p *postgresWorld) stopServer(member int) (what, kind string, start func() error, err error) {
	none := func() error { return nil }
	switch {
	case member < 0 && p.srv != nil:
		if err := soft("pausing the server", p.srv.Pause); err != nil {
			return "", "", nil, err
		}
		return "server paused (SIGSTOP of every process)", "SIGSTOP", func() error { return soft("resuming the server", p.srv.Resume) }, nil
	case member == 0 && p.srv != nil:
		if err := soft("stopping the server", p.srv.Stop); err != nil {
			return "", "", nil, err
		}
		return "server stopped (fast shutdown)", "fast shutdown", func() error { return soft("starting the server", p.srv.Start) }, nil
	}
	p.mu.Lock()
	var apps []string
	for _, l := range p.links {
		if !l.closed.Load() {
			apps = append(apps, l.app)
		}
	}
	p.mu.Unlock()
	kind = "pg_terminate_backend, every client"
	if member != 1 && len(apps) > 0 {
		apps = []string{apps[mrand.IntN(len(apps))]}
		kind = "pg_terminate_backend, one client"
	}
	n, err := p.terminate(apps)
	if err != nil {
		return "", "", nil, err
	}
	return fmt.Sprintf("%d connections of %s ended (pg_terminate_backend)", n, strings.Join(apps, ", ")), kind, none, nil
}

// terminate ends every connection of the applications apps.
func (p *postgresWorld) terminate(apps []string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgOpTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.dsn)
	if err != nil {
		return 0, fmt.Errorf("connecting for pg_terminate_backend: %w", err)
	}
	defer conn.Close(context.Background())
	total := 0
	for _, app := range apps {
		n, err := pgtest.Terminate(ctx, conn, app)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// leftovers lists the live rows of the schema: sessions alive by the
// server's clock, and their candidacies and members. An expired session's
// rows are dead everywhere (every statement of the backend tests liveness
// by the server's clock) and are deleted lazily, by the next waiter or
// Open, which a run's end does not wait for; the records and the token
// counters are kept on purpose.
func (p *postgresWorld) leftovers(schema string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgOpTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	s := pgx.Identifier{schema}.Sanitize()
	rows, err := conn.Query(ctx, `SELECT 'session ' || x.id || ', expiring in ' || (x.expires_at - clock_timestamp())
			FROM `+s+`.sessions x WHERE x.expires_at > clock_timestamp()
		UNION ALL SELECT 'candidacy ' || c.name || '/' || c.token || ' of session ' || c.session
			FROM `+s+`.candidacies c JOIN `+s+`.sessions x ON x.id = c.session WHERE x.expires_at > clock_timestamp()
		UNION ALL SELECT 'member ' || m.id || ' of group ' || m.grp || ' (session ' || m.session || ')'
			FROM `+s+`.members m JOIN `+s+`.sessions x ON x.id = m.session WHERE x.expires_at > clock_timestamp()`)
	if err != nil {
		return nil, fmt.Errorf("reading the live rows of schema %s: %w", schema, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
