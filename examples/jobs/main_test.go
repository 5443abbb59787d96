package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/plant"
	"github.com/simba-go/simba/jobs"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	plant.ForRun()
	goleak.VerifyTestMain(m)
}

// unsetEnv unsets the environment variable name for the test.
func unsetEnv(t *testing.T, name string) {
	t.Setenv(name, "") // restores the variable after the test
	os.Unsetenv(name)
}

func TestJobsRunAndHandOffOnShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of real time")
	}
	unsetEnv(t, jobs.EnabledEnv)
	cfg, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, &out, cfg); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		"job billing: 4 partitions spread over the nodes, labelled 0=Beijing 1=Shanghai 2=Guangzhou 3=Shenzhen",
		"alpha: jobs started",
		"alpha: report runs with token",
		"(Beijing) runs with token",
		"(Shenzhen) runs with token",
		"bravo: jobs started",
		"bravo: billing partition",
		"shutting down (time is up)",
		"alpha: Run returned; leases alpha holds now: 0; closing the client",
		"bravo: Run returned; leases bravo holds now: 0; closing the client",
		"runs of one job on two nodes at once: 0",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestJobsDisabledByTheEnvironment(t *testing.T) {
	t.Setenv(jobs.EnabledEnv, "false")
	var out, errs bytes.Buffer
	if code := runMain([]string{"-for", "300ms"}, &out, &errs); code != 0 {
		t.Fatalf("exit status %d: %s", code, errs.String())
	}
	for _, want := range []string{"alpha: scheduling disabled; no job started (by=environment SIMBA_SCHEDULING_ENABLED=false)", "done: 0 runs"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestJobsRefusesBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("scheduled:\n  - {name: report, fixedDelay: 1m, fixedRate: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-for", "soon"}, 2, "invalid value"},
		{[]string{"-config", filepath.Join(t.TempDir(), "missing.yaml")}, 1, "no such file"},
		{[]string{"-config", bad}, 1, bad + `:2: scheduled job "report": fixedDelay/fixedRate`},
	} {
		var out, errs bytes.Buffer
		if code := runMain(tc.args, &out, &errs); code != tc.code || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("%v: exit status %d, stderr %q; want %d and %q", tc.args, code, errs.String(), tc.code, tc.want)
		}
	}
}
