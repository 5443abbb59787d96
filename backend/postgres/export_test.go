package postgres

import "time"

// SlotWaiters returns how many of b's statements wait for a slot now (see
// WithMaxRequests).
func SlotWaiters(b *Backend) int { return int(b.lim.waiting.Load()) }

// StepsSeen reports how many forward steps of the database's clock b has
// seen, and the size of the last (see clock.go).
func StepsSeen(b *Backend) (int, time.Duration) { return b.clock.stepsSeen() }
