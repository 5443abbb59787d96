package lost

import (
	"slices"
	"testing"
)

func closed(s *Signal) bool {
	select {
	case <-s.C():
		return true
	default:
		return false
	}
}

func TestLoseRunsOnLostOnce(t *testing.T) {
	s := New()
	n := 0
	s.OnLost(func() { n++ })
	stopped := s.OnLost(func() { t.Error("a stopped OnLost function ran") })
	if !stopped() {
		t.Error("stop of a pending function reported false")
	}
	if !s.Lose() || s.Lose() {
		t.Error("Lose: want true once, then false")
	}
	if !closed(s) || n != 1 {
		t.Errorf("after Lose: closed %v, OnLost ran %d times", closed(s), n)
	}
	ran := false
	if s.OnLost(func() { ran = true })(); !ran {
		t.Error("OnLost after the loss did not run at once")
	}
}

func TestReleasedIsNeverLost(t *testing.T) {
	s := New()
	s.Released()
	if s.Lose() || closed(s) {
		t.Error("a released holding was lost")
	}
}

// A loss seen during a release waits for its outcome: none if the release
// succeeded, the loss if it failed.
func TestLossDuringRelease(t *testing.T) {
	ok := New()
	ok.BeginRelease()
	if ok.Lose() || closed(ok) {
		t.Fatal("a loss seen during the release closed C at once")
	}
	if ok.EndRelease(true) || closed(ok) {
		t.Error("a successful release's own write counted as a loss")
	}

	failed := New()
	failed.BeginRelease()
	failed.Lose()
	if !failed.EndRelease(false) || !closed(failed) {
		t.Error("a failed release did not pass on the loss seen meanwhile")
	}

	quiet := New()
	quiet.BeginRelease()
	if quiet.EndRelease(false) || closed(quiet) {
		t.Error("a failed release with no loss seen closed C")
	}
	if !quiet.Lose() {
		t.Error("a loss after the failed release did not close C")
	}
}

// The OnLost functions run in the order they were registered, a stopped one
// left out: a backend whose runs must repeat (the memory backend's seeded
// simulations) depends on it.
func TestOnLostOrder(t *testing.T) {
	s := New()
	var got []int
	for i := range 5 {
		stop := s.OnLost(func() { got = append(got, i) })
		if i == 2 {
			stop()
		}
	}
	s.Lose()
	if want := []int{0, 1, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("OnLost functions ran as %v, want %v", got, want)
	}
}

func TestIsReleased(t *testing.T) {
	s := New()
	if s.IsReleased() {
		t.Error("a new Signal is released")
	}
	s.BeginRelease()
	s.EndRelease(false)
	if s.IsReleased() {
		t.Error("a failed release counted as released")
	}
	s.BeginRelease()
	s.EndRelease(true)
	if !s.IsReleased() {
		t.Error("a successful release did not count as released")
	}
	r := New()
	r.Released()
	if !r.IsReleased() {
		t.Error("Released did not count as released")
	}
}
