package lost

import "testing"

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
