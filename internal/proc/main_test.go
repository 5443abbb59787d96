package proc

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// roleEnv names the role in which this test binary was started by a test,
// if any: "parent" is a simba run stand-in (see parentRole).
const roleEnv = "SIMBA_PROC_TEST_ROLE"

// TestMain runs the shim when this binary was started as one, a helper
// role when a test started it in one, and otherwise the tests, checking for
// leaked goroutines after them.
func TestMain(m *testing.M) {
	ShimMain()
	if _, ok := os.LookupEnv("GORACE"); !ok {
		// For the shims (this binary): with -race, no second's sleep at
		// exit.
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	if os.Getenv(roleEnv) == "parent" {
		os.Exit(parentRole())
	}
	goleak.VerifyTestMain(m)
}

// parentRole starts the script in $SIMBA_PROC_TEST_SCRIPT through Start,
// with its output on this process's, prints "shim PID", and waits for the
// test to kill it.
func parentRole() int {
	c, err := Start(Spec{Argv: []string{"sh", "-c", os.Getenv("SIMBA_PROC_TEST_SCRIPT")},
		Env: os.Environ(), Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "parent role:", err)
		return 2
	}
	fmt.Printf("shim %d\n", c.Pid())
	<-c.Done()
	fmt.Fprintln(os.Stderr, "parent role: the child ended by itself:", c.Exit())
	return 3
}
