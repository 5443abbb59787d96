package simba

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// tokenBucket limits a rate of operations: up to burst at once, refilled at
// rate per second. It is a [rate.Limiter] asked at explicit instants
// (time.Now, which is the bubble's clock under testing/synctest), plus the
// two questions a group asks of it: how many of n changes may go now, and
// how long until the next batch may. A nil *tokenBucket allows everything.
// The rate is finite and at least minHandOffRate (WithHandOffLimit checks
// it), so that no wait is longer than maxTokenWait.
type tokenBucket struct {
	rate  float64 // tokens a second, as given; the limiter's Limit
	burst float64 // the limiter's Burst, as a float (a burst near the largest int does not convert back)

	mu  sync.Mutex // makes take's look and take one step
	lim *rate.Limiter
}

func newTokenBucket(r float64, burst int) *tokenBucket {
	return &tokenBucket{rate: r, burst: float64(burst), lim: rate.NewLimiter(rate.Limit(r), burst)}
}

// take takes up to n tokens and returns how many it took.
func (b *tokenBucket) take(n int) int {
	if b == nil {
		return n
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	got := n
	if tokens := b.lim.TokensAt(now); tokens < float64(n) {
		// Compared as floats first: a burst near the largest int is a
		// float that would not convert back.
		got = max(0, int(tokens))
	}
	if got > 0 && !b.lim.AllowN(now, got) {
		// Not reached: got tokens were there at now, and only take
		// takes them, under b.mu.
		return 0
	}
	return got
}

// maxTokenWait bounds a wait for tokens: a caller waiting for a batch wakes
// at least this often and takes what has come (one token, at
// minHandOffRate).
const maxTokenWait = time.Hour

// wait returns the time until n tokens are there, or burst tokens when n
// is larger: a caller that waits for a batch rather than for the next token
// pays its own fixed cost once per batch, not once per token. It takes
// nothing (a reservation would, and cancelling one restores its tokens
// only as precisely as a float that holds the burst).
func (b *tokenBucket) wait(n int) time.Duration {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	tokens := b.lim.TokensAt(time.Now())
	want := max(1, min(float64(n), b.burst))
	if tokens >= want {
		return 0
	}
	// Rounded up and at least a millisecond: a wait rounded down would
	// retry before the token is earned. At most maxTokenWait, computed as a
	// float: a large batch at a slow rate would overflow a Duration.
	d := math.Ceil((want - tokens) / b.rate * float64(time.Second))
	return time.Duration(min(max(d, float64(time.Millisecond)), float64(maxTokenWait)))
}
