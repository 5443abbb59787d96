package simba

import (
	"math"
	"sync"
	"time"
)

// tokenBucket limits a rate of operations: up to burst at once, refilled at
// rate per second. A nil *tokenBucket allows everything. The rate is finite
// and at least MinHandOffRate (WithHandOffLimit checks it), so that no wait
// is longer than maxTokenWait.
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
	got := n
	if b.tokens < float64(n) {
		// Compared as floats first: a burst near the largest int is a
		// float that would not convert back.
		got = max(0, int(b.tokens))
	}
	b.tokens -= float64(got)
	return got
}

// maxTokenWait bounds a wait for tokens: a caller waiting for a batch wakes
// at least this often and takes what has come (one token, at
// MinHandOffRate).
const maxTokenWait = time.Hour

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
	// Rounded up and at least a millisecond: a wait rounded down would
	// retry before the token is earned. At most maxTokenWait, computed as a
	// float: a large batch at a slow rate would overflow a Duration.
	d := math.Ceil((want - b.tokens) / b.rate * float64(time.Second))
	return time.Duration(min(max(d, float64(time.Millisecond)), float64(maxTokenWait)))
}
