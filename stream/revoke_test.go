package stream_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/stream"
)

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
	}
	return false
}

// lateCalls counts the Process calls that start once their term has ended
// or the stream was stopped, observed at the call's start.
type lateCalls struct {
	stopped atomic.Bool // set just before the test stops the task
	calls   atomic.Int64
	late    atomic.Int64
	first   atomic.Int64 // the offset of the first late call, +1 (0: none)
}

// start records a Process call's start; it reports whether it is late.
func (c *lateCalls) start(term *simba.Term, msg stream.Message) {
	late := closed(term.Revoked()) || c.stopped.Load()
	c.calls.Add(1)
	if late {
		c.late.Add(1)
		c.first.CompareAndSwap(0, msg.Offset+1)
	}
}

// TestNoCallAfterTermEnds: once a partition's term is revoked (here the
// node's session expires) or the stream stops, no Process call starts, not
// for the rest of the current batch nor for the batch fetched ahead, and
// with concurrency 1 not after the call that failed for the ended term.
// On one CPU, where the loop and its callers would otherwise run on through
// the batches before the hand-off is seen.
//
// Each call looks at its start whether Revoked() is closed (or the test has
// stopped the task): a call that sees it closed started after the term
// ended. The handlers ignore ctx, as the handlers that act out of
// order do; the call that ends the term waits until Revoked() is closed and
// then returns its ctx's error (or nil), while calls keep being ready: a
// whole batch of 500 and the next one fetched ahead.
func TestNoCallAfterTermEnds(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const trigger = 100 // the offset whose call ends the term
	for _, tc := range []struct {
		name        string
		concurrency int
		stop        bool // Task.Stop instead of a revocation
		fail        bool // the triggering call returns its ctx's error
	}{
		{"Revoked/Concurrency1", 1, false, false},
		{"Revoked/Concurrency1/CallFails", 1, false, true},
		{"Revoked/Concurrency4", 4, false, false},
		{"Revoked/Concurrency4/CallFails", 4, false, true},
		{"Stopped/Concurrency1", 1, true, false},
		{"Stopped/Concurrency4", 4, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				rec := &recorder{}
				src := newNumbered(100_000, 500)
				var lc lateCalls
				var n *node
				ready := make(chan struct{})
				var triggered atomic.Bool
				h := func(int) stream.Handler {
					return stream.HandlerFunc(func(ctx context.Context, term *simba.Term, msg stream.Message) error {
						lc.start(term, msg)
						if msg.Offset != trigger || !triggered.CompareAndSwap(false, true) {
							return nil // fast, and deaf to ctx
						}
						<-ready
						if tc.stop {
							lc.stopped.Store(true)
							n.task.Stop()
							return nil
						}
						n.conn.Expire()
						select {
						case <-term.Revoked():
						case <-time.After(time.Minute):
							t.Error("the term was not revoked within a minute of its session's expiry")
						}
						if tc.fail {
							<-ctx.Done() // the core cancels it right after Revoked
							return ctx.Err()
						}
						return nil
					})
				}
				n = startNode(t, b, "a", 1, src, rec, h, stream.WithMaxConcurrency(tc.concurrency),
					stream.WithCommitInterval(time.Hour))
				close(ready)
				waitFor(t, time.Minute, "the term ended and the partition handed off", func() bool {
					return triggered.Load() && (tc.stop && closed(n.task.Done()) || !tc.stop && workCompleted(n))
				})
				if lc.calls.Load() <= trigger {
					t.Fatalf("%d Process calls: the triggering call at offset %d never ran", lc.calls.Load(), trigger)
				}
				if late := lc.late.Load(); late != 0 {
					what := "its term was revoked"
					if tc.stop {
						what = "the stream was stopped"
					}
					t.Errorf("%d Process calls started after %s (the first at offset %d), of %d calls",
						late, what, lc.first.Load()-1, lc.calls.Load())
				}
			})
		})
	}
}

// workCompleted reports whether the work of one of the node's terms has
// returned.
func workCompleted(n *node) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range n.events {
		if _, ok := e.(simba.WorkCompleted); ok {
			return true
		}
	}
	return false
}

// handedOff reports whether one of the node's terms has handed off.
func handedOff(n *node) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range n.events {
		if _, ok := e.(simba.HandedOff); ok {
			return true
		}
	}
	return false
}

// TestFinalCheckpointAfterTheCoreEndsTheTerm finds out when the final
// checkpoint of a hand-off the core began is accepted: when the partition
// moves to another member (a graceful move: the client stops the term and
// holds the lease until the hand-off), it is, and the new owner resumes
// from it; when the term is lost (the session expired), it is refused, and
// the next owner resumes from the last periodic checkpoint. stream/doc.go
// says so.
func TestFinalCheckpointAfterTheCoreEndsTheTerm(t *testing.T) {
	t.Run("Moved", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := memory.New()
			defer b.Close()
			rec := &recorder{}
			const P = 4
			src := newNumbered(100_000, 10)
			opts := []stream.Option{stream.WithCommitInterval(time.Hour)}
			a := startNode(t, b, "a", P, src, rec, handlers(rec, "a", work(10*time.Millisecond)), opts...)
			time.Sleep(time.Second)
			c := startNode(t, b, "c", P, src, rec, handlers(rec, "c", work(10*time.Millisecond)), opts...)
			waitFor(t, time.Minute, "a partition moved to c and c processed a message", func() bool {
				return rec.Count(func(e ev) bool { return e.Node == "c" && e.Kind == kEnd && e.Err == nil }) > 0
			})
			a.stop()
			c.stop()
			evs := rec.Events()
			moved := map[int]bool{}
			for _, e := range evs {
				if e.Node == "c" && e.Kind == kLoad {
					moved[e.Partition] = true
				}
			}
			for p := range moved {
				final, ok := finalSave(evs, "a", p)
				if !ok {
					t.Errorf("partition %d moved to c, but a never saved a checkpoint of it", p)
					continue
				}
				if final.Err != nil {
					t.Errorf("partition %d moved: a's final checkpoint @%d was refused: %v", p, final.Offset, final.Err)
				}
				if load, ok := firstLoad(evs, "c", p); !ok || load.Offset != final.Offset {
					t.Errorf("partition %d moved: c resumed from %v, not from a's final checkpoint @%d", p, load, final.Offset)
				}
			}
			if len(moved) == 0 {
				t.Fatal("no partition moved to the new member")
			}
		})
	})
	t.Run("Lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := memory.New()
			defer b.Close()
			rec := &recorder{}
			src := newNumbered(100_000, 10)
			opts := []stream.Option{stream.WithCommitInterval(time.Hour)}
			a := startNode(t, b, "a", 1, src, rec, handlers(rec, "a", work(10*time.Millisecond)), opts...)
			waitFor(t, time.Minute, "a processed a message", func() bool {
				return rec.Count(func(e ev) bool { return e.Node == "a" && e.Kind == kEnd && e.Err == nil }) > 0
			})
			a.conn.Expire()
			waitFor(t, time.Minute, "a's term's work returned", func() bool { return workCompleted(a) })
			final, ok := finalSave(rec.Events(), "a", 0)
			if !ok {
				t.Fatal("a's lost term wrote no final checkpoint")
			}
			if !errors.Is(final.Err, simba.ErrTermExpired) {
				t.Errorf("a's lost term: final checkpoint @%d: got %v, want it refused with ErrTermExpired", final.Offset, final.Err)
			}
		})
	})
}

// finalSave returns the last Save outcome of node for partition p.
func finalSave(evs []ev, node string, p int) (ev, bool) {
	var last ev
	found := false
	for _, e := range evs {
		if e.Kind == kSaved && e.Node == node && e.Partition == p {
			last, found = e, true
		}
	}
	return last, found
}

// firstLoad returns the first checkpoint load of node for partition p.
func firstLoad(evs []ev, node string, p int) (ev, bool) {
	for _, e := range evs {
		if e.Kind == kLoad && e.Node == node && e.Partition == p {
			return e, true
		}
	}
	return ev{}, false
}
