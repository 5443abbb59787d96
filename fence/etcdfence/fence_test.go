package etcdfence_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/fence/etcdfence"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/fencetest"
)

// etcdClient starts an etcd server for the test and returns a client of
// it, closed when the test ends.
func etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	srv := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestEtcdGuard(t *testing.T) {
	cli := etcdClient(t)
	ctx := fencetest.Ctx(t)
	f := etcdfence.Fence{Prefix: "/test/fence/"}
	// put writes value to /data/cursor in a transaction fenced with token,
	// with the caller's own compare that holds while own is true.
	put := func(token uint64, value string, own bool) (*clientv3.TxnResponse, error) {
		cmps, ops := f.Guard("ingest", token)
		mine := clientv3.Compare(clientv3.Version("/data/lock"), "=", 0)
		if !own {
			mine = clientv3.Compare(clientv3.Version("/data/lock"), ">", 0)
		}
		return cli.Txn(ctx).
			If(append(cmps, mine)...).
			Then(append(ops, clientv3.OpPut("/data/cursor", value))...).
			Commit()
	}
	value := func() string {
		resp, err := cli.Get(ctx, "/data/cursor")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	for i, s := range []struct {
		token uint64
		value string
		own   bool // the caller's own compare holds
		ok    bool
	}{
		{5, "a", true, true},
		{5, "b", true, true},
		{4, "c", true, false},
		{6, "d", false, false}, // the caller's compare fails: not stale
		{6, "e", true, true},
		{5, "f", false, false}, // both fail: stale
	} {
		resp, err := put(s.token, s.value, s.own)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Succeeded != s.ok {
			t.Fatalf("step %d: token %d succeeded=%v, want %v", i, s.token, resp.Succeeded, s.ok)
		}
		stale := f.Stale(ctx, cli, "ingest", s.token)
		if wantStale := s.token < 5 || (s.token == 5 && i >= 4); (stale != nil) != wantStale {
			t.Errorf("step %d: Stale(%d) = %v, want stale=%v", i, s.token, stale, wantStale)
		}
		if stale != nil && !errors.Is(stale, fence.ErrStale) {
			t.Errorf("step %d: Stale(%d) = %v, not ErrStale", i, s.token, stale)
		}
	}
	if v := value(); v != "e" {
		t.Errorf("value %q, want e", v)
	}
	// One key per resource, holding the highest token.
	resp, err := cli.Get(ctx, "/test/fence/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != "/test/fence/ingest/00000000000000000006" || string(resp.Kvs[0].Value) != "6" {
		t.Errorf("token keys %v, want only /test/fence/ingest/00000000000000000006", resp.Kvs)
	}
}

func TestEtcdCommit(t *testing.T) {
	cli := etcdClient(t)
	ctx := fencetest.Ctx(t)
	f := etcdfence.Fence{}
	if _, ok, err := f.Highest(ctx, cli, "r"); err != nil || ok {
		t.Fatalf("Highest before any write: %v, %v", ok, err)
	}
	for i, s := range []struct {
		token   uint64
		stale   bool
		highest uint64
	}{
		{10, false, 10},
		{10, false, 10},
		{9, true, 10},
		{math.MaxUint64 - 1, false, math.MaxUint64 - 1},
		{math.MaxUint64, false, math.MaxUint64},
		{math.MaxUint64 - 1, true, math.MaxUint64},
		{0, true, math.MaxUint64},
	} {
		resp, err := f.Commit(ctx, cli, "r", s.token, clientv3.OpPut("/data/r", "x"), clientv3.OpGet("/data/r"))
		if s.stale {
			var se *fence.StaleError
			if !errors.As(err, &se) || se.Highest != s.highest || se.Token != s.token || se.Resource != "r" {
				t.Fatalf("step %d: Commit(%d) = %v, want stale below %d", i, s.token, err, s.highest)
			}
			if resp == nil || resp.Succeeded {
				t.Errorf("step %d: response %v", i, resp)
			}
		} else if err != nil || !resp.Succeeded || len(resp.Responses) != 4 {
			t.Fatalf("step %d: Commit(%d) = %v, %v", i, s.token, resp, err)
		}
		if got, ok, err := f.Highest(ctx, cli, "r"); err != nil || !ok || got != s.highest {
			t.Errorf("step %d: Highest = %d, %v, %v", i, got, ok, err)
		}
	}
	if got, _ := cli.Get(ctx, etcdfence.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); got.Count != 1 {
		t.Errorf("%d token keys, want 1", got.Count)
	}
}

// TestEtcdResourceNames checks that resources whose names nest or share
// prefixes do not see each other's tokens.
func TestEtcdResourceNames(t *testing.T) {
	cli := etcdClient(t)
	ctx := fencetest.Ctx(t)
	f := etcdfence.Fence{Prefix: "/f/"}
	names := []string{"a", "a/b", "a/", "a%2Fb", "a0", "", "ü", "a\x00"}
	for i, n := range names {
		if _, err := f.Commit(ctx, cli, n, uint64(100-i)); err != nil {
			t.Fatalf("resource %q: %v", n, err)
		}
	}
	for i, n := range names {
		if got, ok, err := f.Highest(ctx, cli, n); err != nil || !ok || got != uint64(100-i) {
			t.Errorf("resource %q: Highest = %d, %v, %v; want %d", n, got, ok, err, 100-i)
		}
		if err := f.Stale(ctx, cli, n, uint64(100-i)); err != nil {
			t.Errorf("resource %q: Stale(own token) = %v", n, err)
		}
	}
}

func TestEtcdInvalid(t *testing.T) {
	ctx := fencetest.Ctx(t)
	f := etcdfence.Fence{}
	if _, err := f.Commit(ctx, nil, "r", 1); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Errorf("Commit with nil KV: %v", err)
	}
	if err := f.Stale(ctx, nil, "r", 1); !errors.Is(err, fence.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "simba/fence: ") {
		t.Errorf("Stale with nil KV: %v", err)
	}
}

// TestEtcdForeignKey: a key in a resource's directory that is not a token
// key (its suffix not 20 digits) is reported, never read as a token. (Kills
// the mutant of parse that takes any number as a token: !found && ….)
func TestEtcdForeignKey(t *testing.T) {
	cli := etcdClient(t)
	ctx := fencetest.Ctx(t)
	f := etcdfence.Fence{Prefix: "/f/"}
	if _, err := f.Commit(ctx, cli, "r", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/f/r/9", "by hand"); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := f.Highest(ctx, cli, "r"); err == nil || !strings.Contains(err.Error(), "not a token key") {
		t.Fatalf("Highest with /f/r/9 in the directory: %d, %v, %v; want an error: not a token key", got, ok, err)
	}
}
