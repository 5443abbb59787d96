package simba_test

import (
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/zktest"
)

// zkGroupTTL is the session timeout the ZooKeeper group scenarios ask for:
// the test server grants it as asked (between 400ms and 4s). Renewals
// every 333ms, margin 100ms.
const zkGroupTTL = time.Second

// TestZKGroups runs the group scenarios (group_backends_test.go) on a real
// ZooKeeper server (the one scripts/with-zookeeper.sh starts; see
// internal/zktest), shared by the scenarios: each has a root of its own,
// and each node reaches the server through a fault proxy of its own
// (internal/faultproxy).
func TestZKGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("real time on a real ZooKeeper server: skipped with -short")
	}
	addr := zktest.Addr(t) // skip (or fail under SIMBA_REQUIRE_SERVERS=1) without a server
	runGroupScenarios(t, groupBackend{ttl: zkGroupTTL, cluster: func(t *testing.T) groupCluster {
		// Root's clean-up, registered first, runs after the nodes' have
		// closed them, and finds nothing left but directories and records.
		root := zktest.Root(t, addr)
		return groupCluster{node: func(t *testing.T, name string) (backend.Backend, groupLink) {
			t.Helper()
			px := newProxyLink(t, addr)
			b, err := zookeeper.New([]string{px.Addr()}, zookeeper.WithRoot(root))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() }) // always nil
			return b, px
		}}
	}})
}
