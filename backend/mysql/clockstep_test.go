package mysql_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/internal/mytest"
	"github.com/simba-go/simba/internal/plant"
)

// TestClockStepForward: the server's wall clock (libfaketime under
// mariadbd) steps forward by more than the TTL while a session holds a
// lease and another waits for it, so that by the database's clock every
// session has expired at once. The waiter must not be granted the lease
// before the holder's own deadline (the start of its last successful
// renewal plus the TTL, on its clock). The waiter does get the lease
// after, and the step is seen and counted. The step comes before the
// holder has renewed within the waiter's chain of samples.
func TestClockStepForward(t *testing.T) {
	t.Parallel()
	granted, deadline, steps := clockStep(t, false)
	if granted.Before(deadline) {
		t.Fatalf("the waiter was granted the lease %v before the holder's deadline: two valid terms", deadline.Sub(granted))
	}
	if steps == 0 {
		t.Error("no step of the database's clock was seen")
	}
	t.Logf("granted %v after the holder's deadline", granted.Sub(deadline).Round(time.Millisecond))
}

// TestClockStepAfterRenewal is TestClockStepForward with the step made
// once the holder has renewed after the waiter's chain of agreeing
// samples began: the step must end that chain. With
// SIMBA_PLANT=trust-db-clock it fails (see TestClockStepCaughtWithoutGuard).
func TestClockStepAfterRenewal(t *testing.T) {
	t.Parallel()
	granted, deadline, steps := clockStep(t, true)
	if granted.Before(deadline) {
		t.Fatalf("the waiter was granted the lease %v before the holder's deadline: two valid terms", deadline.Sub(granted))
	}
	if steps == 0 {
		t.Error("no step of the database's clock was seen")
	}
	t.Logf("granted %v after the holder's deadline", granted.Sub(deadline).Round(time.Millisecond))
}

// TestClockStepCaughtWithoutGuard plants the bug the step guard fixes
// (expired sessions deleted by the statement's own clock): the same steps
// must then grant the lease before the holder's deadline, or the two tests
// above prove nothing.
func TestClockStepCaughtWithoutGuard(t *testing.T) {
	plant.ForTest(t, "trust-db-clock")
	for _, renewed := range []bool{false, true} {
		t.Run(map[bool]string{false: "before renewal", true: "after renewal"}[renewed], func(t *testing.T) {
			granted, deadline, _ := clockStep(t, renewed)
			if !granted.Before(deadline) {
				t.Fatalf("with the guard planted out, the waiter was granted the lease only %v after the holder's deadline: the test cannot tell the guard's work", granted.Sub(deadline))
			}
			t.Logf("with the guard planted out: granted %v before the holder's deadline", deadline.Sub(granted).Round(time.Millisecond))
		})
	}
}

// clockStep runs the scenario of TestClockStepForward on a server of its
// own and returns when the waiter was granted the lease, the holder's
// deadline, and how many steps the waiter's backend saw. The step expires
// the waiter's own session too: like simba's client, it opens another and
// contends again.
func clockStep(t *testing.T, renewed bool) (granted, deadline time.Time, steps int) {
	const ttl = 2 * time.Second
	srv := mytest.StartServer(t, mytest.WithFakeClock())
	holderB, waiterB := newBackendAt(t, srv.DSN()), newBackendAt(t, srv.DSN())
	holder := open(t, holderB, ttl)
	if _, err := holder.Acquire(ctxT(t), "x"); err != nil {
		t.Fatal(err)
	}
	hr := renew(t, holder)

	got := make(chan time.Time, 1)
	gotErr := make(chan error, 1)
	go func() {
		for {
			s, err := waiterB.Open(ctxT(t), backend.SessionOptions{TTL: ttl})
			if err != nil {
				gotErr <- err
				return
			}
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			renew(t, s)
			_, err = s.Acquire(ctxT(t), "x")
			if err == nil {
				got <- time.Now()
				return
			}
			if !errors.Is(err, backend.ErrSessionDone) {
				gotErr <- err
				return
			}
		}
	}()
	mustEventually(t, "the waiter's candidacy", func() bool {
		n := 0
		_ = holderB.DB().QueryRowContext(ctxT(t), "SELECT COUNT(*) FROM simba_candidacies WHERE name = 'x'").Scan(&n)
		return n == 2
	})
	if renewed {
		// The waiter's first sample, its first Open, came before its
		// candidacy: a renewal of the holder's later than now is within
		// the waiter's chain.
		var chainBy, renewedAt int64
		if err := holderB.DB().QueryRowContext(ctxT(t), "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))").Scan(&chainBy); err != nil {
			t.Fatal(err)
		}
		id, err := strconv.ParseInt(holder.ID(), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		mustEventually(t, "a renewal of the holder's after the waiter's first sample", func() bool {
			err := holderB.DB().QueryRowContext(ctxT(t), "SELECT expires_us - ttl_us FROM simba_sessions WHERE id = ?", id).Scan(&renewedAt)
			return err == nil && renewedAt > chainBy
		})
		t.Logf("the holder renewed %v after the waiter's chain began at the latest", time.Duration(renewedAt-chainBy)*time.Microsecond)
	}
	srv.StepClock(5 * time.Second) // more than the TTL: every session looks expired
	select {
	case <-holder.Done():
	case <-time.After(opTimeout):
		t.Fatal("the holder's session still lives after the step")
	}
	deadline = hr.halt()
	select {
	case granted = <-got:
	case err := <-gotErr:
		t.Fatalf("the waiter: %v", err)
	case <-time.After(opTimeout):
		t.Fatalf("the waiter was not granted the lease within %v of the step", opTimeout)
	}
	steps, _ = mysql.StepsSeen(waiterB)
	return granted, deadline, steps
}
