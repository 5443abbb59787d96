package simba_test

import (
	"context"
	"fmt"
	"github.com/simba-go/simba/internal/assign"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/scenario"
)

// runLog records scheduled runs: node, token, time.
type runLog struct {
	mu   sync.Mutex
	runs []logged
}

type logged struct {
	node  string
	token uint64
	at    time.Time
}

func (l *runLog) scheduled(node string, h *history) func(context.Context, *simba.Term) error {
	return func(ctx context.Context, term *simba.Term) error {
		h.SawTerm(node, term)
		l.mu.Lock()
		l.runs = append(l.runs, logged{node, term.Token(), time.Now()})
		l.mu.Unlock()
		return nil
	}
}

func (l *runLog) since(t time.Time) []logged {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logged
	for _, r := range l.runs {
		if !r.at.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

func openAdmin(t *testing.T, b *memory.Backend) *admin.Admin {
	t.Helper()
	a, err := admin.Open(t.Context(), b.Node("admin"))
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return a
}

func TestStatusAndHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		log := &runLog{}
		c, _ := node(t, b, "a", h, simba.WithMemberID("a"))
		_, err := c.Election("report").Schedule(simba.FixedRate(time.Second), log.scheduled("a", h))
		require.NoError(t, err)
		time.Sleep(60*time.Second + 500*time.Millisecond)
		a := openAdmin(t, b)
		st, err := a.Status(t.Context(), "report")
		require.NoError(t, err)
		require.NotNil(t, st.Holder)
		assert.Equal(t, "a", st.Holder.Member)
		assert.Equal(t, h.Terms()[0].Token(), st.Holder.Token)
		assert.Equal(t, uint64(61), st.Succeeded)
		assert.Equal(t, "fixed rate 1s", st.Schedule)
		assert.WithinDuration(t, h.Terms()[0].Start().Add(61*time.Second), st.NextPlanned, 0)
		runs, err := a.History(t.Context(), "report")
		require.NoError(t, err)
		require.Len(t, runs, 50, "bounded history")
		for i, run := range runs {
			assert.Equal(t, uint64(12+i), run.Seq, "the last 50 runs, oldest first")
		}
		assert.Equal(t, "succeeded", runs[len(runs)-1].Result)
		elections, err := a.Elections(t.Context())
		require.NoError(t, err)
		require.Len(t, elections, 1)
		assert.True(t, elections[0].Held)

		closeAll(t, c)
		st, err = a.Status(t.Context(), "report")
		require.NoError(t, err)
		assert.Nil(t, st.Holder, "a clean hand-off clears the holder")
	})
}

func TestFailOverIsRecordedAndInterruptedRunsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		log := &runLog{}
		ca, na := node(t, b, "a", h, simba.WithMemberID("a"))
		slow := func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			time.Sleep(time.Hour) // in flight when its node crashes
			return nil
		}
		_, err := ca.Election("report").Schedule(simba.FixedDelay(time.Second), slow)
		require.NoError(t, err)
		synctest.Wait()
		cz, _ := node(t, b, "z", h, simba.WithMemberID("z"))
		_, err = cz.Election("report").Schedule(simba.FixedDelay(time.Second), log.scheduled("z", h))
		require.NoError(t, err)
		time.Sleep(time.Second)
		na.Crash()
		closed := await.Returned(ca.Close) // once the run of an hour ends
		time.Sleep(2 * testTTL)
		a := openAdmin(t, b)
		runs, err := a.History(t.Context(), "report")
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(runs), 2)
		assert.Equal(t, "interrupted", runs[0].Result, "the crashed holder's run")
		assert.Equal(t, "a", runs[0].Member)
		assert.Equal(t, "fail-over", runs[1].Source)
		assert.Equal(t, "z", runs[1].Member)
		assert.Equal(t, "normal", runs[2].Source)
		closeAll(t, cz)
		await.For(t, closed, time.Hour, "Close of crashed a did not return when its run of an hour ended")
		synctest.Wait()
	})
}

func TestMisfireAcrossFailOver(t *testing.T) {
	for _, policy := range []simba.MisfirePolicy{simba.MisfireSkip, simba.MisfireRunOnce} {
		t.Run(policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				h := newHistory()
				log := &runLog{}
				s := simba.FixedRate(time.Minute).WithInitialDelay(30 * time.Second).WithMisfire(policy)
				ca, na := node(t, b, "a", h, simba.WithMemberID("a"))
				_, err := ca.Election("report").Schedule(s, log.scheduled("a", h))
				require.NoError(t, err)
				time.Sleep(40 * time.Second) // ran at 30s; next planned at 90s
				na.Crash()
				closed := await.Returned(ca.Close) // its releases fail until its deadline

				time.Sleep(55 * time.Second) // 95s: the start at 90s passed with no holder
				cz, _ := node(t, b, "z", h, simba.WithMemberID("z"))
				start := time.Now()
				_, err = cz.Election("report").Schedule(s, log.scheduled("z", h))
				require.NoError(t, err)
				time.Sleep(40 * time.Second)
				runs := log.since(start)
				if policy == simba.MisfireRunOnce {
					require.Len(t, runs, 2, "once at once, then after the initial delay")
					assert.Equal(t, start, runs[0].at)
					a := openAdmin(t, b)
					hist, err := a.History(t.Context(), "report")
					require.NoError(t, err)
					assert.Equal(t, "misfire", hist[1].Source)
				} else {
					require.Len(t, runs, 1, "skipped: only the run after the initial delay")
					assert.Equal(t, start.Add(30*time.Second), runs[0].at)
				}
				closeAll(t, cz)
				await.For(t, closed, time.Second, "Close of crashed a did not return within the TTL of its crash, 95s ago")
				synctest.Wait()
			})
		})
	}
}

func TestDisableStopsRunsEverywhereUntilEnabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		log := &runLog{}
		var cs []*simba.Client
		for _, n := range []string{"a", "b"} {
			c, _ := node(t, b, n, h, simba.WithMemberID(n))
			_, err := c.Election("report").Schedule(simba.FixedRate(time.Second), log.scheduled(n, h))
			require.NoError(t, err)
			cs = append(cs, c)
		}
		time.Sleep(3500 * time.Millisecond)
		a := openAdmin(t, b)
		require.NoError(t, a.Disable(t.Context(), "report", "maintenance"))
		synctest.Wait()
		disabledAt := time.Now()
		time.Sleep(10 * time.Second)
		assert.Empty(t, log.since(disabledAt), "nothing runs anywhere while disabled")
		_, _, held := b.Holder("report")
		assert.False(t, held, "the holder handed off")
		rev := eventsOf[simba.Revoked](h)
		assert.Equal(t, simba.RevokeDisabled, rev[len(rev)-1].Reason)

		require.NoError(t, a.Enable(t.Context(), "report", ""))
		synctest.Wait()
		enabledAt := time.Now()
		time.Sleep(3 * time.Second)
		assert.NotEmpty(t, log.since(enabledAt))
		closeAll(t, cs...)
		h.CheckTerms(t, b)
	})
}

func TestTriggerRunsOnceAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		log := &runLog{}
		c, _ := node(t, b, "a", h)
		_, err := c.Election("report").Schedule(simba.FixedRate(time.Hour), log.scheduled("a", h))
		require.NoError(t, err)
		time.Sleep(time.Minute)
		a := openAdmin(t, b)
		at := time.Now()
		require.NoError(t, a.Trigger(t.Context(), "report", ""))
		time.Sleep(time.Minute)
		runs := log.since(at)
		require.Len(t, runs, 1)
		assert.Equal(t, at, runs[0].at, "as soon as the holder sees it")
		ops, err := a.Ops(t.Context())
		require.NoError(t, err)
		assert.Empty(t, ops.Triggers, "the request is consumed")
		hist, err := a.History(t.Context(), "report")
		require.NoError(t, err)
		assert.Equal(t, "trigger", hist[len(hist)-1].Source)
		closeAll(t, c)
	})
}

func TestResignMovesTheTermToAnotherMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		ca, _ := node(t, b, "a", h, simba.WithMemberID("a"))
		_, err := ca.Election("ingest").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait()
		cz, _ := node(t, b, "z", h, simba.WithMemberID("z"))
		_, err = cz.Election("ingest").RunWhileLeader(holdUntilRevoked("z", h))
		require.NoError(t, err)
		time.Sleep(time.Second)
		a := openAdmin(t, b)
		require.NoError(t, a.Resign(t.Context(), "ingest", h.Terms()[0].Token(), ""))
		synctest.Wait()
		terms := h.Terms()
		require.Len(t, terms, 2)
		assert.Equal(t, "z", h.Owner(terms[1]))
		assert.Greater(t, terms[1].Token(), terms[0].Token())
		ops, err := a.Ops(t.Context())
		require.NoError(t, err)
		assert.Empty(t, ops.Resigns, "the request is consumed")
		time.Sleep(time.Minute)
		assert.Len(t, h.Terms(), 2, "the resigned member does not take it back")
		closeAll(t, ca, cz)
		h.CheckTerms(t, b)
	})
}

func TestDrainEmptiesAMemberUntilUndrained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		const P = 8
		x := joinGroup(t, b, "x", h, P, nil)
		y := joinGroup(t, b, "y", h, P, nil)
		_, err := x.client.Election("solo").RunWhileLeader(holdUntilRevoked("x", h))
		require.NoError(t, err)
		time.Sleep(time.Second)
		require.NotEmpty(t, x.task.Partitions())
		a := openAdmin(t, b)
		drainedAt := time.Now()
		require.NoError(t, a.Drain(t.Context(), "x", "kernel upgrade"))
		time.Sleep(time.Second)
		assert.Empty(t, x.task.Partitions())
		// Every term the drain ended says so, whichever of the group's
		// loop and the term's own check saw the drain first.
		for _, r := range eventsOf[simba.Revoked](h) {
			if !r.At.Before(drainedAt) {
				assert.Equal(t, simba.RevokeDrained, r.Reason, "term %d of %s", r.Token, r.Election)
			}
		}
		assert.Equal(t, slices.Repeat([]string{"y"}, P), holders(b, P), "y holds every partition")
		_, _, held := b.Holder("solo")
		assert.False(t, held, "x's elections are handed off too")
		g, err := a.Group(t.Context(), billing)
		require.NoError(t, err)
		assert.Len(t, g.Members, 1)

		require.NoError(t, a.Undrain(t.Context(), "x", ""))
		time.Sleep(time.Second)
		assert.Equal(t, assign.Owners(billing, []string{"x", "y"}, P, assign.Rendezvous), holders(b, P))
		_, _, held = b.Holder("solo")
		assert.True(t, held)
		g, err = a.Group(t.Context(), billing)
		require.NoError(t, err)
		assert.Len(t, g.Members, 2)
		for _, p := range g.Partitions {
			assert.Equal(t, p.Owner, p.Holder, "partition %d", p.Index)
			assert.False(t, p.InHandOff())
		}
		closeAll(t, x.client, y.client)
		h.CheckTerms(t, b)
	})
}

// flakyClient starts a client, member name, on node name of b, whose
// sessions fail the first reads and writes of status and history records
// (as requests queued behind thousands of others time out).
func flakyClient(t *testing.T, b *memory.Backend, name string, reads, writes int32) *simba.Client {
	t.Helper()
	fails, writesLeft := &atomic.Int32{}, &atomic.Int32{}
	fails.Store(reads)
	writesLeft.Store(writes)
	f := wrapSessions{b.Node(name), func(s backend.Session) backend.Session {
		return flakySession{Session: s, Records: s.(backend.Records), fails: fails, writes: writesLeft}
	}}
	c, err := simba.New(f, simba.WithTTL(testTTL), simba.WithMemberID(name), simba.WithLogger(scenario.Logger(t, name)))
	require.NoError(t, err)
	return c
}

type flakySession struct {
	backend.Session
	backend.Records
	fails, writes *atomic.Int32
}

func (s flakySession) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	if strings.HasPrefix(key, "status/") && s.fails.Add(-1) >= 0 {
		return backend.Record{}, fmt.Errorf("get record %q: %w", key, context.DeadlineExceeded)
	}
	return s.Records.GetRecord(ctx, key)
}

func (s flakySession) PutRecord(ctx context.Context, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	if (strings.HasPrefix(key, "status/") || strings.HasPrefix(key, "history/")) && s.writes.Add(-1) >= 0 {
		return backend.Record{}, fmt.Errorf("put record %q: %w", key, context.DeadlineExceeded)
	}
	return s.Records.PutRecord(ctx, key, value, cond)
}

// TestStatusReadIsRetried: a new holder that cannot read the previous
// status at once retries, and carries the counts and the history on; one
// that never can writes no status rather than replace the record with a
// fresh one.
func TestStatusReadIsRetried(t *testing.T) {
	for _, fails := range []int32{3, 1 << 30} {
		t.Run(fmt.Sprint(fails), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				h := newHistory()
				log := &runLog{}
				ca, _ := node(t, b, "a", h, simba.WithMemberID("a"))
				_, err := ca.Election("report").Schedule(simba.FixedRate(time.Second), log.scheduled("a", h))
				require.NoError(t, err)
				time.Sleep(9*time.Second + 500*time.Millisecond) // 10 runs
				closeAll(t, ca)

				cz := flakyClient(t, b, "z", fails, 0)
				_, err = cz.Election("report").Schedule(simba.FixedRate(time.Second), log.scheduled("z", h))
				require.NoError(t, err)
				time.Sleep(20 * time.Second)
				a := openAdmin(t, b)
				st, err := a.Status(t.Context(), "report")
				require.NoError(t, err)
				runs, err := a.History(t.Context(), "report")
				require.NoError(t, err)
				if fails == 3 {
					require.NotNil(t, st.Holder)
					assert.Equal(t, "z", st.Holder.Member)
					assert.Greater(t, st.Succeeded, uint64(10+15), "a's 10 runs and z's")
					assert.Equal(t, uint64(1), runs[0].Seq, "the history goes on from a's runs")
					assert.Equal(t, "a", runs[0].Member)
					assert.Equal(t, "z", runs[len(runs)-1].Member)
				} else {
					assert.Nil(t, st.Holder, "a's hand-off, untouched")
					assert.Equal(t, uint64(10), st.Succeeded)
					assert.Len(t, runs, 10)
					assert.NotEmpty(t, log.since(time.Now().Add(-time.Second)), "z runs all the same")
				}
				closeAll(t, cz)
			})
		})
	}
}

// TestStatusWriteIsRetried: status and history writes that fail are tried
// again, and every run reaches the history; writes that always fail are
// given up after a few tries, and the term goes on.
func TestStatusWriteIsRetried(t *testing.T) {
	for _, fails := range []int32{4, 1 << 30} {
		t.Run(fmt.Sprint(fails), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				h := newHistory()
				log := &runLog{}
				c := flakyClient(t, b, "a", 0, fails)
				_, err := c.Election("report").Schedule(simba.FixedRate(time.Minute), log.scheduled("a", h))
				require.NoError(t, err)
				time.Sleep(90 * time.Second) // runs at 0 and 60 s
				a := openAdmin(t, b)
				st, err := a.Status(t.Context(), "report")
				runs, herr := a.History(t.Context(), "report")
				if fails == 4 {
					require.NoError(t, err)
					require.NoError(t, herr)
					assert.Equal(t, uint64(2), st.Succeeded)
					require.Len(t, runs, 2, "both runs in the history")
					assert.Equal(t, uint64(1), runs[0].Seq)
				} else {
					assert.Len(t, log.since(time.Time{}), 2, "the term runs on")
					assert.Empty(t, runs)
				}
				closeAll(t, c)
			})
		})
	}
}

// staleOpsSession is a session whose watch of the operations never fires
// (a watch that has not caught up yet) and whose reads of them fail while
// fails is positive.
type staleOpsSession struct {
	backend.Session
	backend.Records
	fails *atomic.Int32
}

func (s staleOpsSession) WatchRecords(ctx context.Context, prefix string) (<-chan struct{}, error) {
	if prefix != "ops/" {
		return s.Records.WatchRecords(ctx, prefix)
	}
	ch := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ch) })
	return ch, nil
}

func (s staleOpsSession) ListRecords(ctx context.Context, prefix string) ([]backend.Record, error) {
	if prefix == "ops/" && s.fails.Add(-1) >= 0 {
		return nil, fmt.Errorf("list records %q: %w", prefix, context.DeadlineExceeded)
	}
	return s.Records.ListRecords(ctx, prefix)
}

// TestDisableFoundAtTermStart: a disable recorded before a node wins the
// lease stops the term before its first run, even when the node's watch
// of the operations has not delivered it and its first reads of them
// fail: no run starts anywhere after the disable is recorded and the
// holder has seen it. Both shapes: a leader task and a schedule.
func TestDisableFoundAtTermStart(t *testing.T) {
	for _, shape := range []string{"RunWhileLeader", "Schedule"} {
		for _, fails := range []int32{0, 3} {
			t.Run(fmt.Sprintf("%s/%d_failed_reads", shape, fails), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := memory.New()
					defer b.Close()
					h := newHistory()
					log := &runLog{}
					start := func(c *simba.Client, name string) {
						var err error
						if shape == "Schedule" {
							_, err = c.Election("report").Schedule(simba.FixedRate(time.Second), log.scheduled(name, h))
						} else {
							run := log.scheduled(name, h)
							_, err = c.Election("report").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
								run(ctx, term)
								<-ctx.Done()
								return nil
							})
						}
						require.NoError(t, err)
					}
					ca, _ := node(t, b, "a", h, simba.WithMemberID("a"))
					start(ca, "a")
					time.Sleep(time.Second)
					failing := &atomic.Int32{}
					stale := wrapSessions{b.Node("b"), func(s backend.Session) backend.Session {
						return staleOpsSession{Session: s, Records: s.(backend.Records), fails: failing}
					}}
					cb, err := simba.New(stale, simba.WithTTL(testTTL), simba.WithMemberID("b"), simba.WithEventHandler(h.Event), simba.WithLogger(scenario.Logger(t, "b")))
					require.NoError(t, err)
					start(cb, "b")
					time.Sleep(1500 * time.Millisecond) // between a's runs
					holder, _, held := b.Holder("report")
					require.True(t, held && holder == ca.SessionID(), "a holds report")

					failing.Store(fails)
					a := openAdmin(t, b)
					require.NoError(t, a.Disable(t.Context(), "report", "maintenance"))
					synctest.Wait() // a's watch delivers the disable: it hands off, b wins
					disabledAt := time.Now()
					time.Sleep(2 * testTTL)
					assert.Empty(t, log.since(disabledAt), "runs started after the disable was recorded and seen by its holder")
					won := 0
					for _, e := range eventsOf[simba.Elected](h) {
						if e.Session == cb.SessionID() {
							won++
						}
					}
					assert.Equal(t, 1, won, "b won the lease once after the disable (and gave it up)")
					closeAll(t, ca, cb)
					h.CheckTerms(t, b)
				})
			})
		}
	}
}
