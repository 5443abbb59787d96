package wake

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestRegistry(t *testing.T) {
	var r Registry
	got := map[string]int{}
	fn := func(name string) func() { return func() { got[name]++ } }
	cancelA := r.Subscribe("a", fn("a"))
	r.Subscribe("b", fn("b"))
	cancelP := r.SubscribePrefix("status/", fn("status/"))
	r.SubscribePrefix("", fn("all keys"))

	Call(r.Collect([]string{"a", "a", "c"}, []string{"status/x", "status/y"}))
	want := map[string]int{"a": 1, "status/": 1, "all keys": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("after Collect: %s called %d times, want %d (%v)", k, got[k], v, got)
		}
	}
	if got["b"] != 0 {
		t.Errorf("b called for another topic: %v", got)
	}

	cancelA()
	cancelP()
	clear(got)
	Call(r.Collect([]string{"a"}, []string{"status/x"}))
	if got["a"] != 0 || got["status/"] != 0 || got["all keys"] != 1 {
		t.Errorf("after cancel: %v, want only the remaining prefix", got)
	}
	clear(got)
	Call(r.All())
	if got["b"] != 1 || got["all keys"] != 1 || len(got) != 2 {
		t.Errorf("All: %v, want b and the remaining prefix once each", got)
	}
}

// Hints: an event and a due time each give a hint, coalesced in a buffer
// of one; the channel closes when ctx ends, and the subscription goes.
func TestHints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r Registry
		var wg sync.WaitGroup
		ctx, cancel := context.WithCancel(t.Context())
		h := Hints(ctx, context.Background(), &wg, func(f func()) func() { return r.Subscribe("x", f) },
			func(context.Context) time.Duration { return time.Minute })
		Call(r.Collect([]string{"x"}, nil))
		Call(r.Collect([]string{"x"}, nil))
		synctest.Wait()
		if _, ok := <-h; !ok {
			t.Fatal("no hint after an event")
		}
		select {
		case <-h:
			t.Fatal("two hints for events that came together")
		default:
		}
		start := time.Now()
		<-h
		if d := time.Since(start); d != time.Minute {
			t.Errorf("the hint of the due time came after %v, want 1m", d)
		}
		cancel()
		wg.Wait()
		if _, ok := <-h; ok {
			t.Error("a hint after ctx ended")
		}
		if n := len(r.All()); n != 0 {
			t.Errorf("%d subscriptions left after the end", n)
		}
	})
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Poke never blocks: a second hint coalesces with the unread one.
func TestPoke(t *testing.T) {
	ch := make(chan struct{}, 1)
	Poke(ch)
	Poke(ch)
	if len(ch) != 1 {
		t.Errorf("%d hints buffered after two Pokes, want 1", len(ch))
	}
	Poke(make(chan struct{})) // no reader: returns all the same
}
