package etcdfence_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/fence/etcdfence"
	"github.com/simba-go/simba/internal/fencetest"
)

// TestClaimPreventsLostUpdate is fencetest.ClaimPreventsLostUpdate on etcd.
func TestClaimPreventsLostUpdate(t *testing.T) {
	fencetest.ClaimPreventsLostUpdate(t, newEtcdCounter)
}

func TestClaimStale(t *testing.T) {
	t.Run("etcd", func(t *testing.T) { fencetest.ClaimStale(t, newEtcdCounter(t).Claim) })
	t.Run("invalid", func(t *testing.T) {
		if err := (etcdfence.Fence{}).Claim(fencetest.Ctx(t), nil, "r", 1); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("want ErrInvalidArgument, got %v", err)
		}
	})
}

// etcdCounter is a counter in an etcd key.
type etcdCounter struct {
	f   etcdfence.Fence
	cli *clientv3.Client
	key string
}

func newEtcdCounter(t *testing.T) fencetest.CounterStore {
	p := "/" + fencetest.UniqueName(t) + "/"
	return &etcdCounter{f: etcdfence.Fence{Prefix: p + "fence/"}, cli: etcdClient(t), key: p + "counter"}
}

func (c *etcdCounter) Load(ctx context.Context) (int, error) {
	resp, err := c.cli.Get(ctx, c.key)
	if err != nil || len(resp.Kvs) == 0 {
		return 0, err
	}
	return strconv.Atoi(string(resp.Kvs[0].Value))
}

func (c *etcdCounter) Begin(ctx context.Context, token uint64, v int) (func() (bool, error), error) {
	return func() (bool, error) {
		_, err := c.f.Commit(ctx, c.cli, "counter", token, clientv3.OpPut(c.key, fmt.Sprint(v)))
		return fencetest.Accepted(err)
	}, nil
}

func (c *etcdCounter) Claim(ctx context.Context, token uint64) error {
	return c.f.Claim(ctx, c.cli, "counter", token)
}

// ClaimWaits is false: a claim outruns a write in flight.
func (c *etcdCounter) ClaimWaits() bool { return false }
