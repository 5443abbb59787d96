// Package backoff is simba's one retry wait: exponential growth from a
// first step up to a limit, with jitter, so that a fleet of nodes that lost
// its backend at the same instant does not retry in step when it comes
// back (every reconnect, renewal and write retry loop of simba uses it).
//
// The jitter is "equal jitter": the wait before retry n is drawn uniformly
// from [d/2, d], where d = first·2^(n-1) capped at the limit. The wait is
// never longer than the unjittered one, so a loop bounded by a deadline
// (a renewal retrying before its term's end) keeps its bound, and never
// shorter than half of it, so retries still slow down.
//
// It is part of simba's kit for backend authors (backend/kit/...): code the
// backends share, importable by a backend of another module or of another
// repository. It follows the module's compatibility promise like the rest
// of its API.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// First is the first step of Wait.
const First = 10 * time.Millisecond

// Floor is the least wait Wait returns.
const Floor = time.Millisecond

// Wait returns the wait before retry number n (from 1): doubling from
// First, capped at limit, with equal jitter. It is at least Floor.
func Wait(n int, limit time.Duration) time.Duration {
	return Jitter(Step(n, First, limit))
}

// Step returns the unjittered wait before retry number n (from 1):
// first·2^(n-1), capped at limit, and at least Floor.
func Step(n int, first, limit time.Duration) time.Duration {
	d := max(first, Floor)
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return max(min(d, limit), Floor)
}

// Jitter returns a wait drawn uniformly from [d/2, d] (d itself when d is
// below 2·Floor).
func Jitter(d time.Duration) time.Duration {
	if d < 2*Floor {
		return max(d, 0)
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Sleep waits for d, or until ctx ends; it reports whether d passed (for
// d <= 0: whether ctx is still live). Every wait of the module's retry and
// poll loops is one Sleep.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
