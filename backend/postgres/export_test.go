package postgres

import "time"

// SlotWaiters returns how many of b's statements wait for a slot now (see
// WithMaxRequests).
func SlotWaiters(b *Backend) int { return b.lim.Waiting() }

// StepsSeen reports how many forward steps of the database's clock b has
// seen, and the size of the last (see clock.go).
func StepsSeen(b *Backend) (int, time.Duration) { return b.clock.StepsSeen() }

// WithoutPoolerCheck makes the listener LISTEN through a pooler, as it did
// before it detected one, until the test ends: the probe's fallback is the
// safety net for a pooler it does not detect.
func WithoutPoolerCheck(t interface{ Cleanup(func()) }) {
	skipPoolerCheck.Store(true)
	t.Cleanup(func() { skipPoolerCheck.Store(false) })
}
