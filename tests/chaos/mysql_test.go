package chaos

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/mytest"
)

// TestMySQL plays a fault schedule on a MariaDB server (backend/mysql),
// then the negative control and the planted bugs, as TestPostgres does.
// With MariaDB installed it starts a server of its own
// (mytest.StartServer), which the schedule pauses (SIGSTOP), stops (a
// clean shutdown or a crash, SIGKILL, in turn) and starts again;
// otherwise it uses the server named by SIMBA_MYSQL_DSN, in a database of
// its own, without either; and without both it skips (fails under
// SIMBA_REQUIRE_SERVERS=1). On either server the schedule ends clients'
// connections with KILL CONNECTION.
func TestMySQL(t *testing.T) {
	t.Parallel()
	testBackend(t, startMySQL(t))
}

// myOpTimeout bounds the statements of the harness's own (the users, the
// leftovers, KILL CONNECTION).
const myOpTimeout = 20 * time.Second

// myMaxConnections is the connection limit of the server of the test's
// own: every client's pool may open up to 32, and the connections of a
// paused or blackholed client stay open on the server meanwhile.
const myMaxConnections = 1000

// mysqlWorld is one MariaDB server, and one database on it; each client
// reaches it through a proxy of its own, as a MySQL user of its own, by
// which KILL CONNECTION finds its connections (mytest.KillUser). A run's
// space is a table prefix in the database: the server of the test's own
// goes with its directory, the database on the shared one is dropped at
// the end of the test (mytest.Database), with every run's tables.
type mysqlWorld struct {
	dsn string         // of the server's database, direct, as its administrator
	srv *mytest.Server // nil for the shared server, which is neither paused nor restarted
	id  string         // of this world: in the table prefixes and user names

	mu      sync.Mutex
	links   []*myLink
	free    []myUser // users of closed links, for the next ones
	users   []string // every user created, dropped at the end on the shared server
	crashes int      // stops of the server so far: every other one is a crash
}

// myUser is a MySQL user of the world's own.
type myUser struct{ name, password string }

func startMySQL(t *testing.T) *mysqlWorld {
	var b [3]byte
	rand.Read(b[:])
	p := &mysqlWorld{id: hex.EncodeToString(b[:])}
	t.Cleanup(p.close)
	if srv, ok := startMyServer(t); ok {
		p.srv, p.dsn = srv, srv.DSN()
		return p
	}
	p.dsn = mytest.DatabaseDSN(t) // skips or fails without a server
	t.Logf("no MariaDB installed: using the server of %s, in a database of the test's own, without pauses or restarts", mytest.EnvDSN)
	return p
}

// startMyServer starts a server of the test's own, or reports that
// MariaDB is not installed (mytest.StartServer would skip, or fail under
// SIMBA_REQUIRE_SERVERS=1, which is no failure while SIMBA_MYSQL_DSN
// names a server), as startPGServer does.
func startMyServer(t *testing.T) (srv *mytest.Server, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			switch p := p.(type) {
			case skipped:
				t.Logf("%s", string(p))
				srv, ok = nil, false
			case fatalf:
				if strings.Contains(string(p), "not installed") && os.Getenv(mytest.EnvDSN) != "" {
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
	return mytest.StartServer(skipTB{softTB{t}}, mytest.WithServerArgs(fmt.Sprintf("--max-connections=%d", myMaxConnections))), true
}

func (p *mysqlWorld) close() {
	p.mu.Lock()
	links, users := p.links, p.users
	p.links, p.users, p.free = nil, nil, nil
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	if p.srv != nil || len(users) == 0 {
		return // the server of our own goes with its directory
	}
	// Not in the world's database, dropped by now (mytest.Database's
	// clean-up runs before this one).
	p.admin(false, func(ctx context.Context, db *sql.DB) error {
		for _, u := range users {
			db.ExecContext(ctx, "DROP USER IF EXISTS '"+u+"'@'%'")
		}
		return nil
	})
}

// admin runs f on a pool of its own to the server, as its administrator,
// within myOpTimeout; in the world's database if inDB, else in none.
func (p *mysqlWorld) admin(inDB bool, f func(ctx context.Context, db *sql.DB) error) error {
	cfg, err := mysql.ParseDSN(p.dsn)
	if err != nil {
		return err
	}
	if !inDB {
		cfg.DBName = ""
	}
	cfg.Timeout = 5 * time.Second // to connect
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), myOpTimeout)
	defer cancel()
	return f(ctx, db)
}

func (p *mysqlWorld) kind() string { return backendMySQL }

// newSpace returns a fresh table prefix; the run's grant watch creates
// its tables.
func (p *mysqlWorld) newSpace() string {
	var b [3]byte
	rand.Read(b[:])
	return "c" + p.id + "_" + hex.EncodeToString(b[:]) + "_"
}

// canRestart: the schedule's server faults are KILL CONNECTION on any
// server, and a pause, a stop or a crash on a server of the test's own.
func (p *mysqlWorld) canRestart() bool { return true }

// expiryLag: the server expires a session exactly TTL after its last
// renewal's statement, by its own clock, but nothing happens at that
// instant: a waiter's timer wakes it 20ms after the expiry it computed
// (MySQL has no notifications; a holder's bell, GET_LOCK, wakes waiters at
// a release only), and a waiter whose reads failed while the server was
// down or paused reads again with a backoff of up to 1s; as on
// PostgreSQL.
func (p *mysqlWorld) expiryLag() time.Duration { return 1200 * time.Millisecond }

// myLink is one client's proxy, and the MySQL user of its connections.
type myLink struct {
	w      *mysqlWorld
	p      *faultproxy.Proxy
	user   myUser
	dsn    string      // the client's: through the proxy, as user
	closed atomic.Bool // its client has exited
}

func (p *mysqlWorld) newLink() (link, error) {
	cfg, err := mysql.ParseDSN(p.dsn)
	if err != nil || cfg.Net != "tcp" || cfg.Addr == "" || cfg.DBName == "" {
		return nil, fmt.Errorf("the DSN %q is not a tcp(host:port)/database DSN: the clients' proxies need one (%v)", p.dsn, err)
	}
	u, err := p.user(cfg.DBName)
	if err != nil {
		return nil, err
	}
	px, err := faultproxy.New(cfg.Addr)
	if err != nil {
		p.release(u)
		return nil, err
	}
	l := &myLink{w: p, p: px, user: u}
	cfg.Addr, cfg.User, cfg.Passwd = px.Addr(), u.name, u.password
	l.dsn = cfg.FormatDSN()
	if strings.Contains(l.dsn, ",") {
		px.Close()
		p.release(u)
		return nil, fmt.Errorf("the client's DSN %q has a comma: the clients' endpoints are comma-separated", l.dsn)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.links = append(p.links, l)
	return l, nil
}

// user returns a user for a new link: one of a closed link, or a new one
// with what the backend needs on the tables of database (SELECT, INSERT,
// UPDATE, DELETE; the grant watch creates them). The server may be down
// or paused (a client started in place of a killed one during a server
// fault): a new user is then created once it is back.
func (p *mysqlWorld) user(database string) (myUser, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		u := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return u, nil
	}
	var b [8]byte
	rand.Read(b[:])
	u := myUser{name: fmt.Sprintf("chaos_%s_%d", p.id, len(p.users)+1), password: hex.EncodeToString(b[:])}
	p.users = append(p.users, u.name)
	p.mu.Unlock()
	stmts := []string{
		"CREATE USER IF NOT EXISTS '" + u.name + "'@'%' IDENTIFIED BY '" + u.password + "'",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON `" + strings.ReplaceAll(database, "`", "``") + "`.* TO '" + u.name + "'@'%'",
	}
	var err error
	for deadline := time.Now().Add(60 * time.Second); ; {
		err = p.admin(false, func(ctx context.Context, db *sql.DB) error {
			for _, s := range stmts {
				if _, err := db.ExecContext(ctx, s); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return myUser{}, fmt.Errorf("creating the MySQL user %s: %w", u.name, err)
	}
	return u, nil
}

// release gives a user back for the next link.
func (p *mysqlWorld) release(u myUser) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, u)
}

// endpoints is the client's DSN: openBackend takes it whole.
func (l *myLink) endpoints() []string { return []string{l.dsn} }
func (l *myLink) blackhole()          { l.p.Blackhole() }
func (l *myLink) heal()               { l.p.Heal() }

// close closes the proxy, and so the client's connections, and gives its
// user back to the world, for another link.
func (l *myLink) close() {
	if l.closed.Swap(true) {
		return
	}
	l.p.Close()
	l.w.release(l.user)
}

// stopServer applies a server fault, by fault.Member: on a server of the
// test's own -1 pauses it (SIGSTOP, SIGCONT when the fault ends) and 0
// stops it (a clean shutdown, SIGTERM, and a crash, SIGKILL, in turn; a
// start when the fault ends); 1 ends every client's connections with KILL
// CONNECTION, and any other (or -1 and 0 on the shared server) one
// client's, chosen at random. KILL CONNECTION is done at once: the fault's
// time only keeps the next server fault away.
func (p *mysqlWorld) stopServer(member int) (what, kind string, start func() error, err error) {
	none := func() error { return nil }
	switch {
	case member < 0 && p.srv != nil:
		if err := soft("pausing the server", p.srv.Pause); err != nil {
			return "", "", nil, err
		}
		return "server paused (SIGSTOP)", "SIGSTOP", func() error { return soft("resuming the server", p.srv.Resume) }, nil
	case member == 0 && p.srv != nil:
		p.mu.Lock()
		p.crashes++
		crash := p.crashes%2 == 0
		p.mu.Unlock()
		start := func() error { return soft("starting the server", p.srv.Start) }
		if crash {
			if err := soft("crashing the server", p.srv.Kill); err != nil {
				return "", "", nil, err
			}
			return "server crashed (SIGKILL)", "crash, SIGKILL", start, nil
		}
		if err := soft("stopping the server", p.srv.Stop); err != nil {
			return "", "", nil, err
		}
		return "server stopped (clean shutdown, SIGTERM)", "clean shutdown", start, nil
	}
	p.mu.Lock()
	var users []string
	for _, l := range p.links {
		if !l.closed.Load() {
			users = append(users, l.user.name)
		}
	}
	p.mu.Unlock()
	kind = "KILL CONNECTION, every client"
	if member != 1 && len(users) > 0 {
		users = []string{users[mrand.IntN(len(users))]}
		kind = "KILL CONNECTION, one client"
	}
	n, err := p.killUsers(users)
	if err != nil {
		return "", "", nil, err
	}
	return fmt.Sprintf("%d connections of %s ended (KILL CONNECTION)", n, strings.Join(users, ", ")), kind, none, nil
}

// killUsers ends every connection of the users given.
func (p *mysqlWorld) killUsers(users []string) (int, error) {
	total := 0
	err := p.admin(false, func(ctx context.Context, db *sql.DB) error {
		db.SetMaxOpenConns(1)
		for _, u := range users {
			n, err := mytest.KillUser(ctx, db, u)
			total += n
			if err != nil {
				return err
			}
		}
		return nil
	})
	return total, err
}

// leftovers lists the live rows of the prefix's tables: sessions alive by
// the server's clock, and their candidacies and members. An expired
// session's rows are dead everywhere (every statement of the backend
// tests liveness by the server's clock) and are deleted lazily, by the
// next waiter or Open, which a run's end does not wait for; the records
// and the token counters are kept on purpose.
func (p *mysqlWorld) leftovers(prefix string) ([]string, error) {
	q := func(table string) string { return "`" + prefix + table + "`" }
	var out []string
	err := p.admin(true, func(ctx context.Context, db *sql.DB) error {
		rows, err := db.QueryContext(ctx, `SELECT CONVERT(CONCAT('session ', x.id, ', expiring in ', (x.expires_us - `+myNowUS+`) / 1000000, 's') USING utf8mb4)
				FROM `+q("sessions")+` x WHERE x.expires_us > `+myNowUS+`
			UNION ALL SELECT CONVERT(CONCAT('candidacy ', c.name, '/', c.token, ' of session ', c.session) USING utf8mb4)
				FROM `+q("candidacies")+` c JOIN `+q("sessions")+` x ON x.id = c.session WHERE x.expires_us > `+myNowUS+`
			UNION ALL SELECT CONVERT(CONCAT('member ', m.id, ' of group ', m.grp, ' (session ', m.session, ')') USING utf8mb4)
				FROM `+q("members")+` m JOIN `+q("sessions")+` x ON x.id = m.session WHERE x.expires_us > `+myNowUS)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				return err
			}
			out = append(out, s)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("reading the live rows of prefix %s: %w", prefix, err)
	}
	return out, nil
}

// myNowUS is the server's clock in microseconds since the Unix epoch, as
// backend/mysql reads it (its nowUS).
const myNowUS = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
