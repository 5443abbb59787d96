package core_test

import (
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/scenario"
	"github.com/simba-go/simba/internal/zktest"
)

// zkGroupTTL is the session timeout the ZooKeeper group scenarios ask for:
// the test server grants it as asked (between 400ms and 4s). Renewals
// every 333ms, margin 100ms.
const zkGroupTTL = time.Second

// TestZKGroups runs the group scenarios (internal/scenario) on a real
// ZooKeeper server (the one scripts/with-zookeeper.sh starts; see
// internal/zktest), shared by the scenarios: each has a root of its own,
// and each node reaches the server through a fault proxy of its own
// (internal/faultproxy).
func TestZKGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("real time on a real ZooKeeper server: skipped with -short")
	}
	addr := zktest.Addr(t) // skip (or fail under SIMBA_REQUIRE_SERVERS=1) without a server
	scenario.RunGroupScenarios(t, scenario.GroupBackend{TTL: zkGroupTTL, Cluster: func(t *testing.T) scenario.GroupCluster {
		// Root's clean-up, registered first, runs after the nodes' have
		// closed them, and finds nothing left but directories and records.
		root := zktest.Root(t, addr)
		return scenario.GroupCluster{Node: func(t *testing.T, name string) (backend.Backend, scenario.GroupLink) {
			t.Helper()
			px := scenario.NewProxyLink(t, addr)
			b, err := zookeeper.New([]string{px.Addr()}, zookeeper.WithRoot(root))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() }) // always nil
			return b, px
		}}
	}})
}
