package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/plant"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	plant.ForRun()
	goleak.VerifyTestMain(m)
}

func TestNodeRunsAndHandsOff(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd server and a node for two seconds")
	}
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var out strings.Builder
	args := []string{"-etcd", strings.Join(srv.Endpoints(), ","), "-member", "a", "-ttl", "1s", "-report", "500ms", "-partitions", "2", "-v"}
	if code := runMain(ctx, args, &out, &out); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		"a: running ingest, report (every 500ms) and billing (2 partitions, every 1s) on etcd at ",
		"a: took ingest with token ",
		"a: took report with token ",
		"a: report runs with token ",
		"a: took billing.0 with token ",
		"a: billing partition 1 runs with token ",
		"a: handed off report (token ",
		"a: stopped",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-frob"}, 2, "flag provided but not defined"},
		{[]string{"extra"}, 2, `unexpected arguments ["extra"]`},
		{[]string{"-etcd", "", "-zk", ""}, 1, "no backend"},
		{[]string{"-etcd", "a:1", "-zk", "b:2"}, 1, "give -etcd or -zk, not both"},
	} {
		var out strings.Builder
		if code := runMain(t.Context(), tc.args, &out, &out); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%q: exit %d, output %q; want %d, %q", tc.args, code, out.String(), tc.code, tc.want)
		}
	}
}
