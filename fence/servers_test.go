package fence_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // the "sqlite" driver

	"github.com/simba-go/simba/fence"
)

// Environment of the tests, set by scripts/with-postgres-redis.sh.
const (
	envPG      = "SIMBA_PG_DSN"
	envRedis   = "SIMBA_REDIS_ADDR"
	envRequire = "SIMBA_REQUIRE_SERVERS"
)

// opTimeout bounds operations expected to succeed promptly.
const opTimeout = 20 * time.Second

// testCtx returns a context that ends with the test or after opTimeout.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// unavailable skips t, or fails it under SIMBA_REQUIRE_SERVERS=1.
func unavailable(t testing.TB, server, env string) {
	t.Helper()
	if os.Getenv(envRequire) == "1" {
		t.Fatalf("no %s server: %s is not set (%s=1: a missing server is a failure)", server, env, envRequire)
	}
	t.Skipf("no %s server: %s is not set; run the tests through scripts/with-postgres-redis.sh (make test does) or set it", server, env)
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// uniqueName returns a name for the test's own table or keys: letters,
// digits and underscores, at most 50 characters.
func uniqueName(t testing.TB) string {
	n := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return fmt.Sprintf("t_%s_%08x", strings.Trim(n, "_"), rand.Uint32())
}

// sqlDB is a database for one test, with a fence table of its own.
type sqlDB struct {
	db    *sql.DB
	fence fence.SQL
	// table is a name for a data table of the test's own.
	table string
}

// postgresDB opens the PostgreSQL server of SIMBA_PG_DSN (skipping the test
// without one) and makes a fence table for the test, dropped when it ends.
func postgresDB(t testing.TB) *sqlDB {
	t.Helper()
	dsn := os.Getenv(envPG)
	if dsn == "" {
		unavailable(t, "PostgreSQL", envPG)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	name := uniqueName(t)
	d := &sqlDB{db: db, fence: fence.SQL{Dialect: fence.Postgres, Table: name + "_fence"}, table: name}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		for _, tbl := range []string{d.fence.Table, d.table} {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+tbl); err != nil {
				t.Errorf("drop %s: %v", tbl, err)
			}
		}
		db.Close()
	})
	if err := d.fence.CreateTable(testCtx(t), db); err != nil {
		t.Fatal(err)
	}
	return d
}

// sqliteDSN returns the DSN of the SQLite database file path: WAL, a busy
// timeout, no fsync at commit, and BEGIN in mode txlock.
func sqliteDSN(path, txlock string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)&_pragma=synchronous(normal)&_txlock=" + txlock
}

// sqliteDB opens a SQLite database in a file of the test's own and makes a
// fence table in it. txlock is "immediate" or "deferred".
func sqliteDB(t testing.TB, txlock string) *sqlDB {
	t.Helper()
	return sqliteAt(t, filepath.Join(t.TempDir(), "fence.db"), txlock)
}

// sqliteAt is sqliteDB on the database file path.
func sqliteAt(t testing.TB, path, txlock string) *sqlDB {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(path, txlock))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	t.Cleanup(func() { db.Close() })
	d := &sqlDB{db: db, fence: fence.SQL{Dialect: fence.SQLite}, table: uniqueName(t)}
	if err := d.fence.CreateTable(testCtx(t), db); err != nil {
		t.Fatal(err)
	}
	return d
}

// sqlDialects runs f for SQLite and, when there is a server, PostgreSQL.
func sqlDialects(t *testing.T, f func(t *testing.T, d *sqlDB)) {
	t.Run("sqlite", func(t *testing.T) { f(t, sqliteDB(t, "immediate")) })
	t.Run("postgres", func(t *testing.T) { f(t, postgresDB(t)) })
}

// redisClient connects to the Redis server of SIMBA_REDIS_ADDR (skipping the
// test without one) and returns a prefix for the test's keys, which are
// deleted when it ends.
func redisClient(t testing.TB) (*redis.Client, string) {
	t.Helper()
	addr := os.Getenv(envRedis)
	if addr == "" {
		unavailable(t, "Redis", envRedis)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 32})
	prefix := uniqueName(t) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		var keys []string
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("scan %s*: %v", prefix, err)
		}
		if len(keys) > 0 {
			if err := c.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("delete the test's keys: %v", err)
			}
		}
		c.Close()
	})
	if err := c.Ping(testCtx(t)).Err(); err != nil {
		t.Fatalf("redis at %s: %v", addr, err)
	}
	return c, prefix
}
