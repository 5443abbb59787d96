package zookeeper_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/plant"
	"github.com/simba-go/simba/internal/zktest"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	plant.ForRun()
	goleak.VerifyTestMain(m)
}

// newBackend returns a backend on the shared server under a root of the
// test's own, closed when the test ends; the root is checked for leftovers
// after that.
func newBackend(t testing.TB, opts ...zookeeper.Option) *zookeeper.Backend {
	t.Helper()
	addr := zktest.Addr(t)
	root := zktest.Root(t, addr)
	return newBackendAt(t, addr, root, opts...)
}

// newBackendAt returns a backend on addr under root, closed when the test
// ends.
func newBackendAt(t testing.TB, addr, root string, opts ...zookeeper.Option) *zookeeper.Backend {
	t.Helper()
	b, err := zookeeper.New([]string{addr}, append([]zookeeper.Option{zookeeper.WithRoot(root)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
