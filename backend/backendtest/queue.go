package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/simba-go/simba/backend"
)

// The queue cases check queued candidacy (see backend.Session.Acquire):
// the oldest candidacy holds, the others wait in the order the server
// registered them, a candidacy whose Acquire gives up or whose session ends
// leaves the queue, and a re-Acquire queues at the back. They read the queue
// with backend.CandidateLister, which every backend must implement.

// lister returns s as a backend.CandidateLister, or stops the case.
func (h *harness) lister(s backend.Session) backend.CandidateLister {
	h.Helper()
	cl, ok := s.(backend.CandidateLister)
	if !ok {
		h.Fatalf("the session (%T) does not implement backend.CandidateLister: the queue cases read the queue of a lease with it, and every backend must implement it", s)
	}
	return cl
}

// queueWait bounds the wait for the queue of a lease to show a change made
// by sessions ss (a registration, a withdrawal, a hand-off).
func queueWait(ss ...backend.Session) time.Duration { return 2*maxTTL(ss...) + grace }

// wantQueue waits up to d until Candidates(name), read through cl, lists
// the sessions want, in that order; it reports the last listing if not.
func (h *harness) wantQueue(cl backend.CandidateLister, name string, want []backend.Session, d time.Duration, when string) bool {
	h.Helper()
	ids := make([]string, 0, len(want))
	for _, s := range want {
		ids = append(ids, s.ID())
	}
	return h.eventually(d, fmt.Sprintf("Candidates(%q) %s", name, when), func() error {
		got, err := cl.Candidates(h.op(), name)
		if err != nil {
			return err
		}
		if !slices.Equal(got, ids) {
			return fmt.Errorf("got %q, want %q (oldest first)", got, ids)
		}
		return nil
	})
}

// waiter is an Acquire running on another goroutine, with a ctx of its own.
type waiter struct {
	s      backend.Session
	name   string
	res    <-chan Acquired
	cancel context.CancelFunc
}

// wait starts s.Acquire(name) on another goroutine, with a ctx that ends
// on cancel, with the test, or after a bound far beyond any case's length.
func (h *harness) wait(s backend.Session, name string) *waiter {
	ctx, cancel := context.WithTimeout(h.Context(), 6*opTimeout)
	h.Cleanup(cancel)
	return &waiter{s: s, name: name, res: AcquireAsync(ctx, s, name), cancel: cancel}
}

// wantWaiting reports if w's Acquire has returned; a lease it got is
// released.
func (h *harness) wantWaiting(w *waiter, why string) bool {
	h.Helper()
	select {
	case r := <-w.res:
		if r.Lease != nil {
			h.Errorf("session %s: Acquire(%q) returned a lease (token %d) although %s", w.s.ID(), w.name, r.Lease.Token(), why)
			_ = r.Lease.Release(h.op())
		} else {
			h.Errorf("session %s: Acquire(%q) returned (error %v) although %s and it should still wait", w.s.ID(), w.name, r.Err, why)
		}
		return false
	default:
		return true
	}
}

// wantHolds waits up to d for w's Acquire to return a lease whose token is
// greater than after; it returns the lease, or nil after reporting why not.
func (h *harness) wantHolds(w *waiter, d time.Duration, after uint64, when string) backend.Lease {
	h.Helper()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-w.res:
		switch {
		case r.Err != nil:
			h.Errorf("session %s: waiting Acquire(%q) %s: %v", w.s.ID(), w.name, when, r.Err)
			return nil
		case r.Lease == nil:
			h.Errorf("session %s: waiting Acquire(%q) %s returned a nil lease and no error", w.s.ID(), w.name, when)
			return nil
		case r.Lease.Token() <= after:
			h.Errorf("session %s: waiting Acquire(%q) %s: token %d, want > %d (the previous holding's)", w.s.ID(), w.name, when, r.Lease.Token(), after)
		}
		return r.Lease
	case <-t.C:
		h.Errorf("session %s: waiting Acquire(%q) did not return within %v %s", w.s.ID(), w.name, d, when)
		return nil
	}
}

// wantGaveUp waits up to d for w's Acquire to return an error wrapping
// target (any error if target is nil) and no lease.
func (h *harness) wantGaveUp(w *waiter, d time.Duration, target error, when string) {
	h.Helper()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-w.res:
		switch {
		case r.Lease != nil:
			h.Errorf("session %s: waiting Acquire(%q) %s returned a lease (token %d), want an error", w.s.ID(), w.name, when, r.Lease.Token())
			_ = r.Lease.Release(h.op())
		case r.Err == nil:
			h.Errorf("session %s: waiting Acquire(%q) %s returned neither a lease nor an error", w.s.ID(), w.name, when)
		case target != nil && !errors.Is(r.Err, target):
			h.Errorf("session %s: waiting Acquire(%q) %s: error %v, want one wrapping %v", w.s.ID(), w.name, when, r.Err, target)
		}
	case <-t.C:
		h.Errorf("session %s: waiting Acquire(%q) did not return within %v %s", w.s.ID(), w.name, d, when)
	}
}

// release releases l, if not nil, and reports an error.
func (h *harness) release(l backend.Lease, what string) {
	h.Helper()
	if l != nil {
		h.wantNoErr(what, l.Release(h.op()))
	}
}

// testQueueFIFO: waiters are served in the order they registered, one
// hand-off at a time, with strictly increasing tokens.
func testQueueFIFO(h *harness) {
	a, b, c := h.open(), h.open(), h.open()
	cl := h.lister(a)
	d := queueWait(a, b, c)
	la := h.acquire(a, "fifo")
	h.wantQueue(cl, "fifo", []backend.Session{a}, d, "with one holder")
	wb := h.wait(b, "fifo")
	h.wantQueue(cl, "fifo", []backend.Session{a, b}, d, "with a holder and one waiter")
	wc := h.wait(c, "fifo")
	if !h.wantQueue(cl, "fifo", []backend.Session{a, b, c}, d, "with a holder and two waiters") {
		return
	}
	h.wantWaiting(wb, "another session holds the lease")
	h.wantWaiting(wc, "another session holds the lease")

	h.wantNoErr("Release by the holder", la.Release(h.op()))
	lb := h.wantHolds(wb, opTimeout, la.Token(), "after the holder released (the oldest waiter is served first)")
	if lb == nil {
		return
	}
	h.wantWaiting(wc, "the oldest waiter was served and holds the lease")
	h.wantQueue(cl, "fifo", []backend.Session{b, c}, d, "after the first hand-off")

	h.wantNoErr("Release by the second holder", lb.Release(h.op()))
	lc := h.wantHolds(wc, opTimeout, lb.Token(), "after the second holder released")
	if lc == nil {
		return
	}
	h.wantQueue(cl, "fifo", []backend.Session{c}, d, "after the second hand-off")
	h.release(lc, "Release by the third holder")
	h.wantQueue(cl, "fifo", nil, d, "after every holder released")
}

// testQueueLeaveOnContext: a waiting Acquire whose ctx ends returns an
// error wrapping ctx.Err() and leaves the queue; the holder's release then
// goes to the next waiter.
func testQueueLeaveOnContext(h *harness) {
	a, b, c := h.open(), h.open(), h.open()
	cl := h.lister(c)
	d := queueWait(a, b, c)
	la := h.acquire(a, "leave")
	wb := h.wait(b, "leave")
	h.wantQueue(cl, "leave", []backend.Session{a, b}, d, "with a holder and one waiter")
	wc := h.wait(c, "leave")
	if !h.wantQueue(cl, "leave", []backend.Session{a, b, c}, d, "with a holder and two waiters") {
		return
	}
	wb.cancel()
	h.wantGaveUp(wb, opTimeout, context.Canceled, "after its ctx was cancelled")
	h.wantQueue(cl, "leave", []backend.Session{a, c}, d, "after the first waiter's ctx was cancelled (its candidacy must leave the queue)")
	h.wantWaiting(wc, "another session holds the lease")

	h.wantNoErr("Release by the holder", la.Release(h.op()))
	lc := h.wantHolds(wc, opTimeout, la.Token(), "after the holder released, the waiter before it having left")
	h.wantQueue(cl, "leave", []backend.Session{c}, d, "after the hand-off")
	h.release(lc, "Release")
	h.wantQueue(cl, "leave", nil, d, "after the last holder released")
}

// testQueueLeaveOnClose: a waiting session that is closed leaves the
// queue, its Acquire returning ErrSessionDone; a holder whose session is
// closed hands the lease to the oldest waiter.
func testQueueLeaveOnClose(h *harness) {
	a, b, c, e := h.open(), h.open(), h.open(), h.open()
	cl := h.lister(e)
	d := queueWait(a, b, c, e)
	la := h.acquire(a, "close")
	ws := make(map[backend.Session]*waiter)
	for i, s := range []backend.Session{b, c, e} {
		ws[s] = h.wait(s, "close")
		if !h.wantQueue(cl, "close", append([]backend.Session{a}, []backend.Session{b, c, e}[:i+1]...), d, fmt.Sprintf("with a holder and %d waiters", i+1)) {
			return
		}
	}
	h.wantNoErr("Close of a waiting session", b.Close(h.op()))
	h.wantGaveUp(ws[b], opTimeout, backend.ErrSessionDone, "after its session was closed")
	h.wantQueue(cl, "close", []backend.Session{a, c, e}, d, "after a waiting session was closed (its candidacy must leave the queue)")
	h.wantWaiting(ws[c], "another session holds the lease")

	h.wantNoErr("Close of the holder's session", a.Close(h.op()))
	lc := h.wantHolds(ws[c], opTimeout, la.Token(), "after the holder's session was closed (the oldest waiter is served)")
	if lc == nil {
		return
	}
	h.waitClosed(la.Lost(), queueWait(a), "Lost of the holding of a closed session")
	h.wantWaiting(ws[e], "the oldest waiter holds the lease")
	h.wantQueue(cl, "close", []backend.Session{c, e}, d, "after the holder's session was closed")

	h.wantNoErr("Release", lc.Release(h.op()))
	le := h.wantHolds(ws[e], opTimeout, lc.Token(), "after the holder released")
	h.release(le, "Release")
}

// testQueueReacquire: a re-Acquire by the holder while another session
// waits ends the holding (Lost closes), serves the waiter, and queues at
// the back with a larger token.
func testQueueReacquire(h *harness) {
	a, b := h.open(), h.open()
	cl := h.lister(b)
	d := queueWait(a, b)
	la := h.acquire(a, "again")
	wb := h.wait(b, "again")
	if !h.wantQueue(cl, "again", []backend.Session{a, b}, d, "with a holder and one waiter") {
		return
	}
	wa := h.wait(a, "again") // the holder acquires again
	lb := h.wantHolds(wb, opTimeout, la.Token(), "after the holder acquired again (its re-Acquire queues behind)")
	if lb == nil {
		return
	}
	h.waitClosed(la.Lost(), d, "Lost of a holding replaced by a re-Acquire")
	h.wantErr("Release of the holding replaced by a re-Acquire", la.Release(h.op()), backend.ErrNotHeld)
	h.wantQueue(cl, "again", []backend.Session{b, a}, d, "after the re-Acquire (at the back)")
	h.wantWaiting(wa, "another session holds the lease")

	h.wantNoErr("Release by the waiter served", lb.Release(h.op()))
	la2 := h.wantHolds(wa, opTimeout, lb.Token(), "after the session served before it released")
	h.wantQueue(cl, "again", []backend.Session{a}, d, "after the last hand-off")
	h.release(la2, "Release")
}

// testQueueFencing: after a queued hand-off the deposed holder's token
// fences nothing (ErrConflict), the new holder's writes succeed, and the
// deposed holding's ReleaseWithRecords writes nothing.
func testQueueFencing(h *harness) {
	a, b := h.open(), h.open()
	ra, rb := h.records(a), h.records(b)
	cl := h.lister(a)
	d := queueWait(a, b)
	la := h.acquire(a, "qfence")
	fa := backend.Condition{Lease: "qfence", Token: la.Token()}
	_, err := ra.PutRecord(h.op(), "status/qfence", []byte("a"), fa)
	h.wantNoErr("fenced PutRecord by the holder", err)
	wb := h.wait(b, "qfence")
	if !h.wantQueue(cl, "qfence", []backend.Session{a, b}, d, "with a holder and one waiter") {
		return
	}
	// A waiting session holds nothing: the holder's token fences it out.
	_, err = rb.PutRecord(h.op(), "status/qfence", []byte("early"), fa)
	h.wantErr("fenced PutRecord by a waiting session with the holder's token", err, backend.ErrConflict)

	rel, canRelease := la.(backend.RecordReleaser)
	if canRelease {
		h.wantNoErr("ReleaseWithRecords by the holder", rel.ReleaseWithRecords(h.op(), []backend.Record{{Key: "status/qfence", Value: []byte("a done")}}))
	} else {
		h.wantNoErr("Release by the holder", la.Release(h.op()))
	}
	lb := h.wantHolds(wb, opTimeout, la.Token(), "after the holder released")
	if lb == nil {
		return
	}
	fb := backend.Condition{Lease: "qfence", Token: lb.Token()}

	_, err = ra.PutRecord(h.op(), "status/qfence", []byte("stale"), fa)
	h.wantErr("fenced PutRecord by the deposed holder", err, backend.ErrConflict)
	_, err = ra.PutRecord(h.op(), "fresh/qfence", []byte("stale"), fa)
	h.wantErr("fenced PutRecord of a new key by the deposed holder", err, backend.ErrConflict)
	h.wantErr("fenced DeleteRecord by the deposed holder", ra.DeleteRecord(h.op(), "status/qfence", fa), backend.ErrConflict)
	_, err = ra.PutRecord(h.op(), "status/qfence", []byte("stolen"), fb)
	h.wantErr("fenced PutRecord by the deposed holder's session with the new holder's token", err, backend.ErrConflict)
	r, err := rb.PutRecord(h.op(), "status/qfence", []byte("b"), fb)
	if h.wantNoErr("fenced PutRecord by the new holder", err) && r.Token != lb.Token() {
		h.Errorf("record token %d, want %d (the new holder's)", r.Token, lb.Token())
	}
	if canRelease {
		err := rel.ReleaseWithRecords(h.op(), []backend.Record{{Key: "status/qfence", Value: []byte("stale")}, {Key: "fresh/qfence", Value: []byte("stale")}})
		h.wantErr("ReleaseWithRecords of the deposed holding", err, backend.ErrNotHeld)
	}
	if got, err := rb.GetRecord(h.op(), "status/qfence"); h.wantNoErr("GetRecord", err) && (string(got.Value) != "b" || got.Token != lb.Token()) {
		h.Errorf("status/qfence = %q with token %d after the deposed holder's writes, want b with token %d", got.Value, got.Token, lb.Token())
	}
	_, err = rb.GetRecord(h.op(), "fresh/qfence")
	h.wantErr("GetRecord of a key only the deposed holder wrote", err, backend.ErrNoRecord)
	h.wantQueue(cl, "qfence", []backend.Session{b}, d, "after the deposed holder's writes")
	h.release(lb, "Release")
}

// testQueueHeldLeases: a lease with a holder and waiting candidacies is
// listed once by HeldLeases; once every candidacy has left, not at all.
func testQueueHeldLeases(h *harness) {
	a, b, c := h.open(), h.open(), h.open()
	lister, ok := c.(backend.LeaseLister)
	if !ok {
		h.Skip("the session does not implement backend.LeaseLister")
	}
	cl := h.lister(c)
	d := queueWait(a, b, c)
	held := func(want []string, when string) {
		h.Helper()
		h.eventually(d, fmt.Sprintf("HeldLeases(%q) %s", "hq.", when), func() error {
			names, err := lister.HeldLeases(h.op(), "hq.")
			if err != nil {
				return err
			}
			if !slices.Equal(names, want) {
				return fmt.Errorf("got %q, want %q", names, want)
			}
			return nil
		})
	}
	la := h.acquire(a, "hq.1")
	wb := h.wait(b, "hq.1")
	h.wantQueue(cl, "hq.1", []backend.Session{a, b}, d, "with a holder and one waiter")
	wc := h.wait(c, "hq.1")
	if !h.wantQueue(cl, "hq.1", []backend.Session{a, b, c}, d, "with a holder and two waiters") {
		return
	}
	held([]string{"hq.1"}, "with a holder and two waiters")
	wc.cancel()
	h.wantGaveUp(wc, opTimeout, context.Canceled, "after its ctx was cancelled")
	h.wantNoErr("Release", la.Release(h.op()))
	lb := h.wantHolds(wb, opTimeout, la.Token(), "after the holder released")
	held([]string{"hq.1"}, "after a hand-off")
	h.release(lb, "Release")
	held(nil, "after every candidacy left")
}

// testCandidates: Candidates lists nobody for an unknown name, and the
// holder first, whichever session asks.
func testCandidates(h *harness) {
	a, b := h.open(), h.open()
	ca, cb := h.lister(a), h.lister(b)
	d := queueWait(a, b)
	if got, err := ca.Candidates(h.op(), "nobody"); h.wantNoErr(`Candidates("nobody")`, err) && len(got) != 0 {
		h.Errorf("Candidates of a name never acquired = %q, want an empty list", got)
	}
	la := h.acquire(a, "cand")
	h.wantQueue(cb, "cand", []backend.Session{a}, d, "read by another session, with one holder")
	wb := h.wait(b, "cand")
	h.wantQueue(ca, "cand", []backend.Session{a, b}, d, "read by the holder, with one waiter")
	h.wantQueue(cb, "cand", []backend.Session{a, b}, d, "read by the waiter")
	h.wantNoErr("Release", la.Release(h.op()))
	lb := h.wantHolds(wb, opTimeout, la.Token(), "after the holder released")
	h.wantQueue(ca, "cand", []backend.Session{b}, d, "after the hand-off, read by the old holder")
	h.release(lb, "Release")
	h.wantQueue(cb, "cand", nil, d, "after the last holder released")
}
