package check

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestObserved(t *testing.T) {
	grants := []Grant{
		{Name: "a", Token: 1, Start: at(0), End: at(10), Ended: true, Expired: true},
		{Name: "a", Token: 2, Start: at(10), End: at(12), Ended: true}, // released
		{Name: "a", Token: 3, Start: at(12)},
	}
	good := []Observation{
		{Name: "a", Token: 1, What: "Valid", At: at(9.9), Until: at(9.9)},
		{Name: "a", Token: 1, What: "EnsureValid(1s)", At: at(8), Until: at(9)},
		{Name: "a", Token: 2, What: "ctx", At: at(12), Until: at(12)},      // the instant of the release
		{Name: "a", Token: 2, What: "Deadline", At: at(11), Until: at(14)}, // a stop ends a term early
		{Name: "a", Token: 3, What: "Valid", At: at(100), Until: at(100)},
	}
	if errs := Observed(good, grants); len(errs) != 0 {
		t.Fatalf("good history: %v", errs)
	}
	bad := []Observation{
		{Name: "a", Token: 1, What: "Valid", At: at(10), Until: at(10)},          // at the expiry
		{Name: "a", Token: 1, What: "EnsureValid(2s)", At: at(9), Until: at(11)}, // promised past it
		{Name: "a", Token: 2, What: "Valid", At: at(12.001), Until: at(12.001)},  // after the release
		{Name: "a", Token: 3, What: "Valid", At: at(11), Until: at(11)},          // before the grant
		{Name: "a", Token: 9, What: "Valid", At: at(11), Until: at(11)},          // no grant
	}
	errs := Observed(bad, grants)
	if len(errs) != len(bad) {
		t.Fatalf("want %d I4 violations, got %d: %v", len(bad), len(errs), errs)
	}
	for _, err := range errs {
		if !strings.HasPrefix(err.Error(), "I4: ") {
			t.Errorf("not labelled I4: %v", err)
		}
	}
}

func TestHandOffOrder(t *testing.T) {
	grants := []Grant{
		{Name: "a", Token: 1, Start: at(0), End: at(10), Ended: true},                 // released
		{Name: "a", Token: 2, Start: at(10), End: at(20), Ended: true, Expired: true}, // expired
		{Name: "a", Token: 3, Start: at(20), End: at(30), Ended: true},                // released at the cap
		{Name: "a", Token: 4, Start: at(30), End: at(31), Ended: true, Evicted: true},
		{Name: "a", Token: 5, Start: at(31)},
	}
	good := []Exit{
		{Name: "a", Token: 1, At: at(10), Horizon: at(12)},
		{Name: "a", Token: 2, At: at(25), Horizon: at(19)}, // the lease was lost: no hand-off
		{Name: "a", Token: 3, At: at(35), Horizon: at(30)}, // ignored its cancellation past the horizon
		{Name: "a", Token: 4, At: at(32), Horizon: at(33)}, // evicted: the server broke the lease
		{Name: "a", Token: 5, At: at(99), Horizon: at(99)},
	}
	if errs := HandOffOrder(good, grants); len(errs) != 0 {
		t.Fatalf("good history: %v", errs)
	}
	bad := []Exit{{Name: "a", Token: 1, At: at(10.05), Horizon: at(12)}}
	if errs := HandOffOrder(bad, grants); len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "I7: ") {
		t.Fatalf("want one I7 violation, got %v", errs)
	}
	// A watcher's grant: begun between Start and Seen. The run's exit
	// after Start but before Seen proves nothing.
	watched := []Grant{
		{Name: "a", Token: 1, Start: at(0), Seen: at(0.01), End: at(10), Ended: true},
		{Name: "a", Token: 2, Start: at(9.95), Seen: at(10.1)},
	}
	if errs := HandOffOrder(bad, watched); len(errs) != 0 {
		t.Fatalf("an exit before the grant was seen: %v", errs)
	}
	late := []Exit{{Name: "a", Token: 1, At: at(10.2), Horizon: at(12)}}
	if errs := HandOffOrder(late, watched); len(errs) != 1 {
		t.Fatalf("an exit after the grant was seen: want one I7 violation, got %v", errs)
	}
}

// fakeTerm is a term whose answers the test sets.
type fakeTerm struct {
	valid    bool
	deadline time.Time
}

func (f *fakeTerm) Name() string        { return "a" }
func (f *fakeTerm) Token() uint64       { return 7 }
func (f *fakeTerm) Valid() bool         { return f.valid }
func (f *fakeTerm) Deadline() time.Time { return f.deadline }
func (f *fakeTerm) EnsureValid(step ...time.Duration) error {
	if !f.valid {
		return context.DeadlineExceeded
	}
	return nil
}

func TestObserverRecordsWhatTheTaskWasTold(t *testing.T) {
	now := at(1)
	o := &Observer{Now: func() time.Time { return now }}
	term := &fakeTerm{valid: true, deadline: at(3)}
	if !o.Valid("n1", term) {
		t.Fatal("Valid: want true")
	}
	if err := o.EnsureValid("n1", term, time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if !o.Live("n1", term, ctx) {
		t.Fatal("Live: want true")
	}
	cancel()
	term.valid = false
	now = at(2)
	if o.Valid("n1", term) || o.Live("n1", term, ctx) || o.EnsureValid("n1", term, 0) == nil {
		t.Fatal("an ended term was reported live")
	}
	o.Exited("n1", term)
	obs := o.Observations()
	if len(obs) != 4 { // Valid, Deadline, EnsureValid, ctx
		t.Fatalf("want 4 observations, got %+v", obs)
	}
	exits := o.Exits()
	if len(exits) != 1 || !exits[0].Horizon.Equal(at(3)) || !exits[0].At.Equal(at(2)) {
		t.Fatalf("exit: %+v", exits)
	}
}
