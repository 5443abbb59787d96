package dbclock

import (
	"testing"
	"time"
)

// Agreeing samples extend the chain; a step forward restarts it, and the
// verified time moves with the samples.
func TestStepRestartsTheChain(t *testing.T) {
	var k Clock
	if v, _, _ := k.Guard(time.Now()); !v.IsZero() {
		t.Fatalf("no sample yet: verified %v, want the zero time", v)
	}
	t0 := time.Now()
	db0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	if step, _ := k.Note(t0, t0.Add(time.Millisecond), db0, 7); step != 0 {
		t.Fatalf("first sample: step %v", step)
	}
	// One second later on both clocks: agrees.
	if step, _ := k.Note(t0.Add(time.Second), t0.Add(time.Second+time.Millisecond), db0.Add(time.Second), 7); step != 0 {
		t.Fatalf("an agreeing sample: step %v", step)
	}
	if v, c, _ := k.Guard(t0.Add(2 * time.Second)); !v.Equal(db0.Add(time.Second)) || !c.Equal(db0) {
		t.Fatalf("verified %v, chain from %v; want %v, %v", v, c, db0.Add(time.Second), db0)
	}
	// Two seconds later by the client, five by the database: a step of
	// about three seconds.
	step, changed := k.Note(t0.Add(2*time.Second), t0.Add(2*time.Second+time.Millisecond), db0.Add(5*time.Second), 7)
	if step < 2*time.Second || step > 3*time.Second || changed {
		t.Fatalf("a step: %v (changed %v); want about 3s less the allowance", step, changed)
	}
	if n, last := k.StepsSeen(); n != 1 || last != step {
		t.Fatalf("steps seen %d, last %v; want 1, %v", n, last, step)
	}
	if _, c, age := k.Guard(t0.Add(2*time.Second + time.Millisecond)); !c.Equal(db0.Add(5*time.Second)) || age != 0 {
		t.Fatalf("after the step the chain starts at %v (age %v); want %v, 0", c, age, db0.Add(5*time.Second))
	}
}

// A sample from another server restarts the chain of clock samples,
// even when the new server's clock agrees with the old one's (the case
// that let a waiter delete a holder's session right after a failover).
func TestClockChainRestartsOnANewServer(t *testing.T) {
	var k Clock
	t0 := time.Now()
	db0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) (time.Time, time.Time, time.Time) {
		return t0.Add(d), t0.Add(d + time.Millisecond), db0.Add(d)
	}
	sent, recv, db := at(0)
	if step, changed := k.Note(sent, recv, db, 1); step != 0 || changed {
		t.Fatalf("first sample: step %v, changed %v", step, changed)
	}
	sent, recv, db = at(5 * time.Second)
	if step, changed := k.Note(sent, recv, db, 1); step != 0 || changed {
		t.Fatalf("an agreeing sample: step %v, changed %v", step, changed)
	}
	if age, changed := k.ChainAge(t0.Add(10 * time.Second)); age < 9*time.Second || changed {
		t.Fatalf("chain of one server: age %v, changed %v; want about 10s, false", age, changed)
	}
	sent, recv, db = at(6 * time.Second) // the new server's clock agrees
	if step, changed := k.Note(sent, recv, db, 2); step != 0 || !changed {
		t.Fatalf("a sample from server 2: step %v, changed %v; want a change", step, changed)
	}
	age, changed := k.ChainAge(t0.Add(7 * time.Second))
	if age > time.Second || !changed {
		t.Fatalf("after the change: chain age %v, changed %v; want under 1s, true", age, changed)
	}
	_, chainDB, _ := k.Guard(t0.Add(7 * time.Second))
	if !chainDB.Equal(db) {
		t.Fatalf("the chain's first database time %v, want the new server's first sample %v", chainDB, db)
	}
}
