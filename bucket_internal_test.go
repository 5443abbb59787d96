package simba

import (
	"testing"
	"testing/synctest"
	"time"
)

// The hand-off limiter, on the bubble's clock: a full bucket at first,
// partial takes, refills at the rate up to the burst, and waits rounded up
// to the time the wanted batch (at most a burst) is there.
func TestTokenBucketRefillsAtItsRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTokenBucket(10, 5) // a token every 100ms
		if got := b.take(3); got != 3 {
			t.Fatalf("take 3 of a full bucket of 5 got %d", got)
		}
		if got := b.take(4); got != 2 {
			t.Fatalf("take 4 of the 2 left got %d", got)
		}
		if d := b.wait(1); d != 100*time.Millisecond {
			t.Errorf("wait for 1 token at 10/s from empty: %v, want 100ms", d)
		}
		if d := b.wait(100); d != 500*time.Millisecond {
			t.Errorf("wait for 100 tokens (capped at the burst of 5) from empty: %v, want 500ms", d)
		}
		time.Sleep(250 * time.Millisecond)
		if d := b.wait(3); d != 50*time.Millisecond {
			t.Errorf("wait for 3 tokens with 2.5 there: %v, want 50ms", d)
		}
		if got := b.take(5); got != 2 {
			t.Errorf("take 5 with 2.5 tokens there got %d, want 2", got)
		}
		if d := b.wait(1); d != 50*time.Millisecond {
			t.Errorf("wait for 1 token with 0.5 there: %v, want 50ms", d)
		}
		time.Sleep(time.Hour)
		if d := b.wait(5); d != 0 {
			t.Errorf("wait for a burst after an hour: %v, want 0", d)
		}
		if got := b.take(100); got != 5 {
			t.Errorf("take 100 after an hour got %d, want the burst of 5", got)
		}
	})
}

// A nil bucket (no limit) allows everything at once.
func TestTokenBucketNilAllowsAll(t *testing.T) {
	var b *tokenBucket
	if got := b.take(1 << 20); got != 1<<20 {
		t.Errorf("nil take got %d", got)
	}
	if d := b.wait(1 << 20); d != 0 {
		t.Errorf("nil wait %v", d)
	}
}

// A wait for less than a millisecond's worth is a millisecond: a group does
// not retry in a loop of zero waits at a fast rate.
func TestTokenBucketWaitsAtLeastAMillisecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTokenBucket(1e6, 1)
		if got := b.take(1); got != 1 {
			t.Fatalf("take 1 got %d", got)
		}
		if d := b.wait(1); d != time.Millisecond {
			t.Errorf("wait at a million a second: %v, want 1ms", d)
		}
	})
}
