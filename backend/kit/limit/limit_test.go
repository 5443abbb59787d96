package limit

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newLimiter(t *testing.T, n int) *Limiter {
	t.Helper()
	l, err := New(n)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestNewRefusesNoSlots(t *testing.T) {
	for _, n := range []int{0, -1} {
		if l, err := New(n); err == nil || l != nil {
			t.Errorf("New(%d): %v, %v; want an error", n, l, err)
		}
	}
}

func TestTakeAndFree(t *testing.T) {
	l := newLimiter(t, 2)
	if l.Cap() != 2 || l.InUse() != 0 {
		t.Fatalf("new Limiter: Cap %d, InUse %d", l.Cap(), l.InUse())
	}
	for range 2 {
		if err := l.Take(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if took := l.TryTake(); l.InUse() != 2 || took {
		t.Errorf("with every slot taken: InUse %d, TryTake took one %v", l.InUse(), took)
	}
	l.Free()
	if !l.TryTake() {
		t.Error("TryTake failed with a slot free")
	}
	l.Free()
	l.Free()
	l.Free() // nothing taken: does nothing
	if l.InUse() != 0 {
		t.Errorf("InUse %d after every slot was freed", l.InUse())
	}
}

// A Take waits, counted by Waiting, until a slot is freed.
func TestTakeWaitsForAFreeSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, 1)
		if err := l.Take(t.Context()); err != nil {
			t.Fatal(err)
		}
		got := make(chan error)
		go func() { got <- l.Take(t.Context()) }()
		synctest.Wait()
		if l.Waiting() != 1 {
			t.Fatalf("Waiting %d, want 1", l.Waiting())
		}
		select {
		case err := <-got:
			t.Fatalf("Take returned %v with no slot free", err)
		default:
		}
		l.Free()
		if err := <-got; err != nil {
			t.Errorf("Take after Free: %v", err)
		}
		if l.Waiting() != 0 || l.InUse() != 1 {
			t.Errorf("Waiting %d, InUse %d; want 0, 1", l.Waiting(), l.InUse())
		}
	})
}

// A Take that ends with its ctx, while it waits or as the slot comes,
// takes nothing and reports ErrNotSent with ctx's error and cause.
func TestTakeEndsWithCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, 1)
		if err := l.Take(t.Context()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := l.Take(ctx)
		if !errors.Is(err, ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Take waiting past its deadline: %v, want ErrNotSent and DeadlineExceeded", err)
		}
		l.Free()

		why := errors.New("shutting down")
		ended, stop := context.WithCancelCause(t.Context())
		stop(why)
		err = l.Take(ended) // a slot is free, but ctx has ended
		if !errors.Is(err, ErrNotSent) || !errors.Is(err, context.Canceled) || !errors.Is(err, why) {
			t.Errorf("Take with an ended ctx: %v, want ErrNotSent, Canceled and the cause", err)
		}
		if l.InUse() != 0 || l.Waiting() != 0 {
			t.Errorf("InUse %d, Waiting %d after requests not sent", l.InUse(), l.Waiting())
		}
	})
}

// TakeUntil gives up when stop ends first.
func TestTakeUntilStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, 1)
		if err := l.Take(t.Context()); err != nil {
			t.Fatal(err)
		}
		stop, end := context.WithCancel(t.Context())
		got := make(chan error)
		go func() { got <- l.TakeUntil(t.Context(), stop) }()
		synctest.Wait()
		end()
		if err := <-got; !errors.Is(err, ErrNotSent) || !errors.Is(err, context.Canceled) {
			t.Errorf("TakeUntil whose stop ended: %v, want ErrNotSent and Canceled", err)
		}
		l.Free()
		if err := l.TakeUntil(t.Context(), t.Context()); err != nil {
			t.Errorf("TakeUntil with a slot free: %v", err)
		}
	})
}

func TestDo(t *testing.T) {
	l := newLimiter(t, 1)
	v, err := Do(t.Context(), l, func() (int, error) {
		if l.InUse() != 1 {
			t.Errorf("f ran with %d slots taken, want 1", l.InUse())
		}
		return 7, nil
	})
	if v != 7 || err != nil || l.InUse() != 0 {
		t.Errorf("Do: %d, %v, %d slots left taken; want 7, nil, 0", v, err, l.InUse())
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = Do(ended, l, func() (int, error) {
		t.Error("f ran with an ended ctx")
		return 0, nil
	})
	if !errors.Is(err, ErrNotSent) {
		t.Errorf("Do with an ended ctx: %v, want ErrNotSent", err)
	}
}
