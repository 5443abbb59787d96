package etcd

import "github.com/simba-go/simba/backend"

// Waiting returns how many Acquire calls of session s wait for their turn
// at lease name: their transaction returned, and they wait on the watch.
func Waiting(s backend.Session, name string) int {
	w := &s.(*session).lw
	w.mu.Lock()
	defer w.mu.Unlock()
	if sl := w.names[name]; sl != nil {
		return len(sl.waiters)
	}
	return 0
}
