package fencetest

import (
	"context"
	"errors"
	"testing"

	"github.com/simba-go/simba/fence"
)

// CounterStore is a counter kept in a fenced resource, the state a leader
// loads at the start of its term and then increments with its token.
type CounterStore interface {
	// Load reads the counter, as a new leader loads its state.
	Load(ctx context.Context) (int, error)
	// Begin starts a write of v fenced with token that has passed the
	// token check and not landed yet (a SQL transaction between Check and
	// COMMIT, a Redis or etcd request on its way); land completes it and
	// reports whether the fence accepted it.
	Begin(ctx context.Context, token uint64, v int) (land func() (bool, error), err error)
	// Claim claims the resource for token.
	Claim(ctx context.Context, token uint64) error
	// ClaimWaits reports whether Claim waits for a write that has passed
	// the check and not landed (SQL: the row's lock), rather than
	// outrunning it (Redis, etcd).
	ClaimWaits() bool
}

// Write begins and lands a fenced write at once.
func Write(ctx context.Context, s CounterStore, token uint64, v int) (bool, error) {
	land, err := s.Begin(ctx, token, v)
	if err != nil {
		return false, err
	}
	return land()
}

// LostUpdates plays the deposed-leader window on s and returns how many
// accepted increments the final counter lost. Leader 1 (token 1) writes
// 1, then has its write of 2 pass the fence's check and pauses before it
// lands. Leader 2 (token 2) is elected: it claims the resource (when
// claimed) while leader 1's write lands, loads the counter, and writes the
// next value. Each accepted write added one to the state its writer
// loaded, so the final counter must equal the number of accepted writes.
func LostUpdates(t *testing.T, s CounterStore, claimed bool) int {
	t.Helper()
	ctx := Ctx(t)
	accepted := 0
	ok, err := Write(ctx, s, 1, 1)
	if err != nil || !ok {
		t.Fatalf("leader 1's first write: accepted %v, %v", ok, err)
	}
	accepted++
	land, err := s.Begin(ctx, 1, 2) // checked, then paused
	if err != nil {
		t.Fatalf("leader 1's second write: %v", err)
	}

	// Leader 2's term begins. Its claim waits for (SQL) or outruns
	// (Redis, etcd) leader 1's write in flight, which lands meanwhile.
	claimDone := make(chan error, 1)
	if claimed {
		go func() { claimDone <- s.Claim(ctx, 2) }()
	} else {
		claimDone <- nil
	}
	var loaded int
	if !claimed {
		// The README's old pattern: load at the start of the term.
		if loaded, err = s.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if claimed {
		// Where the claim outruns the write (Redis, etcd), the write
		// must come after it to show the rejection; where it waits (SQL),
		// the write lands while it waits.
		if !s.ClaimWaits() {
			if err := <-claimDone; err != nil {
				t.Fatalf("claim: %v", err)
			}
			claimDone <- nil
		}
	}
	late, err := land()
	if err != nil {
		t.Fatalf("leader 1's late write: %v", err)
	}
	if late {
		accepted++
	}
	if err := <-claimDone; err != nil {
		t.Fatalf("claim: %v", err)
	}
	if claimed {
		if loaded, err = s.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ok, err = Write(ctx, s, 2, loaded+1)
	if err != nil || !ok {
		t.Fatalf("leader 2's write: accepted %v, %v", ok, err)
	}
	accepted++
	final, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claimed %v: %d writes accepted, counter %d (leader 1's late write accepted: %v)", claimed, accepted, final, late)
	return accepted - final
}

// ClaimPreventsLostUpdate reproduces, on counters made by newStore, the
// update a new leader loses when it loads its state before its first
// fenced write, and shows the claim prevents it.
func ClaimPreventsLostUpdate(t *testing.T, newStore func(t *testing.T) CounterStore) {
	t.Helper()
	if lost := LostUpdates(t, newStore(t), false); lost != 1 {
		t.Errorf("without the claim: %d updates lost, want 1 (the window this test reproduces)", lost)
	}
	if lost := LostUpdates(t, newStore(t), true); lost != 0 {
		t.Errorf("with the claim: %d updates lost", lost)
	}
}

// ClaimStale checks that claim accepts a token twice and rejects a lower
// one with a [*fence.StaleError] naming both.
func ClaimStale(t *testing.T, claim func(ctx context.Context, token uint64) error) {
	t.Helper()
	ctx := Ctx(t)
	if err := claim(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := claim(ctx, 5); err != nil {
		t.Fatalf("claiming again in the same term: %v", err)
	}
	err := claim(ctx, 4)
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Token != 4 || se.Highest != 5 {
		t.Fatalf("stale claim: %v", err)
	}
}

// Accepted turns a fenced write's error into accepted or rejected.
func Accepted(err error) (bool, error) {
	if errors.Is(err, fence.ErrStale) {
		return false, nil
	}
	return err == nil, err
}
