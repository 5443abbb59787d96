package fence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/fence"
)

// redisRegister is one key of Redis, written by SET or HSET.
type redisRegister struct {
	c        *redis.Client
	f        fence.Redis
	resource string
	key      string
	hash     bool
}

func (r *redisRegister) write(ctx context.Context, token uint64, value string, guarded bool) (int64, error) {
	switch {
	case guarded && r.hash:
		return 0, r.f.HSet(ctx, r.resource, token, r.key, "v", value)
	case guarded:
		return 0, r.f.Set(ctx, r.resource, token, r.key, value, 0)
	case r.hash:
		return 0, r.c.HSet(ctx, r.key, "v", value).Err()
	}
	return 0, r.c.Set(ctx, r.key, value, 0).Err()
}

func (r *redisRegister) read(ctx context.Context) (string, error) {
	if r.hash {
		return r.c.HGet(ctx, r.key, "v").Result()
	}
	return r.c.Get(ctx, r.key).Result()
}

// TestRedisRace is the race of race_test.go on Redis, with fenced SET and
// fenced HSET. Redis does not tell the commit order of two scripts: the
// checks use the writes' times and the final value.
func TestRedisRace(t *testing.T) {
	for _, hash := range []bool{false, true} {
		t.Run(map[bool]string{false: "set", true: "hset"}[hash], func(t *testing.T) {
			c, prefix := redisClient(t)
			f := fence.Redis{Client: c, Prefix: prefix + "fence:"}
			n := 0
			race(t, func(t *testing.T) register {
				n++
				return &redisRegister{c: c, f: f, resource: fmt.Sprintf("race-%d", n), key: fmt.Sprintf("%sdata-%d", prefix, n), hash: hash}
			}, 100)
		})
	}
}

// etcdRegister is one key of etcd, written in a transaction fenced with
// Etcd.Guard next to a compare of the writer's own (which always holds).
type etcdRegister struct {
	cli      *clientv3.Client
	f        fence.Etcd
	resource string
	key      string
}

func (r *etcdRegister) write(ctx context.Context, token uint64, value string, guarded bool) (int64, error) {
	if !guarded {
		resp, err := r.cli.Put(ctx, r.key, value)
		if err != nil {
			return 0, err
		}
		return resp.Header.Revision, nil
	}
	cmps, ops := r.f.Guard(r.resource, token)
	resp, err := r.cli.Txn(ctx).
		If(append(cmps, clientv3.Compare(clientv3.CreateRevision(r.key+"/never"), "=", 0))...).
		Then(append(ops, clientv3.OpPut(r.key, value))...).
		Commit()
	if err != nil {
		return 0, err
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	if err := r.f.Stale(ctx, r.cli, r.resource, token); err != nil {
		return 0, err
	}
	return 0, errors.New("the transaction failed but the token is not stale")
}

func (r *etcdRegister) read(ctx context.Context) (string, error) {
	resp, err := r.cli.Get(ctx, r.key)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// TestEtcdRace is the race of race_test.go on the embedded etcd; the commit
// order is the transactions' revision.
func TestEtcdRace(t *testing.T) {
	cli := etcdClient(t)
	f := fence.Etcd{Prefix: "/race/fence/"}
	n := 0
	race(t, func(t *testing.T) register {
		n++
		return &etcdRegister{cli: cli, f: f, resource: fmt.Sprintf("race-%d", n), key: fmt.Sprintf("/race/data/%d", n)}
	}, 30)
}
