package fence_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/fence"
)

// counterStore is a counter kept in a fenced resource, the state a leader
// loads at the start of its term and then increments with its token.
type counterStore interface {
	// load reads the counter, as a new leader loads its state.
	load(ctx context.Context) (int, error)
	// begin starts a write of v fenced with token that has passed the
	// token check and not landed yet (a SQL transaction between Check and
	// COMMIT, a Redis or etcd request on its way); land completes it and
	// reports whether the fence accepted it.
	begin(ctx context.Context, token uint64, v int) (land func() (bool, error), err error)
	// claim claims the resource for token.
	claim(ctx context.Context, token uint64) error
}

// write begins and lands a fenced write at once.
func write(ctx context.Context, s counterStore, token uint64, v int) (bool, error) {
	land, err := s.begin(ctx, token, v)
	if err != nil {
		return false, err
	}
	return land()
}

// lostUpdates plays the deposed-leader window on s and returns how many
// accepted increments the final counter lost. Leader 1 (token 1) writes
// 1, then has its write of 2 pass the fence's check and pauses before it
// lands. Leader 2 (token 2) is elected: it claims the resource (when
// claimed) while leader 1's write lands, loads the counter, and writes the
// next value. Each accepted write added one to the state its writer
// loaded, so the final counter must equal the number of accepted writes.
func lostUpdates(t *testing.T, s counterStore, claimed bool) int {
	t.Helper()
	ctx := testCtx(t)
	accepted := 0
	ok, err := write(ctx, s, 1, 1)
	if err != nil || !ok {
		t.Fatalf("leader 1's first write: accepted %v, %v", ok, err)
	}
	accepted++
	land, err := s.begin(ctx, 1, 2) // checked, then paused
	if err != nil {
		t.Fatalf("leader 1's second write: %v", err)
	}

	// Leader 2's term begins. Its claim waits for (SQL) or outruns
	// (Redis, etcd) leader 1's write in flight, which lands meanwhile.
	claimDone := make(chan error, 1)
	if claimed {
		go func() { claimDone <- s.claim(ctx, 2) }()
	} else {
		claimDone <- nil
	}
	var loaded int
	if !claimed {
		// The README's old pattern: load at the start of the term.
		if loaded, err = s.load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if claimed {
		// Where the claim outruns the write (Redis, etcd), the write
		// must come after it to show the rejection; where it waits (SQL),
		// the write lands while it waits.
		if _, waits := s.(*sqlCounter); !waits {
			if err := <-claimDone; err != nil {
				t.Fatalf("claim: %v", err)
			}
			claimDone <- nil
		}
	}
	late, err := land()
	if err != nil {
		t.Fatalf("leader 1's late write: %v", err)
	}
	if late {
		accepted++
	}
	if err := <-claimDone; err != nil {
		t.Fatalf("claim: %v", err)
	}
	if claimed {
		if loaded, err = s.load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ok, err = write(ctx, s, 2, loaded+1)
	if err != nil || !ok {
		t.Fatalf("leader 2's write: accepted %v, %v", ok, err)
	}
	accepted++
	final, err := s.load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claimed %v: %d writes accepted, counter %d (leader 1's late write accepted: %v)", claimed, accepted, final, late)
	return accepted - final
}

// TestClaimPreventsLostUpdate reproduces the update a new leader loses
// when it loads its state before its first fenced write, on every kind of
// fenced resource, and shows the claim prevents it.
func TestClaimPreventsLostUpdate(t *testing.T) {
	stores := map[string]func(t *testing.T) counterStore{
		"sqlite":   func(t *testing.T) counterStore { return newSQLCounter(t, sqliteDB(t, "immediate")) },
		"postgres": func(t *testing.T) counterStore { return newSQLCounter(t, postgresDB(t)) },
		"redis":    newRedisCounter,
		"etcd":     newEtcdCounter,
	}
	for _, name := range []string{"sqlite", "postgres", "redis", "etcd"} {
		t.Run(name, func(t *testing.T) {
			if lost := lostUpdates(t, stores[name](t), false); lost != 1 {
				t.Errorf("without the claim: %d updates lost, want 1 (the window this test reproduces)", lost)
			}
			if lost := lostUpdates(t, stores[name](t), true); lost != 0 {
				t.Errorf("with the claim: %d updates lost", lost)
			}
		})
	}
}

func TestClaimStale(t *testing.T) {
	check := func(t *testing.T, claim func(ctx context.Context, token uint64) error) {
		ctx := testCtx(t)
		if err := claim(ctx, 5); err != nil {
			t.Fatal(err)
		}
		if err := claim(ctx, 5); err != nil {
			t.Fatalf("claiming again in the same term: %v", err)
		}
		err := claim(ctx, 4)
		var se *fence.StaleError
		if !errors.As(err, &se) || se.Token != 4 || se.Highest != 5 {
			t.Fatalf("stale claim: %v", err)
		}
	}
	t.Run("sql", func(t *testing.T) {
		sqlDialects(t, func(t *testing.T, d *sqlDB) { check(t, newSQLCounter(t, d).claim) })
	})
	t.Run("redis", func(t *testing.T) { check(t, newRedisCounter(t).claim) })
	t.Run("etcd", func(t *testing.T) { check(t, newEtcdCounter(t).claim) })
	t.Run("invalid", func(t *testing.T) {
		ctx := testCtx(t)
		for _, err := range []error{
			fence.SQL{Dialect: fence.SQLite}.Claim(ctx, nil, "r", 1),
			fence.SQL{}.Claim(ctx, nil, "r", 1),
			fence.Redis{}.Claim(ctx, "r", 1),
			fence.Etcd{}.Claim(ctx, nil, "r", 1),
		} {
			if !errors.Is(err, fence.ErrInvalidArgument) {
				t.Errorf("want ErrInvalidArgument, got %v", err)
			}
		}
	})
}

// sqlCounter is a counter in row 1 of a table of the test's own.
type sqlCounter struct {
	d   *sqlDB
	res string
}

func newSQLCounter(t *testing.T, d *sqlDB) *sqlCounter {
	ctx := testCtx(t)
	for _, q := range []string{
		"CREATE TABLE " + d.table + " (id integer PRIMARY KEY, value integer NOT NULL)",
		"INSERT INTO " + d.table + " (id, value) VALUES (1, 0)",
	} {
		if _, err := d.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return &sqlCounter{d: d, res: "counter"}
}

func (c *sqlCounter) load(ctx context.Context) (v int, err error) {
	err = c.d.db.QueryRowContext(ctx, "SELECT value FROM "+c.d.table+" WHERE id = 1").Scan(&v)
	return v, err
}

func (c *sqlCounter) begin(ctx context.Context, token uint64, v int) (func() (bool, error), error) {
	tx, err := c.d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if err := c.d.fence.Check(ctx, tx, c.res, token); err != nil {
		tx.Rollback()
		if errors.Is(err, fence.ErrStale) {
			return func() (bool, error) { return false, nil }, nil
		}
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+c.d.table+" SET value = "+strconv.Itoa(v)+" WHERE id = 1"); err != nil {
		tx.Rollback()
		return nil, err
	}
	return func() (bool, error) { return true, tx.Commit() }, nil
}

func (c *sqlCounter) claim(ctx context.Context, token uint64) error {
	return c.d.fence.Claim(ctx, c.d.db, c.res, token)
}

// redisCounter is a counter in a Redis key.
type redisCounter struct {
	f   fence.Redis
	key string
}

func newRedisCounter(t *testing.T) counterStore {
	c, prefix := redisClient(t)
	return &redisCounter{f: fence.Redis{Client: c, Prefix: prefix + "fence:"}, key: prefix + "counter"}
}

func (c *redisCounter) load(ctx context.Context) (int, error) {
	v, err := c.f.Client.(*redis.Client).Get(ctx, c.key).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}

func (c *redisCounter) begin(ctx context.Context, token uint64, v int) (func() (bool, error), error) {
	return func() (bool, error) { return accepted(c.f.Set(ctx, "counter", token, c.key, v, 0)) }, nil
}

func (c *redisCounter) claim(ctx context.Context, token uint64) error {
	return c.f.Claim(ctx, "counter", token)
}

// etcdCounter is a counter in an etcd key.
type etcdCounter struct {
	f   fence.Etcd
	cli *clientv3.Client
	key string
}

func newEtcdCounter(t *testing.T) counterStore {
	p := "/" + uniqueName(t) + "/"
	return &etcdCounter{f: fence.Etcd{Prefix: p + "fence/"}, cli: etcdClient(t), key: p + "counter"}
}

func (c *etcdCounter) load(ctx context.Context) (int, error) {
	resp, err := c.cli.Get(ctx, c.key)
	if err != nil || len(resp.Kvs) == 0 {
		return 0, err
	}
	return strconv.Atoi(string(resp.Kvs[0].Value))
}

func (c *etcdCounter) begin(ctx context.Context, token uint64, v int) (func() (bool, error), error) {
	return func() (bool, error) {
		_, err := c.f.Commit(ctx, c.cli, "counter", token, clientv3.OpPut(c.key, fmt.Sprint(v)))
		return accepted(err)
	}, nil
}

func (c *etcdCounter) claim(ctx context.Context, token uint64) error {
	return c.f.Claim(ctx, c.cli, "counter", token)
}

// accepted turns a fenced write's error into accepted or rejected.
func accepted(err error) (bool, error) {
	if errors.Is(err, fence.ErrStale) {
		return false, nil
	}
	return err == nil, err
}
