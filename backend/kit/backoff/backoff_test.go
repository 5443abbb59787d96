package backoff_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/backend/kit/backoff"
)

func TestStepDoublesUpToLimit(t *testing.T) {
	want := []time.Duration{10, 20, 40, 80, 100, 100}
	for i, w := range want {
		if got := backoff.Step(i+1, 10*time.Millisecond, 100*time.Millisecond); got != w*time.Millisecond {
			t.Errorf("Step(%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if got := backoff.Step(1, 0, 0); got != backoff.Floor {
		t.Errorf("Step with zero first and limit = %v, want the floor %v", got, backoff.Floor)
	}
}

func TestJitterStaysWithinHalfAndWhole(t *testing.T) {
	d := 80 * time.Millisecond
	seen := map[time.Duration]bool{}
	for range 1000 {
		got := backoff.Jitter(d)
		if got < d/2 || got > d {
			t.Fatalf("Jitter(%v) = %v, outside [%v, %v]", d, got, d/2, d)
		}
		seen[got] = true
	}
	// A fleet must not retry in step: 1000 draws over 40 ms of nanoseconds
	// that gave fewer than 900 distinct waits would be no jitter at all.
	if len(seen) < 900 {
		t.Errorf("Jitter(%v) gave %d distinct waits in 1000 draws: not spread", d, len(seen))
	}
}

func TestWaitNeverExceedsTheUnjitteredStep(t *testing.T) {
	for n := 1; n <= 20; n++ {
		limit := time.Second
		if got, step := backoff.Wait(n, limit), backoff.Step(n, backoff.First, limit); got > step || got < step/2 || got < backoff.Floor {
			t.Fatalf("Wait(%d) = %v, want in [%v, %v]", n, got, step/2, step)
		}
	}
}

func TestSleepWaitsOrEndsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		if !backoff.Sleep(ctx, time.Second) {
			t.Fatal("Sleep with a live context reported that the wait did not pass")
		}
		if took := time.Since(start); took != time.Second {
			t.Errorf("Sleep(1s) took %v, want 1s", took)
		}
		if !backoff.Sleep(ctx, 0) {
			t.Error("Sleep(0) with a live context reported false")
		}
		time.AfterFunc(time.Second, cancel)
		start = time.Now()
		if backoff.Sleep(ctx, time.Hour) {
			t.Fatal("Sleep reported that an hour passed, but its context ended after a second")
		}
		if took := time.Since(start); took != time.Second {
			t.Errorf("Sleep ended %v after the start, want 1s, when its context ended", took)
		}
		if backoff.Sleep(ctx, 0) || backoff.Sleep(ctx, -time.Second) {
			t.Error("Sleep with an ended context reported true")
		}
	})
}
