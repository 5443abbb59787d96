package simba_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/assign"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/scenario"
)

const billing = "billing"

// member is one client in a group test.
type member struct {
	name   string
	client *simba.Client
	node   *memory.Node
	task   *simba.GroupTask
}

// joinGroup starts a client on node name that runs every partition it is
// assigned of a group with the given count, recording terms in h.
func joinGroup(t *testing.T, b *memory.Backend, name string, h *history, partitions int, gopts []simba.GroupOption, opts ...simba.Option) *member {
	t.Helper()
	c, n := node(t, b, name, h, append([]simba.Option{simba.WithMemberID(name)}, opts...)...)
	task, err := c.Group(billing, partitions, gopts...).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
		require.Equal(t, fmt.Sprintf("%s.%d", billing, p), term.Name())
		return holdUntilRevoked(name, h)(ctx, term)
	})
	require.NoError(t, err)
	return &member{name: name, client: c, node: n, task: task}
}

// nodeOf returns the memory node of a session ID ("<node>-<n>").
func nodeOf(session string) string { return session[:strings.LastIndex(session, "-")] }

// holders maps each partition to the node holding its lease ("" if none).
func holders(b *memory.Backend, partitions int) []string {
	out := make([]string, partitions)
	for p := range out {
		if s, _, ok := b.Holder(fmt.Sprintf("%s.%d", billing, p)); ok {
			out[p] = nodeOf(s)
		}
	}
	return out
}

func TestGroupSpreadsPartitionsAndMovesOnlyTheMinimalSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		const P = 16
		a := joinGroup(t, b, "a", h, P, nil)
		c := joinGroup(t, b, "c", h, P, nil)
		time.Sleep(time.Second)
		want := assign.Owners(billing, []string{"a", "c"}, P, assign.Rendezvous)
		assert.Equal(t, want, holders(b, P))
		assert.Equal(t, scenario.Indexes(want, "a"), a.task.Partitions())

		// A join moves exactly the partitions the new member gains.
		before := holders(b, P)
		grants := len(b.History())
		d := joinGroup(t, b, "d", h, P, nil)
		time.Sleep(time.Second)
		after := holders(b, P)
		assert.Equal(t, assign.Owners(billing, []string{"a", "c", "d"}, P, assign.Rendezvous), after)
		moved := 0
		for p := range after {
			if before[p] != after[p] {
				moved++
				assert.Equal(t, "d", after[p], "partition %d moved between old members", p)
			}
		}
		assert.Equal(t, len(scenario.Indexes(after, "d")), moved)
		assert.Equal(t, moved, len(b.History())-grants, "one new term per moved partition, no churn")
		assert.Equal(t, scenario.Indexes(after, "d"), d.task.Partitions())

		// A graceful leave moves exactly the partitions the member had.
		before = after
		c.task.Stop()
		await.For(t, c.task.Done(), testTTL, "c's group Stop did not complete within the TTL")
		time.Sleep(time.Second)
		after = holders(b, P)
		assert.Equal(t, assign.Owners(billing, []string{"a", "d"}, P, assign.Rendezvous), after)
		for p := range after {
			if before[p] != after[p] {
				assert.Equal(t, "c", before[p], "partition %d moved away from a remaining member", p)
			}
		}
		views := eventsOf[simba.ViewChanged](h)
		require.NotEmpty(t, views)
		closeAll(t, a.client, c.client, d.client)
		h.CheckTerms(t, b)
	})
}

func TestGroupCrashedMemberLosesItsPartitionsAfterTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		const P = 12
		ms := []*member{joinGroup(t, b, "a", h, P, nil), joinGroup(t, b, "b", h, P, nil), joinGroup(t, b, "c", h, P, nil)}
		time.Sleep(time.Second)
		ms[1].node.Crash()
		crashed := time.Now()
		closed := await.Returned(ms[1].client.Close) // its releases fail until its deadline
		require.Eventually(t, func() bool {
			return !slices.Contains(holders(b, P), "b") && !slices.Contains(holders(b, P), "")
		}, 2*testTTL, 10*time.Millisecond, "a and c did not take b's partitions over within twice the TTL of its crash")
		assert.LessOrEqual(t, time.Since(crashed), testTTL+time.Second)
		await.For(t, closed, testTTL, "Close of crashed b did not return within the TTL of its crash")
		assert.Equal(t, assign.Owners(billing, []string{"a", "c"}, P, assign.Rendezvous), holders(b, P))
		closeAll(t, ms[0].client, ms[1].client, ms[2].client)
		h.CheckTerms(t, b)
	})
}

func TestGroupBalancedVariantCapsLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		const P = 16
		var ms []*member
		for _, n := range []string{"a", "b", "c"} {
			ms = append(ms, joinGroup(t, b, n, h, P, []simba.GroupOption{simba.WithAssignment(simba.AssignBalanced)}))
		}
		time.Sleep(time.Second)
		owners := holders(b, P)
		for _, m := range ms {
			assert.LessOrEqual(t, len(scenario.Indexes(owners, m.name)), 6)
		}
		assert.Empty(t, eventsOf[simba.GroupMismatch](h))
		for _, m := range ms {
			closeAll(t, m.client)
		}
		h.CheckTerms(t, b)
	})
}

func TestGroupDuplicateMemberIDIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		const P = 8
		x := joinGroup(t, b, "x", h, P, nil)
		c, _ := node(t, b, "x2", h, simba.WithMemberID("x")) // same id, another session
		_, err := c.Group(billing, P).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
			return holdUntilRevoked("x2", h)(ctx, term)
		})
		require.NoError(t, err)
		time.Sleep(time.Second)
		mis := eventsOf[simba.GroupMismatch](h)
		require.NotEmpty(t, mis)
		assert.Contains(t, mis[0].Detail, "used by 2 live sessions")
		assert.NotContains(t, holders(b, P), "", "every partition held by one of the two")
		closeAll(t, x.client, c)
		h.CheckTerms(t, b)
	})
}

func TestGroupMismatchedCountsAreReportedAndNoPartitionStaysVacant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a := joinGroup(t, b, "a", h, 16, nil)
		z := joinGroup(t, b, "z", h, 8, nil) // misconfigured
		time.Sleep(time.Second)
		mis := eventsOf[simba.GroupMismatch](h)
		require.Len(t, mis, 2, "each side reports the other once")
		assert.Contains(t, mis[0].Detail, "partitions")

		// Partitions 8..15 that a's view gives to z are vacant: z never
		// contends for them. After the grace (2×TTL), a stands in.
		time.Sleep(2*testTTL + time.Second)
		owners := holders(b, 16)
		assert.NotContains(t, owners, "", "no partition stays vacant")
		closeAll(t, a.client, z.client)
		h.CheckTerms(t, b)
	})
}

// TestGroupSlowOwnerKeepsItsPartitions: an owner that takes longer than
// the grace to start its partitions (here a hand-off limit of one every 5 s
// the others do not know of; at scale, a backlog of thousands of
// acquisitions) publishes the view it acts on, so nobody stands in for it:
// no partition changes hands twice.
func TestGroupSlowOwnerKeepsItsPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		const P = 16
		a := joinGroup(t, b, "a", h, P, nil)
		time.Sleep(time.Second)
		require.Len(t, a.task.Partitions(), P)
		slow := joinGroup(t, b, "slow", h, P, []simba.GroupOption{simba.WithHandOffLimit(0.2, 1)})
		want := assign.Owners(billing, []string{"a", "slow"}, P, assign.Rendezvous)
		moving := len(scenario.Indexes(want, "slow"))
		require.Greater(t, moving, 3)
		time.Sleep(time.Duration(moving)*5*time.Second + time.Second) // well past the grace (6 s)
		assert.Equal(t, want, holders(b, P))
		assert.Len(t, b.History(), P+moving, "each moving partition granted once more, to its owner")
		closeAll(t, a.client, slow.client)
		h.CheckTerms(t, b)
	})
}

// TestGroupStandInHandsBackWhenTheOwnerSharesTheView: a stands in for the
// partitions a misconfigured z never takes; z is restarted well configured
// under the same member id (so the view of member ids never changes), and
// a hands the partitions back as soon as z's record shows it acts on the
// same view.
func TestGroupStandInHandsBackWhenTheOwnerSharesTheView(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		const P = 16
		a := joinGroup(t, b, "a", h, P, nil)
		z := joinGroup(t, b, "z", h, 8, nil) // misconfigured
		time.Sleep(3*2*testTTL + time.Second)
		want := assign.Owners(billing, []string{"a", "z"}, P, assign.Rendezvous)
		owners := holders(b, P)
		standIns := 0
		for p := 8; p < P; p++ {
			if want[p] == "z" {
				assert.Equal(t, "a", owners[p], "partition %d: a stands in", p)
				standIns++
			}
		}
		require.Positive(t, standIns)

		z2 := joinGroup(t, b, "z2", h, P, nil, simba.WithMemberID("z"))
		closeAll(t, z.client)
		time.Sleep(time.Second)
		got := holders(b, P)
		for p := range got {
			if got[p] == "z2" {
				got[p] = "z"
			}
		}
		assert.Equal(t, want, got, "z's partitions are back with z")
		closeAll(t, a.client, z2.client)
		h.CheckTerms(t, b)
	})
}

func TestGroupDivergingVariantsNeverGiveTwoHolders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		const P = 32
		ms := []*member{
			joinGroup(t, b, "a", h, P, nil),
			joinGroup(t, b, "b", h, P, []simba.GroupOption{simba.WithAssignment(simba.AssignBalanced)}),
			joinGroup(t, b, "c", h, P, nil),
		}
		time.Sleep(3*2*testTTL + time.Second)
		assert.NotContains(t, holders(b, P), "", "the vacancy net fills every gap")
		for _, m := range ms {
			closeAll(t, m.client)
		}
		h.CheckTerms(t, b)
	})
}

func TestGroupStopWaitsForEarlierHandOffs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		const P = 8
		// a's partitions ignore cancellation for a while.
		ca, _ := node(t, b, "a", h, simba.WithMemberID("a"))
		ta, err := ca.Group(billing, P).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
			h.SawTerm("a", term)
			<-ctx.Done()
			time.Sleep(time.Minute)
			return nil
		})
		require.NoError(t, err)
		time.Sleep(time.Second)
		require.Len(t, ta.Partitions(), P)

		// b joins: a hands some partitions off, slowly (until the cap).
		joined := time.Now()
		bm := joinGroup(t, b, "b", h, P, nil)
		time.Sleep(100 * time.Millisecond)
		require.NotEqual(t, P, len(ta.Partitions()))
		ta.Stop()
		for _, term := range h.Terms() {
			if h.Owner(term) == "a" {
				await.For(t, h.HandedOff(term), 2*testTTL, "a's %v not handed off within twice the TTL of the group's Stop", term)
			}
		}
		// Completion waited for the hand-offs still going at the Stop: up to
		// the capped deadline (≤ TTL - margin after the join).
		assert.GreaterOrEqual(t, time.Since(joined), time.Second)
		assert.LessOrEqual(t, time.Since(joined), testTTL)
		for _, term := range h.Terms() {
			if h.Owner(term) == "a" {
				assert.False(t, term.Valid())
			}
		}
		time.Sleep(time.Second)
		assert.NotContains(t, holders(b, P), "a")
		closeAll(t, ca, bm.client)
		h.CheckTerms(t, b)
	})
}

func TestGroupRefusesBadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		c, err := simba.New(b)
		require.NoError(t, err)
		defer c.Close()
		fn := func(context.Context, *simba.Term, int) error { return nil }
		_, err = c.Group("g", 0).RunWhileLeader(fn)
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
		_, err = c.Group("g", -3).Schedule(simba.FixedDelay(time.Second), fn)
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
		_, err = c.Group(".g", 4).RunWhileLeader(fn)
		assert.ErrorIs(t, err, backend.ErrInvalidName)
		_, err = c.Group(strings.Repeat("g", 125), 100).RunWhileLeader(fn) // "ggg….99" is 128: fine
		assert.NoError(t, err)
		_, err = c.Group(strings.Repeat("h", 125), 1000).RunWhileLeader(fn) // "hhh….999" is 129
		assert.ErrorIs(t, err, backend.ErrInvalidName)
		_, err = c.Group("g", 4).RunWhileLeader(nil)
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
		_, err = c.Group("g", 4).Schedule(simba.FixedDelay(0), fn)
		assert.ErrorIs(t, err, simba.ErrInvalidSchedule)
		_, err = c.Group("g", 4, simba.WithAssignment(7)).RunWhileLeader(fn)
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
		_, err = c.Group("g", 4, simba.WithVacancyGrace(0)).RunWhileLeader(fn)
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
		_, err = c.Group("g", 4, nil).RunWhileLeader(fn)
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
		_, err = c.Group("g", 4).RunWhileLeader(fn, nil)
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
		task, err := c.Group("g", 4).RunWhileLeader(fn)
		require.NoError(t, err)
		_, err = c.Group("g", 4).RunWhileLeader(fn)
		assert.ErrorIs(t, err, simba.ErrAlreadyStarted)
		require.NoError(t, task.Close())
		_, err = simba.New(b, simba.WithMemberID(""))
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
	})
}

func TestGroupSchedulePerPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		runs := make(chan int, 64)
		task, err := c.Group(billing, 4).Schedule(simba.FixedRate(time.Second), func(ctx context.Context, term *simba.Term, p int) error {
			runs <- p
			return nil
		})
		require.NoError(t, err)
		time.Sleep(2500 * time.Millisecond)
		require.NoError(t, task.Close())
		close(runs)
		count := map[int]int{}
		for p := range runs {
			count[p]++
		}
		assert.Equal(t, map[int]int{0: 3, 1: 3, 2: 3, 3: 3}, count)
		var parts []int
		for _, w := range eventsOf[simba.WorkCompleted](h) {
			assert.Equal(t, billing, w.Group)
			parts = append(parts, w.Partition)
		}
		assert.Len(t, parts, 12)
		closeAll(t, c)
	})
}

func TestGroupHandOffLimitSpreadsARebalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		const P = 64
		limit := []simba.GroupOption{simba.WithHandOffLimit(10, 5)}
		x := joinGroup(t, b, "x", h, P, limit)
		time.Sleep(10 * time.Second) // x takes all 64, 10 a second after a burst of 5
		require.Len(t, x.task.Partitions(), P)
		starts := map[time.Time]bool{}
		for _, term := range h.Terms() {
			starts[term.Start()] = true
		}
		assert.LessOrEqual(t, len(starts), P/5+2, "the limited partitions start in batches of the burst, not one per token")
		require.NotContains(t, holders(b, P), "")
		y := joinGroup(t, b, "y", h, P, limit)
		want := assign.Owners(billing, []string{"x", "y"}, P, assign.Rendezvous)
		moving := len(scenario.Indexes(want, "y"))
		time.Sleep(time.Second)
		moved := len(scenario.Indexes(holders(b, P), "y"))
		assert.Less(t, moved, moving, "a second after the join, the limit holds the rebalance back")
		assert.LessOrEqual(t, moved, 5+10, "at most a burst and a second's worth")
		time.Sleep(time.Duration(moving/10+2) * time.Second)
		assert.Equal(t, want, holders(b, P), "the rebalance completes")
		closeAll(t, x.client, y.client)
		h.CheckTerms(t, b)
		_, err := (&simba.Client{}).Group("g", 1, simba.WithHandOffLimit(0, 1)).RunWhileLeader(func(context.Context, *simba.Term, int) error { return nil })
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
	})
}

// TestGroupHandOffLimitIsPerGroupTask starts two groups with one shared
// option value: each has its own limit, so that together they start twice
// what one does.
func TestGroupHandOffLimitIsPerGroupTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "x", h, simba.WithMemberID("x"))
		limit := simba.WithHandOffLimit(10, 5)
		groups := []string{"a", "b"}
		for _, name := range groups {
			_, err := c.Group(name, 64, limit).RunWhileLeader(func(ctx context.Context, term *simba.Term, _ int) error {
				<-ctx.Done()
				return nil
			})
			require.NoError(t, err)
		}
		time.Sleep(time.Second + 100*time.Millisecond)
		for _, name := range groups {
			n := 0
			for p := range 64 {
				if _, _, ok := b.Holder(fmt.Sprintf("%s.%d", name, p)); ok {
					n++
				}
			}
			assert.GreaterOrEqual(t, n, 5+10-1, "group %s: a burst and a second's worth of its own", name)
			assert.LessOrEqual(t, n, 5+11)
		}
		closeAll(t, c)
	})
}

// TestGroupInitialRebalanceDelay: members started together into a cold
// group wait before contending, and each partition is granted once, to its
// owner; a member joining the running group later is not delayed.
func TestGroupInitialRebalanceDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		const P = 32
		delay := []simba.GroupOption{simba.WithInitialRebalanceDelay(time.Second)}
		start := time.Now()
		var ms []*member
		for _, name := range []string{"a", "b", "c"} {
			ms = append(ms, joinGroup(t, b, name, h, P, delay))
			time.Sleep(100 * time.Millisecond)
		}
		synctest.Wait()
		assert.Empty(t, b.History(), "nobody contends during the delay")
		time.Sleep(time.Second)
		want := assign.Owners(billing, []string{"a", "b", "c"}, P, assign.Rendezvous)
		assert.Equal(t, want, holders(b, P))
		assert.Len(t, b.History(), P, "each partition granted once, to its owner")
		for _, g := range b.History() {
			assert.GreaterOrEqual(t, g.Start.Sub(start), time.Second)
		}

		// The group runs: a member joining now contends at once.
		joined := time.Now()
		d := joinGroup(t, b, "d", h, P, delay)
		time.Sleep(100 * time.Millisecond)
		want = assign.Owners(billing, []string{"a", "b", "c", "d"}, P, assign.Rendezvous)
		assert.Equal(t, want, holders(b, P), "moved within %v of the join", time.Since(joined))
		closeAll(t, ms[0].client, ms[1].client, ms[2].client, d.client)
		h.CheckTerms(t, b)

		c, err := simba.New(b)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Group("g", 4, simba.WithInitialRebalanceDelay(-time.Second)).RunWhileLeader(func(context.Context, *simba.Term, int) error { return nil })
		assert.ErrorIs(t, err, simba.ErrInvalidArgument)
	})
}
