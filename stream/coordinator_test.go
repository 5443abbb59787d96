package stream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/stream"
)

// savedBy returns the checkpoints accepted from token, in order.
func savedBy(evs []ev, token uint64) []int64 {
	var out []int64
	for _, e := range evs {
		if e.Kind == kSaved && e.Err == nil && e.Token == token {
			out = append(out, e.Offset)
		}
	}
	return out
}

// TestCoordinatorCommit: a handler asks for a checkpoint at offset 4, with a
// commit interval of an hour. With concurrency 1 the checkpoint (5, covering
// the message that asked) is written before the next message's Process
// call; with 4 calls at once, once the calls in flight have returned. No
// other checkpoint is written before the hand-off.
func TestCoordinatorCommit(t *testing.T) {
	for _, n := range []int{1, 4} {
		t.Run(fmt.Sprintf("concurrency %d", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				rec := &recorder{}
				const M = 10
				behave := func(ctx context.Context, term *simba.Term, msg stream.Message) error {
					if err := work(10*time.Millisecond)(ctx, term, msg); err != nil {
						return err
					}
					switch {
					case msg.Offset == 4:
						stream.CoordinatorFrom(ctx).RequestCommit()
					case msg.Offset == 5 && n == 1:
						if got := savedBy(rec.Events(), term.Token()); len(got) != 1 || got[0] != 5 {
							t.Errorf("checkpoints before offset 5 was processed: %v, want [5]", got)
						}
					}
					return nil
				}
				a := startNode(t, b, "a", 1, newNumbered(M, M), rec, handlers(rec, "a", behave),
					stream.WithMaxConcurrency(n), stream.WithCommitInterval(time.Hour))
				waitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(1, M) })
				time.Sleep(time.Second)
				evs := rec.Events()
				tokens := termsOf(evs, 0)
				if len(tokens) != 1 {
					t.Fatalf("terms %v, want 1", tokens)
				}
				if got := savedBy(evs, tokens[0]); len(got) != 1 || got[0] < 5 {
					t.Errorf("checkpoints before the hand-off %v, want one at 5 or later", got)
				}
				a.stop()
				evs = rec.Events()
				if got := lastSaved(evs, tokens[0]); got != M {
					t.Errorf("final checkpoint %d, want %d", got, M)
				}
				if fails := a.failures(); len(fails) != 0 {
					t.Errorf("partition failures %v", fails)
				}
				checkAll(t, evs, b, n, 1, M)
				checkInitClose(t, evs)
			})
		})
	}
}

// TestCoordinatorHandOff: a handler asks for its partition to be handed off
// at offset 7. No Process call of that term starts after it; the term's
// final checkpoint covers offset 7; the run is published as a succeeded
// yield, not a failure; the partition is taken again after one lease term
// and resumes at offset 8.
func TestCoordinatorHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		const M, at = 20, 7
		var asked once
		behave := func(ctx context.Context, term *simba.Term, msg stream.Message) error {
			if msg.Offset == at && asked.first(nil) {
				stream.CoordinatorFrom(ctx).RequestHandOff()
				if ctx.Err() != nil {
					t.Errorf("the call that asked for a hand-off had its ctx ended: %v", ctx.Err())
				}
			}
			return work(10*time.Millisecond)(ctx, term, msg)
		}
		a := startNode(t, b, "a", 1, newNumbered(M, M), rec, handlers(rec, "a", behave),
			stream.WithCommitInterval(time.Hour))
		waitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(1, M) })
		a.stop()
		evs := rec.Events()
		tokens := termsOf(evs, 0)
		if len(tokens) != 2 {
			t.Fatalf("terms %v, want 2", tokens)
		}
		var last, first int64 = -1, -1
		for _, e := range evs {
			switch {
			case e.Kind == kStart && e.Token == tokens[0]:
				last = max(last, e.Offset)
			case e.Kind == kStart && e.Token == tokens[1] && first < 0:
				first = e.Offset
			}
		}
		if last != at {
			t.Errorf("the term that asked for a hand-off processed up to offset %d, want %d", last, at)
		}
		if got := lastSaved(evs, tokens[0]); got != at+1 {
			t.Errorf("its final checkpoint %d, want %d", got, at+1)
		}
		if first != at+1 {
			t.Errorf("the next term began at offset %d, want %d", first, at+1)
		}
		if fails := a.failures(); len(fails) != 0 {
			t.Errorf("partition failures %v, want none", fails)
		}
		a.mu.Lock()
		var yielded []simba.WorkCompleted
		for _, e := range a.events {
			if w, ok := e.(simba.WorkCompleted); ok && w.Token == tokens[0] {
				yielded = append(yielded, w)
			}
		}
		a.mu.Unlock()
		if len(yielded) != 1 || yielded[0].Result != simba.ResultSucceeded || !errors.Is(yielded[0].Err, simba.ErrYield) {
			t.Errorf("the first term's runs %+v, want one succeeded yield", yielded)
		}
		checkAll(t, evs, b, 1, 1, M)
		checkInitClose(t, evs)
	})
}

// TestCoordinatorOutsideACall: a ctx that is not a handler call's has no
// Coordinator, and a nil Coordinator's requests do nothing.
func TestCoordinatorOutsideACall(t *testing.T) {
	c := stream.CoordinatorFrom(context.Background())
	if c != nil {
		t.Fatalf("CoordinatorFrom(Background) = %v, want nil", c)
	}
	c.RequestCommit()
	c.RequestHandOff()
}
