package postgres

// SlotWaiters returns how many of b's statements wait for a slot now (see
// WithMaxRequests).
func SlotWaiters(b *Backend) int { return int(b.lim.waiting.Load()) }
