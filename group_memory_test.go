package simba_test

import (
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/scenario"
)

// memoryGroupTTL is the session TTL of the memory group scenarios, granted
// as asked. Renewals every 667ms, margin 200ms.
const memoryGroupTTL = 2 * time.Second

// TestMemoryGroups runs the group scenarios (internal/scenario) on the
// memory backend in real time, a server of its own per scenario: each node
// is a memory.Node, its link the node's own (Node.Partition, Node.Heal),
// and the server's grants are checked too (check.AgainstGrants). The same
// scenarios in virtual time, with timings, are in group_test.go; on etcd,
// PostgreSQL and ZooKeeper, in tests/core.
func TestMemoryGroups(t *testing.T) {
	scenario.RunGroupScenarios(t, scenario.GroupBackend{TTL: memoryGroupTTL, Cluster: func(t *testing.T) scenario.GroupCluster {
		b := memory.New()
		t.Cleanup(func() { b.Close() }) // always nil
		return scenario.GroupCluster{
			Node: func(t *testing.T, name string) (backend.Backend, scenario.GroupLink) {
				n := b.Node(name)
				t.Cleanup(func() { n.Close() }) // always nil
				return n, memoryLink{n}
			},
			Grants: func() []check.Grant { return memoryGrants(b) },
		}
	}})
}

// memoryLink is a memory node's link to its server.
type memoryLink struct{ n *memory.Node }

func (l memoryLink) Cut()  { l.n.Partition() }
func (l memoryLink) Heal() { l.n.Heal() }

// memoryGrants returns b's record of grants, for check.AgainstGrants.
func memoryGrants(b *memory.Backend) []check.Grant {
	return check.MemoryGrants(b.History())
}
