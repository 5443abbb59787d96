package admin_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/tests/internal/etcdclient"
)

// authPrefix is the key prefix of the read-only user's test.
const authPrefix = "/simba-auth/"

// securedEtcd enables authentication on srv with a root user, a user "rw"
// whose role may read and write authPrefix's range, and a user "ro" whose
// role may only read it, and returns a client of each, closed at the end.
func securedEtcd(t *testing.T, ctx context.Context, srv *etcdtest.Server) (root, rw, ro *clientv3.Client) {
	t.Helper()
	cli := etcdclient.New(t, srv)
	end := clientv3.GetPrefixRangeEnd(authPrefix)
	steps := []struct {
		what string
		do   func() error
	}{
		{"add user root", func() error { _, err := cli.UserAdd(ctx, "root", "root-pw"); return err }},
		{"add role root", func() error { _, err := cli.RoleAdd(ctx, "root"); return err }},
		{"grant root to root", func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err }},
		{"add role simba-rw", func() error { _, err := cli.RoleAdd(ctx, "simba-rw"); return err }},
		{"let simba-rw read and write the prefix", func() error {
			_, err := cli.RoleGrantPermission(ctx, "simba-rw", authPrefix, end, clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"add role simba-ro", func() error { _, err := cli.RoleAdd(ctx, "simba-ro"); return err }},
		{"let simba-ro read the prefix", func() error {
			_, err := cli.RoleGrantPermission(ctx, "simba-ro", authPrefix, end, clientv3.PermissionType(clientv3.PermRead))
			return err
		}},
		{"add user rw", func() error { _, err := cli.UserAdd(ctx, "rw", "rw-pw"); return err }},
		{"grant simba-rw to rw", func() error { _, err := cli.UserGrantRole(ctx, "rw", "simba-rw"); return err }},
		{"add user ro", func() error { _, err := cli.UserAdd(ctx, "ro", "ro-pw"); return err }},
		{"grant simba-ro to ro", func() error { _, err := cli.UserGrantRole(ctx, "ro", "simba-ro"); return err }},
		{"enable authentication", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("securing etcd: %s: %v", s.what, err)
		}
	}
	client := func(user, password string) *clientv3.Client {
		cfg := etcdclient.Config(srv)
		cfg.Username, cfg.Password = user, password
		c, err := clientv3.New(cfg)
		if err != nil {
			t.Fatalf("client of user %s: %v", user, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	return client("root", "root-pw"), client("rw", "rw-pw"), client("ro", "ro-pw")
}

// storeState is what shows a write on etcd: the store's revision and the
// leases granted.
func storeState(t *testing.T, ctx context.Context, root *clientv3.Client) string {
	t.Helper()
	get, err := root.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("reading the revision: %v", err)
	}
	leases, err := root.Leases(ctx)
	if err != nil {
		t.Fatalf("listing the leases: %v", err)
	}
	ids := make([]string, len(leases.Leases))
	for i, l := range leases.Leases {
		ids[i] = fmt.Sprintf("%x", int64(l.ID))
	}
	slices.Sort(ids)
	return fmt.Sprintf("revision %d, leases %v", get.Header.Revision, ids)
}

// TestReadOnlyEtcdUser: with a user whose role can only read the prefix,
// an admin.Admin opens and reads everything while nodes of a read-write user
// run on the same server, without moving the store's revision or granting
// a lease; an operation fails, naming the permission problem, and writes
// nothing.
func TestReadOnlyEtcdUser(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	root, rw, ro := securedEtcd(t, ctx, srv)

	nb, err := etcd.NewFromClient(rw, etcd.WithPrefix(authPrefix))
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	c, err := simba.New(nb, simba.WithTTL(2*time.Second), simba.WithMemberID("n1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ran := make(chan struct{}, 1)
	if _, err := c.Election("report").Schedule(simba.FixedRate(100*time.Millisecond), func(ctx context.Context, term *simba.Term) error {
		select {
		case ran <- struct{}{}:
		default:
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Group("billing", 2).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
		<-ctx.Done()
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	rb, err := etcd.NewFromClient(ro, etcd.WithPrefix(authPrefix))
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	a, err := admin.Open(ctx, rb, admin.WithOperator("reader@test"))
	if err != nil {
		t.Fatalf("Open with the read-only user: %v", err)
	}
	defer a.Close()

	// Wait for the nodes to show: the election's runs, both partitions held.
	deadline := time.Now().Add(60 * time.Second)
	for {
		snap, err := a.Snapshot(ctx)
		if err != nil {
			t.Fatalf("Snapshot with the read-only user: %v", err)
		}
		runs, _ := a.History(ctx, "report")
		held := 0
		for _, e := range snap.Elections {
			if e.Held {
				held++
			}
		}
		if len(runs) >= 2 && held == 3 && len(snap.Groups) == 1 && len(snap.Groups[0].Members) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 60s the read-only user did not see the nodes' work: %d runs, %d leases held, groups %+v", len(runs), held, snap.Groups)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Stop the nodes' writes, so that the store's state stands still.
	if err := c.Close(); err != nil {
		t.Fatalf("Close of the node: %v", err)
	}
	before := storeState(t, ctx, root)
	if _, err := a.Snapshot(ctx); err != nil {
		t.Errorf("Snapshot: %v", err)
	}
	if _, err := a.Groups(ctx); err != nil {
		t.Errorf("Groups: %v", err)
	}
	if _, err := a.Elections(ctx); err != nil {
		t.Errorf("Elections: %v", err)
	}
	if runs, err := a.History(ctx, "report"); err != nil || len(runs) < 2 {
		t.Errorf("History: %d runs, %v", len(runs), err)
	}
	if _, err := a.Ops(ctx); err != nil {
		t.Errorf("Ops: %v", err)
	}
	if _, _, err := a.Audit(ctx, admin.AuditFilter{}); err != nil {
		t.Errorf("Audit: %v", err)
	}
	if after := storeState(t, ctx, root); after != before {
		t.Errorf("the read-only user's reads wrote:\nbefore %s\nafter  %s", before, after)
	}

	err = a.Disable(ctx, "report", "not allowed")
	if err == nil {
		t.Fatal("Disable by the read-only user: no error")
	}
	if !strings.Contains(err.Error(), "permission denied") || !strings.HasPrefix(err.Error(), `simba/admin: disable "report": `) {
		t.Errorf("Disable by the read-only user: error %q, want one naming the operation and the permission denied", err)
	}
	if after := storeState(t, ctx, root); after != before {
		t.Errorf("the read-only user's refused operation wrote:\nbefore %s\nafter  %s", before, after)
	}
	t.Logf("the read-only user's Disable: %v", err)

	// The read-write user's admin operates, and the trail says who.
	wb, err := etcd.NewFromClient(rw, etcd.WithPrefix(authPrefix))
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	w, err := admin.Open(ctx, wb, admin.WithOperator("writer@test"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Disable(ctx, "report", "maintenance"); err != nil {
		t.Fatalf("Disable by the read-write user: %v", err)
	}
	entries, _, err := a.Audit(ctx, admin.AuditFilter{Name: "report"})
	if err != nil || len(entries) != 1 || entries[0].By != "writer@test" || !entries[0].Changed {
		t.Errorf("the read-only user's Audit: %+v, %v; want writer@test's disable", entries, err)
	}
	if op := mustOps(t, ctx, a).Disables["report"]; op.By != "writer@test" || op.Reason != "maintenance" {
		t.Errorf("Ops.Disables[report] = %+v", op)
	}
}

func mustOps(t *testing.T, ctx context.Context, a *admin.Admin) admin.Ops {
	t.Helper()
	ops, err := a.Ops(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}
