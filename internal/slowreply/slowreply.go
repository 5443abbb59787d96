// Package slowreply is the late-reply fault scenario that every backend's
// tests run (TestSlowRepliesThenCut): a holder whose replies come late, not
// lost, and then a cut link. A deadline counted from a renewal's reply
// instead of its request is invisible while links are only cut; with the
// replies late by more than the drift margin, it overlaps the next term.
//
// One attempt: the holder talks to its server through an
// [faultproxy.Proxy], a second client directly. The proxy delays the
// holder's replies by Delay; once two renewals are confirmed through the
// delay, the link is cut (Blackhole) Delay/4 after the last one's reply
// came, where a deadline from the reply makes the largest difference. The
// holder's term must end, on its own clock, by the bound the backend gives
// (by default its last renewal's request + TTL - margin, at least Delay
// before the reply came: the bound is half way to the reply's), strictly
// before the direct client's term begins, and before the server freed its
// holding (check.AgainstGrants, I4); the next term's token is larger; the
// held replies, delivered after the heal, do not revive the ended term.
// An attempt whose term ended by itself before the cut is void, and Run
// tries again, at most three times.
package slowreply

import (
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/faultproxy"
)

// Attempts bounds the attempts of [Run]. On PostgreSQL about half the
// first attempts are void (the holder's first renewal through the delay
// not confirmed in time: 3 of 6 runs on a quiet machine, before and after
// the timeline change), so three attempts left the test failing about one
// run in eight; five leave it one in thirty.
const Attempts = 5

// Timeout bounds the waits of an attempt for a term or a new session.
const Timeout = 20 * time.Second

// Scenario is one backend's slow-reply test.
type Scenario struct {
	TTL, Margin, Delay time.Duration

	// Attempt sets up attempt number n: the holder's term begun through
	// the proxy and the direct client started, the delay not yet on.
	Attempt func(t *testing.T, n int) *Setup
}

// Setup is one attempt's parts, from the backend's test.
type Setup struct {
	Proxy  *faultproxy.Proxy // between the holder and its server
	Slow   *simba.Client     // the holder's client, through Proxy
	Holder *simba.Term       // its term
	Name   string            // the election's name

	// Next waits up to d for the direct client's term after the cut,
	// failing the test if none begins.
	Next func(d time.Duration) *simba.Term
	// Freed returns when the server freed the holder's holding, which
	// next (the direct client's term) needs; nil: next's start.
	Freed func(next *simba.Term) time.Time
	// Bound returns the latest instant a right term may end, given when
	// the last renewal's reply came and freed; nil: the renewal's request
	// + TTL - margin, halfway to the reply's (see the package doc).
	Bound func(renewed, freed time.Time) time.Time
	// Finish closes the clients and checks the history of the attempt
	// with the package's own log (I1, I2, stale writes).
	Finish func()
}

// Run plays s until an attempt is not void, at most [Attempts] times.
func Run(t *testing.T, s Scenario) {
	t.Helper()
	for n := range Attempts {
		if !attempt(t, s, n) {
			return
		}
	}
	t.Fatalf("%d attempts void: each time the holder's term ended by itself before the cut (the machine is too loaded for a %v TTL with replies %v late)",
		Attempts, s.TTL, s.Delay)
}

// attempt plays attempt n and reports whether it was void: the holder's
// term ended before the cut, which is then not what ended it.
func attempt(t *testing.T, s Scenario, n int) (void bool) {
	t.Helper()
	a := s.Attempt(t, n)
	holder, px := a.Holder, a.Proxy
	t.Cleanup(px.Heal) // before the clients close, if the test failed with the holder cut off

	px.DelayReplies(s.Delay)
	// Two renewals confirmed through the delay: the second was sent once
	// the delay was on, its reply Delay late.
	var renewed time.Time
	for i := range 2 {
		var ok bool
		if renewed, ok = awaitRenewal(holder, 3*s.TTL); !ok {
			if closed(holder.Revoked()) {
				t.Logf("attempt %d: the holder's term %d ended by itself with replies %v late, after %d renewals: void", n, holder.Token(), s.Delay, i)
				return true
			}
			t.Fatalf("attempt %d: no renewal of the holder confirmed within %v with replies %v late (deadline %v)", n, 3*s.TTL, s.Delay, holder.Deadline().Format(time.StampMicro))
		}
	}
	time.Sleep(time.Until(renewed.Add(s.Delay / 4)))
	session := a.Slow.SessionID()
	px.Blackhole()
	cutAt := time.Now()
	next := a.Next(Timeout)
	select {
	case <-holder.Revoked():
	case <-time.After(5 * time.Second):
		t.Fatalf("the cut holder's term %d was not revoked 5s after term %d began", holder.Token(), next.Token())
	}
	end := holder.Deadline()
	if end.Before(cutAt) {
		t.Logf("attempt %d: term %d of the slow holder ended %v before its cut, by itself: void", n, holder.Token(), cutAt.Sub(end))
		return true
	}
	freed := next.Start()
	if a.Freed != nil {
		freed = a.Freed(next)
	}
	t.Logf("replies %v late, cut %v after a renewal's reply: term %d of the slow holder ended %v after that reply, %v after the cut, %s the server freed its holding and %s term %d of the direct client began",
		s.Delay, cutAt.Sub(renewed).Round(time.Millisecond), holder.Token(), end.Sub(renewed).Round(time.Millisecond),
		end.Sub(cutAt).Round(time.Millisecond), Relative(end, freed), Relative(end, next.Start()), next.Token())
	// The last renewal confirmed was sent at least Delay before its reply
	// came (the proxy held the reply that long), so a right term ends by
	// renewed - Delay + TTL - margin; one counted from the reply ends at
	// renewed + TTL - margin. The default bound is half way.
	bound := renewed.Add(s.TTL - s.Margin - s.Delay/2)
	if a.Bound != nil {
		bound = a.Bound(renewed, freed)
	}
	if end.After(bound) {
		t.Errorf("term %d of the slow holder ended at %v, %v after the reply of its last renewal came and %s the server freed its holding at %v: want it to end by %v (the TTL %v less the margin %v after the renewal's request, sent at least %v before its reply)",
			holder.Token(), end.Format(time.StampMicro), end.Sub(renewed).Round(time.Millisecond), Relative(end, freed), freed.Format(time.StampMicro),
			bound.Format(time.StampMicro), s.TTL, s.Margin, s.Delay)
	}
	if gap := next.Start().Sub(end); gap <= 0 {
		t.Errorf("term %d of the direct client began at %v, %v before term %d of the cut slow holder ended", next.Token(), next.Start().Format(time.StampMicro), -gap, holder.Token())
	}
	if next.Token() <= holder.Token() {
		t.Errorf("token %d after %d", next.Token(), holder.Token())
	}
	_, errs := check.AgainstGrants(
		[]check.Term{{Name: a.Name, Token: holder.Token(), Start: holder.Start(), End: end}},
		[]check.Grant{{Name: a.Name, Token: holder.Token(), Start: holder.Start(), End: freed, Ended: true, Expired: true}})
	for _, err := range errs {
		t.Error(err)
	}
	// The held replies, delivered now, do not revive the ended term: the
	// holder has a session of its new link, and the last held reply is due.
	px.Heal()
	healed := time.Now()
	px.DelayReplies(0)
	for deadline := time.Now().Add(Timeout); ; time.Sleep(20 * time.Millisecond) {
		if id := a.Slow.SessionID(); id != "" && id != session {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow holder has no new session %v after the link healed", Timeout)
		}
	}
	time.Sleep(time.Until(healed.Add(s.Delay)))
	if holder.Valid() {
		t.Errorf("term %d of the slow holder valid again once its held replies came", holder.Token())
	}
	a.Finish()
	return false
}

// awaitRenewal waits up to d for term's deadline to move, a renewal
// confirmed, and returns when it saw it move; false if it did not, or the
// term ended.
func awaitRenewal(term *simba.Term, d time.Duration) (time.Time, bool) {
	was := term.Deadline()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if closed(term.Revoked()) {
			return time.Time{}, false
		}
		if term.Deadline().After(was) {
			return time.Now(), true
		}
	}
	return time.Time{}, false
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Relative says when a was, relative to b: "1.2s before", "3ms after".
func Relative(a, b time.Time) string {
	if d := b.Sub(a).Round(time.Millisecond); d >= 0 {
		return d.String() + " before"
	}
	return a.Sub(b).Round(time.Millisecond).String() + " after"
}
