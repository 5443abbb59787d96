package stream_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/stream"
)

// Task.Shutdown returns once every partition has handed off with its final
// checkpoint; with a Process call that ignores its cancellation it returns
// its ctx's error at the ctx's deadline, saying what still runs, and the
// stop completes in the background once the call returns.
func TestShutdown(t *testing.T) {
	t.Run("Graceful", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := memory.New()
			defer b.Close()
			rec := &recorder{}
			const P, M = 3, 400
			a := startNode(t, b, "a", P, newNumbered(M, 16), rec, handlers(rec, "a", work(20*time.Millisecond)),
				stream.WithMaxConcurrency(4), stream.WithCommitInterval(time.Hour))
			waitFor(t, time.Minute, "a started", func() bool { return rec.Count(func(e ev) bool { return e.Kind == kEnd }) > 50 })
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if err := a.task.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			if saved := rec.Count(func(e ev) bool { return e.Kind == kSaved && e.Err == nil }); saved != P {
				t.Errorf("%d final checkpoints accepted when Shutdown returned, want %d", saved, P)
			}
			select {
			case <-a.task.Done():
			default:
				t.Error("Done not closed when Shutdown returned nil")
			}
			if err := a.task.Shutdown(ctx); err != nil {
				t.Errorf("a second Shutdown: %v", err)
			}
			a.client.Close()
			checkInitClose(t, rec.Events())
		})
	})
	t.Run("CallIgnoringCancellation", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := memory.New()
			defer b.Close()
			rec := &recorder{}
			release := make(chan struct{})
			stuck := func(ctx context.Context, _ *simba.Term, msg stream.Message) error {
				if msg.Offset == 3 {
					<-release // ignores ctx
				}
				return nil
			}
			a := startNode(t, b, "a", 1, newNumbered(10, 1), rec, handlers(rec, "a", stuck))
			waitFor(t, time.Minute, "the call on offset 3 began", func() bool {
				return rec.Count(func(e ev) bool { return e.Kind == kStart && e.Offset == 3 }) > 0
			})
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			at := time.Now()
			err := a.task.Shutdown(ctx)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Shutdown: %v, want the ctx's deadline", err)
			}
			t.Logf("Shutdown: %v", err)
			if d := time.Since(at); d != 100*time.Millisecond {
				t.Errorf("Shutdown returned after %v, want its ctx's 100ms", d)
			}
			const want = `simba/stream: shutdown of stream "` + group + `" stopped waiting with 1 partition loop still running`
			if got := err.Error(); !strings.HasPrefix(got, want) {
				t.Errorf("Shutdown's error %q, want it to begin with %q", got, want)
			}
			close(release)
			if err := a.task.Shutdown(t.Context()); err != nil {
				t.Errorf("Shutdown once the call returned: %v", err)
			}
			a.client.Close()
		})
	})
}

// Done is closed at the moment Shutdown returns nil: here when the call that
// ignores its cancellation returns, 250ms after the stop, and not before.
func TestDoneClosesWhenShutdownReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		began := make(chan struct{})
		var once atomic.Bool
		slow := func(ctx context.Context, _ *simba.Term, msg stream.Message) error {
			if msg.Offset == 3 && once.CompareAndSwap(false, true) {
				close(began)
				time.Sleep(250 * time.Millisecond) // ignores ctx
			}
			return nil
		}
		a := startNode(t, b, "a", 1, newNumbered(10, 1), rec, handlers(rec, "a", slow))
		<-began
		doneAt := make(chan time.Time, 1)
		go func() {
			<-a.task.Done()
			doneAt <- time.Now()
		}()
		stopped := time.Now()
		if err := a.task.Shutdown(t.Context()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		returned := time.Now()
		if d := returned.Sub(stopped); d != 250*time.Millisecond {
			t.Errorf("Shutdown returned %v after the stop, want when the call returned, 250ms", d)
		}
		if at := <-doneAt; !at.Equal(returned) {
			t.Errorf("Done closed %v after Shutdown returned nil, want at the same moment", at.Sub(returned))
		}
		a.client.Close()
	})
}

// From the task's own calls: Stop returns at once; Shutdown, given the
// call's ctx or a ctx derived from it, begins the stop and returns an error
// at once, since it cannot wait for the call that made it. Either way the
// stop completes once the call has returned, with the final checkpoint.
func TestStopFromOwnHandler(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(ctx context.Context, task *stream.Task) error
	}{
		{"Stop", func(_ context.Context, task *stream.Task) error { task.Stop(); return nil }},
		{"Shutdown", func(ctx context.Context, task *stream.Task) error { return task.Shutdown(ctx) }},
		{"ShutdownDerivedCtx", func(ctx context.Context, task *stream.Task) error {
			ctx, cancel := context.WithTimeout(ctx, time.Hour)
			defer cancel()
			return task.Shutdown(ctx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				rec := &recorder{}
				var n *node
				ready := make(chan struct{})
				type result struct {
					err  error
					took time.Duration
				}
				got := make(chan result, 1)
				var once atomic.Bool
				h := func(ctx context.Context, _ *simba.Term, msg stream.Message) error {
					if msg.Offset != 3 || !once.CompareAndSwap(false, true) {
						return nil
					}
					<-ready
					at := time.Now()
					err := tc.call(ctx, n.task)
					got <- result{err, time.Since(at)}
					return nil
				}
				n = startNode(t, b, "a", 1, newNumbered(10, 1), rec, handlers(rec, "a", h), stream.WithCommitInterval(time.Hour))
				close(ready)
				r := <-got
				if r.took != 0 {
					t.Errorf("%s from the handler returned after %v, want at once", tc.name, r.took)
				}
				switch {
				case tc.name == "Stop":
				case r.err == nil:
					t.Errorf("Shutdown from the handler returned nil, want an error saying it cannot wait for itself")
				default:
					t.Logf("Shutdown: %v", r.err)
					const want = `simba/stream: shutdown of stream "` + group + `" called with the ctx of one of its own calls`
					if !strings.HasPrefix(r.err.Error(), want) {
						t.Errorf("Shutdown's error %q, want it to begin with %q", r.err, want)
					}
				}
				<-n.task.Done() // the stop began: it completes once the call returned
				var final []ev
				for _, e := range rec.Events() {
					if e.Kind == kSaved && e.Err == nil {
						final = append(final, e)
					}
				}
				if len(final) != 1 || final[0].Offset != 4 {
					t.Errorf("checkpoints accepted %v, want one final checkpoint at 4 (past the calling message)", final)
				}
				if err := n.task.Shutdown(t.Context()); err != nil {
					t.Errorf("Shutdown from the test once Done: %v", err)
				}
				n.client.Close()
			})
		})
	}
}

// A ctx of another task's calls does not count as the task's own: Shutdown
// given it waits as from anywhere else.
func TestShutdownWithAnotherTasksCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		var other *stream.Task
		ready := make(chan struct{})
		got := make(chan error, 1)
		var once atomic.Bool
		h := func(ctx context.Context, _ *simba.Term, msg stream.Message) error {
			if once.CompareAndSwap(false, true) {
				<-ready
				got <- other.Shutdown(ctx)
			}
			return nil
		}
		a := startNode(t, b, "a", 1, newNumbered(10, 1), rec, handlers(rec, "a", h))
		other, err := stream.Start(a.client.Group("other", 1), newNumbered(10, 1), handlers(&recorder{}, "a", work(0)),
			stream.WithLogger(testLogger(t, "a")))
		if err != nil {
			t.Fatal(err)
		}
		close(ready)
		if err := <-got; err != nil {
			t.Errorf("Shutdown of another task from a handler: %v, want nil once it stopped", err)
		}
		if !closed(other.Done()) {
			t.Error("Shutdown of another task returned before its Done was closed")
		}
		a.stop()
	})
}
