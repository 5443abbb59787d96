package mysql

import "time"

// StepsSeen reports how many steps of the database's clock b's client has
// seen, and the size of the last (see package dbclock).
func StepsSeen(b *Backend) (int, time.Duration) { return b.clock.StepsSeen() }

// SlotWaiters reports how many statements wait for a slot of the bound
// on statements in flight (WithMaxRequests).
func SlotWaiters(b *Backend) int { return b.lim.Waiting() }
