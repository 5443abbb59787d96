package lost

import (
	"slices"
	"sync"
)

// Signal is one holding's Lost signal. Make it with New.
type Signal struct {
	ch chan struct{}

	mu        sync.Mutex
	lost      bool     // ch is closed
	released  bool     // the owner released the holding: never lost
	releasing int      // the owner's releases in flight
	pending   bool     // a loss seen while releasing
	onLost    []onLost // the OnLost functions to run, in the order registered
	nextID    uint64
}

// onLost is one function registered by OnLost.
type onLost struct {
	id uint64
	f  func()
}

// New returns a Signal not lost.
func New() *Signal { return &Signal{ch: make(chan struct{})} }

// C is closed when the holding is lost.
func (s *Signal) C() <-chan struct{} { return s.ch }

// Lose closes C and runs the OnLost functions, once, in the order they
// were registered, unless the holding was released; while a release is in
// flight it only notes the loss, for EndRelease. It reports whether this
// call closed C.
func (s *Signal) Lose() bool {
	s.mu.Lock()
	if s.releasing > 0 && !s.released {
		s.pending = true
		s.mu.Unlock()
		return false
	}
	return s.closeLocked()
}

// closeLocked closes C, with s.mu held, and unlocks it.
func (s *Signal) closeLocked() bool {
	if s.lost || s.released {
		s.mu.Unlock()
		return false
	}
	s.lost = true
	close(s.ch)
	fs := s.onLost
	s.onLost = nil
	s.mu.Unlock()
	for _, o := range fs {
		o.f()
	}
	return true
}

// BeginRelease notes that the owner's release is in flight.
func (s *Signal) BeginRelease() {
	s.mu.Lock()
	s.releasing++
	s.mu.Unlock()
}

// EndRelease notes the release's outcome: released (the holding is the
// owner's no more, and C never closes), or not, when a loss seen meanwhile
// closes C now. It reports whether it closed C.
func (s *Signal) EndRelease(released bool) bool {
	s.mu.Lock()
	s.releasing--
	if released {
		s.released = true
	}
	if s.releasing > 0 || !s.pending {
		s.mu.Unlock()
		return false
	}
	s.pending = false
	return s.closeLocked()
}

// Released marks the holding released by its owner: C never closes.
func (s *Signal) Released() {
	s.mu.Lock()
	s.released = true
	s.pending = false
	s.mu.Unlock()
}

// IsReleased reports whether the owner released the holding (Released, or
// EndRelease(true)), so that a second release need not ask the server.
func (s *Signal) IsReleased() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.released
}

// OnLost runs f once when C closes (at once if it is closed), after the
// functions registered before it, until stop, which reports whether it
// stopped f from running. f runs on the goroutine that closes C, after
// Signal's own lock is released (a caller's lock held around Lose is still
// held), and must not block.
func (s *Signal) OnLost(f func()) (stop func() bool) {
	s.mu.Lock()
	if s.lost {
		s.mu.Unlock()
		f()
		return func() bool { return false }
	}
	id := s.nextID
	s.nextID++
	s.onLost = append(s.onLost, onLost{id: id, f: f})
	s.mu.Unlock()
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, o := range s.onLost {
			if o.id == id {
				s.onLost = slices.Delete(s.onLost, i, i+1)
				return true
			}
		}
		return false
	}
}
