package simba_test

import (
	"context"
	"fmt"
	"github.com/simba-go/simba/internal/assign"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// queueOf returns a function listing the nodes whose sessions have a
// candidacy for a lease, oldest first (backend.CandidateLister), read
// through a session of its own on node "probe".
func queueOf(t *testing.T, b *memory.Backend) func(name string) []string {
	t.Helper()
	s, err := b.Node("probe").Open(t.Context(), backend.SessionOptions{TTL: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(context.Background()) })
	return func(name string) []string {
		ids, err := s.(backend.CandidateLister).Candidates(t.Context(), name)
		require.NoError(t, err)
		nodes := []string{}
		for _, id := range ids {
			nodes = append(nodes, nodeOf(id))
		}
		return nodes
	}
}

// TestCandidaciesLeaveTheQueue: every way the core stops contending for a
// lease withdraws its candidacy from the lease's queue, so that none is
// left in front of the contenders that remain (see docs/ARCHITECTURE.md,
// "Queued candidacy"): a waiting task stopped, a waiting member drained,
// an election disabled, a holder that yields (it queues again behind the
// waiter, which holds), and a group whose view moves partitions to a new
// member and back.
func TestCandidaciesLeaveTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		queue := queueOf(t, b)
		ctx := t.Context()
		cx, _ := node(t, b, "x", h, simba.WithMemberID("x"))
		cy, _ := node(t, b, "y", h, simba.WithMemberID("y"))
		_, err := cx.Election("e").RunWhileLeader(holdUntilRevoked("x", h))
		require.NoError(t, err)
		time.Sleep(time.Second)
		wait := func() *simba.LeaderTask {
			ty, err := cy.Election("e").RunWhileLeader(holdUntilRevoked("y", h))
			require.NoError(t, err)
			time.Sleep(time.Second)
			require.Equal(t, []string{"x", "y"}, queue("e"), "y waits behind x")
			return ty
		}

		ty := wait()
		require.NoError(t, ty.Close())
		time.Sleep(time.Second)
		assert.Equal(t, []string{"x"}, queue("e"), "a stopped waiter left the queue")

		ty = wait()
		a := openAdmin(t, b)
		require.NoError(t, a.Drain(ctx, "y", "test"))
		time.Sleep(time.Second)
		assert.Equal(t, []string{"x"}, queue("e"), "a drained waiter left the queue")
		require.NoError(t, a.Undrain(ctx, "y", "test"))
		time.Sleep(time.Second)
		assert.Equal(t, []string{"x", "y"}, queue("e"), "undrained, y queues again")

		require.NoError(t, a.Disable(ctx, "e", "test"))
		time.Sleep(time.Second)
		assert.Empty(t, queue("e"), "a disabled election has no candidacy left")
		require.NoError(t, a.Enable(ctx, "e", "test"))
		time.Sleep(time.Second)
		assert.Len(t, queue("e"), 2, "enabled, both contend again")
		require.NoError(t, ty.Close())

		// A holder that yields releases; the waiter holds; the yielder
		// sits out one TTL and queues behind it.
		yields := 0
		tz, err := cx.Election("f").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("x", term)
			if yields == 0 {
				yields++
				time.Sleep(time.Second) // y is queued by then
				return simba.ErrYield
			}
			<-ctx.Done()
			return nil
		})
		require.NoError(t, err)
		time.Sleep(100 * time.Millisecond)
		tw, err := cy.Election("f").RunWhileLeader(holdUntilRevoked("y", h))
		require.NoError(t, err)
		time.Sleep(2 * time.Second)
		assert.Equal(t, []string{"y"}, queue("f"), "the waiter holds after the yield; the yielder sits out")
		time.Sleep(testTTL)
		assert.Equal(t, []string{"y", "x"}, queue("f"), "the yielder queues again, behind the holder")
		require.NoError(t, tw.Close())
		require.NoError(t, tz.Close())

		// A group: y joins and takes its share from x, then is drained
		// and gives it back; each time every partition ends with one
		// candidacy, its holder's.
		const P = 8
		gx := joinGroup(t, b, "gx", h, P, nil)
		time.Sleep(time.Second)
		gy := joinGroup(t, b, "gy", h, P, nil)
		check := func(when string) {
			t.Helper()
			for p := range P {
				name := fmt.Sprintf("%s.%d", billing, p)
				assert.Len(t, queue(name), 1, "%s: partition %d's queue: %v", when, p, queue(name))
			}
		}
		time.Sleep(2 * time.Second)
		check("after gy joined")
		assert.Equal(t, assign.Owners(billing, []string{"gx", "gy"}, P, assign.Rendezvous), holders(b, P))
		require.NoError(t, a.Drain(ctx, "gy", "test"))
		time.Sleep(2 * time.Second)
		check("after gy was drained")
		closeAll(t, gx.client, gy.client, cx, cy)
		h.CheckTerms(t, b)
	})
}
