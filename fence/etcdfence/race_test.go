package etcdfence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/fence/etcdfence"
	"github.com/simba-go/simba/internal/fencetest"
)

// etcdRegister is one key of etcd, written in a transaction fenced with
// Fence.Guard next to a compare of the writer's own (which always holds).
type etcdRegister struct {
	cli      *clientv3.Client
	f        etcdfence.Fence
	resource string
	key      string
}

func (r *etcdRegister) Write(ctx context.Context, token uint64, value string, guarded bool) (int64, error) {
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

func (r *etcdRegister) Read(ctx context.Context) (string, error) {
	resp, err := r.cli.Get(ctx, r.key)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// TestEtcdRace is fencetest.Race on a real etcd (internal/etcdtest); the commit
// order is the transactions' revision.
func TestEtcdRace(t *testing.T) {
	cli := etcdClient(t)
	f := etcdfence.Fence{Prefix: "/race/fence/"}
	n := 0
	fencetest.Race(t, func(t *testing.T) fencetest.Register {
		n++
		return &etcdRegister{cli: cli, f: f, resource: fmt.Sprintf("race-%d", n), key: fmt.Sprintf("/race/data/%d", n)}
	}, 30)
}
