package stream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/stream"
)

// trace is a wrapper that records its name around the call.
func trace(name string, log *[]string) stream.Wrapper {
	return func(next stream.Handler) stream.Handler {
		return stream.HandlerFunc(func(ctx context.Context, term *simba.Term, msg stream.Message) error {
			*log = append(*log, name+">")
			err := next.Process(ctx, term, msg)
			*log = append(*log, "<"+name)
			return err
		})
	}
}

func TestChainOrder(t *testing.T) {
	var log []string
	h := stream.HandlerFunc(func(context.Context, *simba.Term, stream.Message) error {
		log = append(log, "h")
		return nil
	})
	if err := stream.Chain(h, trace("a", &log), trace("b", &log)).Process(context.Background(), nil, stream.Message{}); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(log, " "), "a> b> h <b <a"; got != want {
		t.Errorf("calls %q, want %q", got, want)
	}
}

// failing fails its first n calls.
func failing(n int, err error) (stream.Handler, *int) {
	calls := 0
	return stream.HandlerFunc(func(ctx context.Context, _ *simba.Term, _ stream.Message) error {
		calls++
		if calls <= n {
			return err
		}
		return nil
	}), &calls
}

func TestOnError(t *testing.T) {
	boom := errors.New("boom")
	var seen []error
	skip := stream.OnError(func(_ context.Context, _ *simba.Term, msg stream.Message, err error) error {
		seen = append(seen, err)
		if msg.Offset == 1 {
			return nil // skipped
		}
		return fmt.Errorf("offset %d: %w", msg.Offset, err)
	})
	h, _ := failing(10, boom)
	h = skip(h)
	ctx := context.Background()
	if err := h.Process(ctx, nil, stream.Message{Offset: 1}); err != nil {
		t.Errorf("skipped message: %v", err)
	}
	if err := h.Process(ctx, nil, stream.Message{Offset: 2}); !errors.Is(err, boom) || !strings.Contains(err.Error(), "offset 2") {
		t.Errorf("kept failure: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := h.Process(cancelled, nil, stream.Message{Offset: 1}); !errors.Is(err, boom) {
		t.Errorf("failure after the term ended: %v, want it unchanged", err)
	}
	if len(seen) != 2 {
		t.Errorf("OnError's function saw %d failures, want 2", len(seen))
	}
	ok, _ := failing(0, nil)
	if err := skip(ok).Process(ctx, nil, stream.Message{}); err != nil || len(seen) != 2 {
		t.Errorf("success: %v, function called %d times", err, len(seen))
	}
}

func TestRetry(t *testing.T) {
	boom := errors.New("boom")
	synctest.Test(t, func(t *testing.T) {
		h, calls := failing(2, boom)
		start := time.Now()
		if err := stream.Retry(3, 100*time.Millisecond)(h).Process(context.Background(), nil, stream.Message{}); err != nil {
			t.Errorf("third attempt: %v", err)
		}
		if *calls != 3 || time.Since(start) != 300*time.Millisecond {
			t.Errorf("%d calls in %v, want 3 in 300ms (100ms, then 200ms)", *calls, time.Since(start))
		}
	})
	synctest.Test(t, func(t *testing.T) {
		h, calls := failing(5, boom)
		if err := stream.Retry(2, time.Millisecond)(h).Process(context.Background(), nil, stream.Message{}); !errors.Is(err, boom) || *calls != 2 {
			t.Errorf("out of attempts: %v after %d calls, want boom after 2", err, *calls)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		h, calls := failing(5, boom)
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		if err := stream.Retry(10, 100*time.Millisecond)(h).Process(ctx, nil, stream.Message{}); !errors.Is(err, boom) || *calls != 2 {
			t.Errorf("ctx ended: %v after %d calls, want boom after 2", err, *calls)
		}
	})
	for _, bad := range []stream.Wrapper{
		stream.Retry(0, time.Second),
		stream.Retry(1, -time.Second),
		stream.OnError(nil),
		stream.Observe(nil),
	} {
		h := stream.Chain(stream.HandlerFunc(func(context.Context, *simba.Term, stream.Message) error { return nil }), bad)
		if err := h.Process(context.Background(), nil, stream.Message{}); !errors.Is(err, simba.ErrInvalidArgument) {
			t.Errorf("bad wrapper arguments accepted: %v", err)
		}
	}
}

func TestObserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		var got []string
		h := stream.Observe(func(msg stream.Message, took time.Duration, err error) {
			got = append(got, fmt.Sprintf("%d %v %v", msg.Offset, took, err))
		})(stream.HandlerFunc(func(ctx context.Context, _ *simba.Term, msg stream.Message) error {
			time.Sleep(time.Duration(msg.Offset) * time.Second)
			if msg.Offset == 2 {
				return boom
			}
			return nil
		}))
		h.Process(context.Background(), nil, stream.Message{Offset: 1})
		h.Process(context.Background(), nil, stream.Message{Offset: 2})
		if want := []string{"1 1s <nil>", "2 2s boom"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("observed %q, want %q", got, want)
		}
	})
}

// TestWrappersInTheLoop: wrappers given as options wrap every handler's
// Process; a message skipped by OnError counts as processed.
func TestWrappersInTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		boom := errors.New("boom")
		behave := func(ctx context.Context, term *simba.Term, msg stream.Message) error {
			if msg.Offset%10 == 3 {
				return boom
			}
			return work(10*time.Millisecond)(ctx, term, msg)
		}
		var mu sync.Mutex
		skipped, observed := 0, 0
		a := startNode(t, b, "a", 2, newNumbered(50, 10), rec, handlers(rec, "a", behave),
			stream.WithWrappers(stream.Observe(func(stream.Message, time.Duration, error) {
				mu.Lock()
				observed++
				mu.Unlock()
			})),
			stream.WithWrappers(stream.OnError(func(context.Context, *simba.Term, stream.Message, error) error {
				mu.Lock()
				skipped++
				mu.Unlock()
				return nil
			})))
		// Offsets ending in 3 fail and are skipped: wait for the others.
		waitFor(t, time.Minute, "the partitions' ends", func() bool {
			return rec.Count(func(e ev) bool { return e.Kind == kEnd && e.Offset == 49 }) == 2
		})
		time.Sleep(time.Second)
		a.stop()
		if len(a.failures()) != 0 {
			t.Errorf("failures %v despite OnError", a.failures())
		}
		if skipped != 10 || observed != 100 {
			t.Errorf("%d skipped, %d observed; want 10 and 100", skipped, observed)
		}
		if rec.Count(func(e ev) bool { return e.Kind == kSaved && e.Err == nil && e.Offset == 50 }) != 2 {
			t.Error("no final checkpoint at 50: skipped messages did not count as processed")
		}
	})
}

func TestStartRefusesBadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		c, err := simba.New(b)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		g := c.Group(group, 2)
		src := newNumbered(1, 1)
		h := func(int) stream.Handler { return nil }
		cases := map[string]func() (*stream.Task, error){
			"nil group":            func() (*stream.Task, error) { return stream.Start(nil, src, h) },
			"nil source":           func() (*stream.Task, error) { return stream.Start(g, nil, h) },
			"nil handler function": func() (*stream.Task, error) { return stream.Start(g, src, nil) },
			"nil option":           func() (*stream.Task, error) { return stream.Start(g, src, h, nil) },
		}
		for name, opt := range map[string]stream.Option{
			"concurrency 0": stream.WithMaxConcurrency(0),
			"commit 0":      stream.WithCommitInterval(0),
			"window -1s":    stream.WithWindow(-time.Second),
			"timeout 0":     stream.WithCallTimeout(0),
			"poll 0":        stream.WithPollInterval(0),
			"start -1":      stream.WithStartOffset(-1),
			"nil store":     stream.WithCheckpointStore(nil),
			"nil wrapper":   stream.WithWrappers(nil),
			"nil logger":    stream.WithLogger(nil),
			"OnError(nil)":  stream.WithWrappers(stream.OnError(nil)),
			"Observe(nil)":  stream.WithWrappers(stream.Observe(nil)),
			"Retry(0, 1s)":  stream.WithWrappers(stream.Retry(0, time.Second)),
			"Retry(1, -1s)": stream.WithWrappers(stream.Retry(1, -time.Second)),
			"second bad":    stream.WithWrappers(stream.Retry(1, 0), stream.Observe(nil)),
		} {
			cases[name] = func() (*stream.Task, error) { return stream.Start(g, src, h, opt) }
		}
		for name, start := range cases {
			task, err := start()
			if !errors.Is(err, simba.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
			}
			if task != nil {
				task.Close()
			}
		}
		if _, err := stream.Start(c.Group("bad name!", 2), src, h); !errors.Is(err, backend.ErrInvalidName) {
			t.Errorf("bad group name: %v", err)
		}
	})
}

// TestBadWrapperArguments: OnError, Observe and Retry given bad arguments do
// not panic; the wrapper they return fails every call with an error
// matching ErrInvalidArgument that names the function, and good wrappers
// pass WithWrappers' check.
func TestBadWrapperArguments(t *testing.T) {
	ok := stream.HandlerFunc(func(context.Context, *simba.Term, stream.Message) error { return nil })
	for name, w := range map[string]stream.Wrapper{
		"OnError": stream.OnError(nil),
		"Observe": stream.Observe(nil),
		"Retry":   stream.Retry(-1, 0),
	} {
		err := stream.Chain(ok, w).Process(context.Background(), nil, stream.Message{})
		if !errors.Is(err, simba.ErrInvalidArgument) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Process returned %v, want ErrInvalidArgument naming %s", name, err, name)
		}
	}
	good := stream.WithWrappers(stream.Retry(1, 0), stream.Observe(func(stream.Message, time.Duration, error) {}),
		stream.OnError(func(context.Context, *simba.Term, stream.Message, error) error { return nil }))
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		c, err := simba.New(b)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		task, err := stream.Start(c.Group(group, 1), newNumbered(1, 1), func(int) stream.Handler { return ok }, good)
		if err != nil {
			t.Fatalf("good wrappers refused: %v", err)
		}
		task.Close()
	})
}

// TestNilHandlerFailsPartition: a handler function returning nil fails the
// partition, not the node.
func TestNilHandlerFailsPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		rec := &recorder{}
		a := startNode(t, b, "a", 1, newNumbered(5, 5), rec, func(int) stream.Handler { return nil })
		time.Sleep(time.Second)
		a.stop()
		fails := a.failures()
		if len(fails) != 1 || fails[0].Op != "init" {
			t.Errorf("failures %v, want one of init", fails)
		}
	})
}
