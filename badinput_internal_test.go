package simba

import (
	"math"
	"testing"
	"testing/synctest"
	"time"
)

// The hand-off limiter never returns a negative count and never asks for a
// retry sooner than a token can come, or later than maxTokenWait, whatever
// the burst.
func TestTokenBucketNeverSpins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, burst := range []int{1, 1 << 40, math.MaxInt} {
			b := newTokenBucket(minHandOffRate, burst)
			if got := b.take(burst); got != burst {
				t.Errorf("burst %d: first take got %d", burst, got)
			}
			if got := b.take(burst); got != 0 {
				t.Errorf("burst %d: take from an empty bucket got %d", burst, got)
			}
			if d := b.wait(burst); d < time.Hour || d > maxTokenWait {
				t.Errorf("burst %d: wait %v, want between a token's interval (1h) and %v", burst, d, maxTokenWait)
			}
			time.Sleep(time.Hour)
			if got := b.take(burst); got != 1 {
				t.Errorf("burst %d: take after an hour got %d, want 1", burst, got)
			}
		}
	})
}
