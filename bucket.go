package simba

import (
	"sync"
	"time"
)

// tokenBucket limits a rate of operations: up to burst at once, refilled at
// rate per second. A nil *tokenBucket allows everything.
type tokenBucket struct {
	rate  float64
	burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newTokenBucket(rate float64, burst int) *tokenBucket {
	return &tokenBucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// refill adds the tokens earned since the last call. b.mu is held.
func (b *tokenBucket) refill() {
	now := time.Now()
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
}

// take takes up to n tokens and returns how many it took.
func (b *tokenBucket) take(n int) int {
	if b == nil {
		return n
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	got := min(n, int(b.tokens))
	b.tokens -= float64(got)
	return got
}

// wait returns the time until n tokens are there, or burst tokens when n
// is larger: a caller that waits for a batch rather than for the next token
// pays its own fixed cost once per batch, not once per token.
func (b *tokenBucket) wait(n int) time.Duration {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	want := max(1, min(float64(n), b.burst))
	if b.tokens >= want {
		return 0
	}
	// At least a millisecond: a wait rounded down to nothing would retry
	// before any token is earned.
	return max(time.Millisecond, time.Duration((want-b.tokens)/b.rate*float64(time.Second)))
}
