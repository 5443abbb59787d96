package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/tests/internal/etcdclient"
)

// TestMalformedOnEtcdAreProblems plants, beside healthy records, what
// etcdctl put could leave under the prefix: record values too short for the
// backend's token (which used to fail every listing, and so simba status,
// with "has no token") and a member key that is not JSON (which used to
// fail the group). Each is skipped and reported as a problem; the rest is
// read.
func TestMalformedOnEtcdAreProblems(t *testing.T) {
	srv := etcdtest.Start(t)
	const prefix = "/admin-malformed/"
	b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := b.Open(ctx, backend.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for k, v := range map[string]string{
		"status/report":       `{"lease":"report","partition":-1}`,
		"status/billing.0":    `{"lease":"billing.0","group":"billing","partition":0}`,
		"ops/disabled/ingest": `{"by":"alice"}`,
	} {
		if _, err := s.(backend.Records).PutRecord(ctx, k, []byte(v), backend.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Join(ctx, "billing", backend.Member{ID: "a", Data: []byte(`{"p":2,"a":"rendezvous"}`)}); err != nil {
		t.Fatal(err)
	}
	cli := etcdclient.New(t, srv)
	for k, v := range map[string]string{
		"rec/status/nightly":             "garbage",
		"rec/status/billing.1":           "bad",
		"rec/ops/disabled/x":             "",
		"group/billing/ffffffffffffffff": "not json",
	} {
		if _, err := cli.Put(ctx, prefix+k, v); err != nil {
			t.Fatal(err)
		}
	}

	a, err := admin.Open(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	snap, err := a.Snapshot(ctx)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	wantKeys(t, "Snapshot problems", snap.Problems, "group/billing/ffffffffffffffff", "ops/disabled/x", "status/billing.1", "status/nightly")
	for _, p := range snap.Problems {
		if !strings.Contains(p.Reason, "the backend cannot read it as a record: ") && !strings.Contains(p.Reason, "the backend cannot read it as a group member: ") {
			t.Errorf("problem %v: want it to say the backend cannot read it", p)
		}
	}
	if n := len(snap.Problems); n == 0 || !strings.Contains(snap.Problems[n-1].Reason, `"garbage" of 7 bytes`) {
		t.Errorf("problems %v: want the last to quote the value and its length", snap.Problems)
	}
	var names []string
	for _, e := range snap.Elections {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "billing.0,report" {
		t.Errorf("elections %v, want billing.0 and report", names)
	}
	if !snap.Ops.Disabled["ingest"] || snap.Ops.Disabled["x"] {
		t.Errorf("disabled %v, want ingest and not x", snap.Ops.Disabled)
	}
	wantKeys(t, "Ops problems", snap.Ops.Problems, "ops/disabled/x")
	if len(snap.Groups) != 1 || len(snap.Groups[0].Members) != 1 || snap.Groups[0].Members[0].ID != "a" || len(snap.Groups[0].Partitions) != 2 {
		t.Fatalf("groups %+v, want billing with member a and 2 partitions", snap.Groups)
	}
	wantKeys(t, "group problems", snap.Groups[0].Problems, "group/billing/ffffffffffffffff", "status/billing.1")

	g, err := a.Group(ctx, "billing")
	if err != nil {
		t.Fatalf("Group: %v", err)
	}
	wantKeys(t, "Group problems", g.Problems, "group/billing/ffffffffffffffff", "status/billing.1")

	_, err = a.Status(ctx, "nightly")
	var re *admin.RecordError
	if !errors.As(err, &re) || re.Problem.Key != "status/nightly" {
		t.Errorf("Status of a malformed record: error %v, want a *admin.RecordError of status/nightly", err)
	}
	if _, err := a.Status(ctx, "report"); err != nil {
		t.Errorf("Status(report): %v", err)
	}
}

// wantKeys checks that problems name exactly keys, in order.
func wantKeys(t *testing.T, what string, problems []admin.Problem, keys ...string) {
	t.Helper()
	got := make([]string, len(problems))
	for i, p := range problems {
		got[i] = p.Key
	}
	if strings.Join(got, "\n") != strings.Join(keys, "\n") {
		t.Errorf("%s: keys %q, want %q", what, got, keys)
	}
}
