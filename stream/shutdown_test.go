package stream_test

import (
	"context"
	"errors"
	"strings"
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
