package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/plant"
	"github.com/simba-go/simba/internal/proc"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests. When
// $SIMBA_E2E_CHILD names a child role, the binary is a child of simba run in
// an end-to-end test instead, and plays that role (runChildRole).
func TestMain(m *testing.M) {
	proc.ShimMain() // simba run's children start under a copy of this binary
	if role := os.Getenv(runChildRoleEnv); role != "" {
		os.Exit(runChildRole(role, os.Args[1:]))
	}
	plant.ForRun()
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		removeBuilt() // the binaries the end-to-end tests share
		os.Exit(code)
	}))
}
