package simba_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
)

// faultRun drives three to five nodes contending for two elections and a
// schedule through seeded random faults — partitions up to 3×TTL, slow
// replies, session expiry, crashes without release, stops and restarts —
// and returns the history and the backend for the checkers.
func faultRun(t *testing.T, seed uint64) (*history, *memory.Backend) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	// Nodes request 3s and are granted 2.5s, as etcd or ZooKeeper may do.
	b := memory.New(memory.WithTTLBounds(0, 2500*time.Millisecond))
	h := newHistory()
	type member struct {
		name   string
		client *simba.Client
		node   *memory.Node
		tasks  map[string]*simba.LeaderTask
		cut    atomic.Bool // partitioned
	}
	var wg sync.WaitGroup
	var members []*member
	nextID := 0
	start := func(m *member, election string) {
		var task *simba.LeaderTask
		var err error
		if election == "report" {
			work := time.Duration(rng.IntN(1500)) * time.Millisecond
			task, err = m.client.Election(election).Schedule(simba.FixedRate(700*time.Millisecond),
				func(ctx context.Context, term *simba.Term) error {
					h.sawTerm(m.name, term)
					time.Sleep(work)
					return nil
				})
		} else {
			task, err = m.client.Election(election).RunWhileLeader(holdUntilRevoked(m.name, h))
		}
		require.NoError(t, err)
		m.tasks[election] = task
	}
	add := func() {
		nextID++
		c, n := node(t, b, fmt.Sprintf("n%d", nextID), h)
		m := &member{name: fmt.Sprintf("n%d", nextID), client: c, node: n, tasks: map[string]*simba.LeaderTask{}}
		for _, e := range []string{"ingest", "export", "report"} {
			start(m, e)
		}
		members = append(members, m)
	}
	for range 3 {
		add()
	}
	ttl := 2500 * time.Millisecond
	for range 40 {
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Millisecond)
		m := members[rng.IntN(len(members))]
		switch rng.IntN(7) {
		case 0: // partition for up to 3×TTL
			m.node.Partition()
			m.cut.Store(true)
			d := time.Duration(rng.Int64N(int64(3 * ttl)))
			wg.Go(func() { time.Sleep(d); m.cut.Store(false); m.node.Heal() })
		case 1: // slow replies for a while
			m.node.SetDelay(time.Duration(rng.IntN(300))*time.Millisecond, time.Duration(rng.IntN(900))*time.Millisecond)
			d := time.Duration(rng.Int64N(int64(3 * ttl)))
			wg.Go(func() { time.Sleep(d); m.node.SetDelay(0, 0) })
		case 2:
			// The server ends the sessions early and tells the node. (Ending
			// them behind a partition is out of the model: no client can
			// know of it before its own deadline, as when an operator
			// deletes an etcd lease.)
			if !m.cut.Load() {
				m.node.Expire()
			}
		case 3: // crash without release; a new node takes its place
			m.node.Crash()
			members = removeMember(members, m)
			wg.Go(func() { m.client.Close() })
			add()
		case 4: // stop and restart one task
			name := []string{"ingest", "export", "report"}[rng.IntN(3)]
			<-m.tasks[name].Stop()
			start(m, name)
		case 5: // graceful leave and a new node
			members = removeMember(members, m)
			m.client.Close()
			add()
		}
	}
	for _, m := range members {
		m.node.Heal()
		m.node.SetDelay(0, 0)
	}
	wg.Wait()
	for _, m := range members {
		m.client.Close()
	}
	b.Close()
	return h, b
}

func removeMember[M comparable](ms []M, m M) []M {
	out := ms[:0:0]
	for _, x := range ms {
		if x != m {
			out = append(out, x)
		}
	}
	return out
}

func TestFaultsNeverGiveTwoValidTerms(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, b := faultRun(t, seed)
				if len(h.Terms()) < 10 {
					t.Errorf("only %d terms: the scenario does not exercise hand-offs", len(h.Terms()))
				}
				h.checkTerms(t, b)
			})
		})
	}
}

// TestPlantedBugsAreCaught plants each known safety bug in turn and requires
// the checkers to catch it within a few seeds: a checker that cannot fail
// proves nothing.
func TestPlantedBugsAreCaught(t *testing.T) {
	for _, bug := range []string{"deadline-from-reply", "no-margin", "requested-ttl"} {
		t.Run(bug, func(t *testing.T) {
			simba.PlantBug(t, bug)
			for seed := range uint64(30) {
				var found []error
				synctest.Test(t, func(t *testing.T) {
					h, b := faultRun(t, seed)
					found = h.violations(b)
				})
				if len(found) > 0 {
					t.Logf("caught at seed %d: %v", seed, found[0])
					return
				}
			}
			t.Fatalf("planted bug %q went unnoticed in 30 seeds", bug)
		})
	}
}
