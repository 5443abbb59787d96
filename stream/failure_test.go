package stream_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/assign"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/stream"
)

// once reports true the first time it is called for a key.
type once struct {
	mu   sync.Mutex
	seen map[any]bool
}

func (o *once) first(key any) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[key] {
		return false
	}
	if o.seen == nil {
		o.seen = map[any]bool{}
	}
	o.seen[key] = true
	return true
}

// termsOf returns the tokens of the terms that processed partition p, in
// order.
func termsOf(evs []ev, p int) []uint64 {
	var out []uint64
	seen := map[uint64]bool{}
	for _, e := range evs {
		if e.Partition == p && e.Kind == kStart && !seen[e.Token] {
			seen[e.Token] = true
			out = append(out, e.Token)
		}
	}
	return out
}

// lastSaved returns the last checkpoint accepted from token, or -1.
func lastSaved(evs []ev, token uint64) int64 {
	off := int64(-1)
	for _, e := range evs {
		if e.Kind == kSaved && e.Err == nil && e.Token == token {
			off = e.Offset
		}
	}
	return off
}

// TestCallTimeoutFailsOnlyItsPartition: a Process call that outlives the
// call timeout fails its partition, which hands off with a checkpoint
// before the message and is retried by its next owner; the node's other
// partitions go on undisturbed. The stuck call either honours its ctx or
// ignores it (then the loop abandons it).
func TestCallTimeoutFailsOnlyItsPartition(t *testing.T) {
	for _, ignoresCtx := range []bool{false, true} {
		name := map[bool]string{false: "honours ctx", true: "ignores ctx"}[ignoresCtx]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				rec := &recorder{}
				const P, M, stuck, at = 4, 150, 2, 40
				release := make(chan struct{})
				var hang once
				behave := func(ctx context.Context, term *simba.Term, msg stream.Message) error {
					if msg.Partition == stuck && msg.Offset == at && hang.first(nil) {
						if ignoresCtx {
							<-release
							return errors.New("released at the end of the test")
						}
						<-ctx.Done()
						return ctx.Err()
					}
					return work(10*time.Millisecond)(ctx, term, msg)
				}
				a := startNode(t, b, "a", P, newNumbered(M, 10), rec, handlers(rec, "a", behave),
					stream.WithCallTimeout(time.Second), stream.WithCommitInterval(200*time.Millisecond))
				waitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(P, M) })
				close(release)
				a.stop()

				evs := rec.Events()
				fails := a.failures()
				if len(fails) != 1 {
					t.Fatalf("%d partition failures, want 1: %v", len(fails), fails)
				}
				f := fails[0]
				if f.Partition != stuck || f.Op != "process" || f.Offset != at ||
					!errors.Is(f, stream.ErrTimeout) || !errors.Is(f, simba.ErrYield) {
					t.Errorf("failure %v: want partition %d, process at %d, matching ErrTimeout and ErrYield", f, stuck, at)
				}
				tokens := termsOf(evs, stuck)
				if len(tokens) != 2 {
					t.Fatalf("partition %d had terms %v, want 2", stuck, tokens)
				}
				if got := lastSaved(evs, tokens[0]); got != at {
					t.Errorf("failed term's last checkpoint %d, want %d", got, at)
				}
				// The other partitions kept their one term and went on.
				var retried time.Time
				for _, e := range evs {
					if e.Token == tokens[1] && e.Kind == kStart {
						retried = e.At
						break
					}
				}
				for p := range P {
					if p == stuck {
						continue
					}
					if ts := termsOf(evs, p); len(ts) != 1 {
						t.Errorf("partition %d had terms %v, want 1", p, ts)
					}
					for _, e := range evs {
						if e.Partition == p && e.Kind == kEnd && e.Offset == M-1 && !e.At.Before(retried) {
							t.Errorf("partition %d finished at %v, not before the stuck one was retried at %v", p, e.At, retried)
						}
					}
				}
				// The abandoned call is outside the loop's accounting: leave
				// it out of the checks.
				var kept []ev
				for _, e := range evs {
					if !(ignoresCtx && e.Token == tokens[0] && e.Offset == at && (e.Kind == kStart || e.Kind == kEnd)) {
						kept = append(kept, e)
					}
				}
				checkAll(t, kept, b, 1, P, M)
			})
		})
	}
}

// TestFailedCallFailsPartition: an error or a panic in Process fails the
// partition; the calls in flight around it finish, the final checkpoint
// stops exactly at the failed message, and the next term resumes there.
func TestFailedCallFailsPartition(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(map[bool]string{false: "error", true: "panic"}[panics], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				rec := &recorder{}
				const P, M, bad, at = 2, 100, 1, 30
				boom := errors.New("boom")
				var fail once
				behave := func(ctx context.Context, term *simba.Term, msg stream.Message) error {
					if err := work(time.Duration(1+msg.Offset%4)*10*time.Millisecond)(ctx, term, msg); err != nil {
						return err
					}
					if msg.Partition == bad && msg.Offset == at && fail.first(nil) {
						if panics {
							panic(boom)
						}
						return boom
					}
					return nil
				}
				a := startNode(t, b, "a", P, newNumbered(M, 10), rec, handlers(rec, "a", behave),
					stream.WithMaxConcurrency(4), stream.WithCommitInterval(time.Hour))
				waitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(P, M) })
				a.stop()
				evs := rec.Events()
				fails := a.failures()
				if len(fails) != 1 {
					t.Fatalf("%d partition failures, want 1: %v", len(fails), fails)
				}
				f := fails[0]
				var pe *simba.PanicError
				if f.Partition != bad || f.Op != "process" || f.Offset != at || !errors.Is(f, simba.ErrYield) ||
					(!panics && !errors.Is(f, boom)) || (panics && !errors.As(f, &pe)) {
					t.Errorf("failure %v: want partition %d, process at %d", f, bad, at)
				}
				tokens := termsOf(evs, bad)
				if len(tokens) != 2 {
					t.Fatalf("partition %d had terms %v, want 2", bad, tokens)
				}
				if got := lastSaved(evs, tokens[0]); got != at {
					t.Errorf("failed term's final checkpoint %d, want %d", got, at)
				}
				checkAll(t, evs, b, 4, P, M)
				checkInitClose(t, evs)
			})
		})
	}
}

func TestWindowFailureFailsPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		boom := errors.New("window boom")
		var fail once
		newHandler := func(p int) stream.Handler {
			h := windowHandler{Handler: &handler{Rec: rec, Node: "a", Partition: p, Behaviour: work(10 * time.Millisecond)}}
			h.WindowErr = func() error {
				if fail.first(nil) {
					return boom
				}
				return nil
			}
			return h
		}
		a := startNode(t, b, "a", 1, newNumbered(100, 10), rec, newHandler, stream.WithWindow(200*time.Millisecond))
		waitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(1, 100) })
		a.stop()
		fails := a.failures()
		if len(fails) != 1 || fails[0].Op != "window" || !errors.Is(fails[0], boom) {
			t.Fatalf("failures %v, want one of Window", fails)
		}
		checkAll(t, rec.Events(), b, 1, 1, 100)
	})
}

// badSource breaks the offset order once.
type badSource struct {
	*numbered
	broke once
}

func (s *badSource) Poll(ctx context.Context, p int, from int64) ([]stream.Message, error) {
	msgs, err := s.numbered.Poll(ctx, p, from)
	if err == nil && from >= 20 && len(msgs) > 1 && s.broke.first(nil) {
		msgs[0], msgs[1] = msgs[1], msgs[0]
	}
	return msgs, err
}

func TestSourceFailureFailsPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		a := startNode(t, b, "a", 1, &badSource{numbered: newNumbered(60, 10)}, rec, handlers(rec, "a", work(10*time.Millisecond)))
		waitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(1, 60) })
		a.stop()
		fails := a.failures()
		if len(fails) != 1 || fails[0].Op != "poll" || !errors.Is(fails[0], stream.ErrOffsetOrder) {
			t.Fatalf("failures %v, want one of the source's order", fails)
		}
		checkAll(t, rec.Events(), b, 1, 1, 60)
	})
}

// initFails fails its first Init.
type initFails struct {
	*handler
	fail *once
}

func (h initFails) Init(ctx context.Context, term *simba.Term) error {
	if h.fail.first(nil) {
		return errors.New("init boom")
	}
	return h.handler.Init(ctx, term)
}

func TestInitFailureFailsPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		var fail once
		newHandler := func(p int) stream.Handler {
			return initFails{&handler{Rec: rec, Node: "a", Partition: p, Behaviour: work(10 * time.Millisecond)}, &fail}
		}
		a := startNode(t, b, "a", 1, newNumbered(30, 10), rec, newHandler)
		waitFor(t, time.Minute, "every message processed", func() bool { return rec.Processed(1, 30) })
		a.stop()
		fails := a.failures()
		if len(fails) != 1 || fails[0].Op != "init" {
			t.Fatalf("failures %v, want one of Init", fails)
		}
		evs := rec.Events()
		checkAll(t, evs, b, 1, 1, 30)
		checkInitClose(t, evs)
	})
}

// TestStaleCheckpointRefused: the owner of a partition is cut off from the
// backend while a checkpoint write is on its way, and the write outlives
// the cancellation of its ctx (as a write from a paused process would); the
// owner's term expires, another node takes over and checkpoints, the link
// heals. The late write is refused, and no checkpoint is ever accepted from
// a term that did not hold the partition, nor moves backwards.
func TestStaleCheckpointRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		// x is the partition's owner when both are members.
		x, y := "a", "c"
		if assign.Owners(group, []string{x, y}, 1, assign.Rendezvous)[0] != x {
			x, y = y, x
		}
		src := newNumbered(1_000_000, 10)
		opts := []stream.Option{stream.WithCommitInterval(500 * time.Millisecond)}
		nx := startNode(t, b, x, 1, src, rec, handlers(rec, x, work(10*time.Millisecond)), opts...)
		var cut sync.Mutex
		partitioned := false
		nx.store.Late = func() bool { cut.Lock(); defer cut.Unlock(); return partitioned }
		waitFor(t, time.Minute, x+" processing", func() bool { return rec.Count(func(e ev) bool { return e.Kind == kSaved }) > 2 })
		ny := startNode(t, b, y, 1, src, rec, handlers(rec, y, work(10*time.Millisecond)), opts...)
		time.Sleep(time.Second)

		cut.Lock()
		partitioned = true
		cut.Unlock()
		nx.conn.Partition()
		cutAt := len(rec.Events())
		var stale ev
		waitFor(t, time.Minute, x+"'s checkpoint write sent into the cut link", func() bool {
			for _, e := range rec.Events()[cutAt:] {
				if e.Kind == kSave && e.Node == x {
					stale = e
					return true
				}
			}
			return false
		})
		waitFor(t, time.Minute, y+" took over and checkpointed", func() bool {
			return rec.Count(func(e ev) bool { return e.Kind == kSaved && e.Node == y && e.Err == nil && e.Offset > stale.Offset }) > 0
		})
		nx.conn.Heal()
		var late ev
		waitFor(t, time.Minute, "the late write answered", func() bool {
			for _, e := range rec.Events() {
				if e.Kind == kSaved && e.Token == stale.Token && e.Offset == stale.Offset {
					late = e
					return true
				}
			}
			return false
		})
		if late.Err == nil || !errors.Is(late.Err, stream.ErrFenced) {
			t.Errorf("late checkpoint write of token %d answered %v, want an error matching ErrFenced", late.Token, late.Err)
		} else {
			t.Logf("late checkpoint %d of token %d refused: %v", late.Offset, late.Token, late.Err)
		}
		// On the memory backend the write in flight ends with the session
		// (the client closes it when its deadline passes); on a backend
		// where it reaches the server, the server refuses it.
		if !errors.Is(late.Err, backend.ErrSessionDone) && !errors.Is(late.Err, backend.ErrConflict) &&
			!errors.Is(late.Err, simba.ErrTermExpired) {
			t.Errorf("late write refused by %v, not by the fence", late.Err)
		}
		nx.stop()
		ny.stop()
		evs := rec.Events()
		_, errs := checkCalls(evs, 1)
		errs = append(errs, checkCheckpoints(evs, grantsOf(b))...)
		errs = append(errs, checkResume(evs)...)
		for _, err := range errs {
			t.Error(err)
		}
	})
}

// TestRecordStoreFencesByTerm uses the default store directly: a term saves
// and loads; after its term ended its writes are refused; a later term's
// checkpoint is never replaced by an earlier term's.
func TestRecordStoreFencesByTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		c, err := simba.New(b.Node("a"), simba.WithTTL(testTTL))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		terms := make(chan *simba.Term, 2)
		task, err := c.Group(group, 1).RunWhileLeader(func(ctx context.Context, term *simba.Term, _ int) error {
			terms <- term
			<-ctx.Done()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		first := await.For(t, terms, testTTL, "no first term within the TTL")
		ctx := context.Background()
		var s stream.RecordStore
		if _, found, err := s.Load(ctx, first, 0); found || err != nil {
			t.Fatalf("Load before any Save: found %v, %v", found, err)
		}
		if err := s.Save(ctx, first, 0, 42); err != nil {
			t.Fatalf("Save: %v", err)
		}
		if off, found, err := s.Load(ctx, first, 0); off != 42 || !found || err != nil {
			t.Fatalf("Load = %d, %v, %v; want 42", off, found, err)
		}
		task.Stop()
		await.For(t, task.Done(), testTTL, "Stop of the first term's task did not complete within the TTL")
		if err := s.Save(ctx, first, 0, 50); !errors.Is(err, stream.ErrFenced) {
			t.Errorf("Save after the term ended: %v, want ErrFenced", err)
		}
		task, err = c.Group(group, 1).RunWhileLeader(func(ctx context.Context, term *simba.Term, _ int) error {
			terms <- term
			<-ctx.Done()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		second := await.For(t, terms, testTTL, "no second term within the TTL")
		if off, _, _ := s.Load(ctx, second, 0); off != 42 {
			t.Errorf("next term loaded %d, want 42", off)
		}
		if err := s.Save(ctx, second, 0, 43); err != nil {
			t.Errorf("Save of the next term: %v", err)
		}
		if err := s.Save(ctx, first, 0, 99); !errors.Is(err, stream.ErrFenced) {
			t.Errorf("Save of the first term after the second wrote: %v, want ErrFenced", err)
		}
		if off, _, _ := s.Load(ctx, second, 0); off != 43 {
			t.Errorf("checkpoint %d, want 43", off)
		}
		task.Stop()
		await.For(t, task.Done(), testTTL, "Stop of the second term's task did not complete within the TTL")
	})
}
