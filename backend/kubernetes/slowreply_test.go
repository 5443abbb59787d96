package kubernetes_test

import (
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/kubetest"
)

// The slow-reply test's timings. The holder's replies come slowDelay late:
// far more than the drift margin (slowTTL/10, the default: 400ms), so that
// a deadline counted from a renewal's reply instead of its request runs
// slowDelay - margin = 1s past that request + TTL, and 600ms past the
// contender's delete of the session (TTL + TTL/10 after it first saw the
// renewal's write); and far less than what a correct client renews
// through: with replies that late the renewals go back to back, each
// confirmed slowDelay after it was sent and 2×slowDelay = 2.8s after the
// one before, against a deadline slowTTL - margin = 3.6s after it.
const (
	slowTTL    = 4 * time.Second
	slowMargin = slowTTL / 10
	slowDelay  = 1400 * time.Millisecond
)

// TestSlowRepliesThenCut delays every reply from the API server to the
// holder by slowDelay, lets it renew through that, and then cuts its link
// (Blackhole), slowDelay/4 after a renewal's reply came: its term must
// end, on its own clock, by the TTL less the margin after that renewal was
// sent, which is at least slowDelay before its reply came; before the
// server freed its holding (grantLog; check.AgainstGrants, I4); and
// strictly before the directly connected client's term begins (I1).
//
// The holder's backend is blind to its own ends of the session
// ([overstating], with nothing overstated): this backend ends a session at
// its last renewal's start + TTL on its own, which ends the client's terms
// in time whatever deadline the client computed. What is tested is the
// client's own deadline, as on the other backends.
//
// With SIMBA_PLANT=deadline-from-reply (session.go: the deadline counted
// from the renewal's reply) it fails, three runs in three, with: term 1 of
// the slow holder ended at …25.481838, 3.596s after the reply of its last
// renewal came: want it to end by 2.9s after; check.AgainstGrants' I4:
// valid 588ms after the server freed the holding; and check.Terms' I1:
// terms 1 and 2 overlap by 577ms (569–577ms over the three). Without it
// the term ends 2.2s after that reply, and 2.2s before the server frees
// the holding.
func TestSlowRepliesThenCut(t *testing.T) {
	srv := kubetest.Start(t)
	for attempt := range maxSlowAttempts {
		if !slowReplyAttempt(t, srv, attempt) {
			return
		}
	}
	t.Fatalf("%d attempts void: each time the holder's term ended by itself before the cut (the machine is too loaded for a %v TTL with replies %v late)",
		maxSlowAttempts, slowTTL, slowDelay)
}

// maxSlowAttempts bounds the attempts of TestSlowRepliesThenCut.
const maxSlowAttempts = 3

// slowReplyAttempt plays the test once, in a namespace of its own, and
// reports whether it was void: the holder's term ended before the cut,
// which is then not what ended it.
func slowReplyAttempt(t *testing.T, srv *kubetest.Server, attempt int) (void bool) {
	ns := srv.Namespace(t)
	grant := watchGrants(t, srv, ns)
	log := newTermLog()
	px, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	start := func(name string, b *kubernetes.Backend, blind bool) *simba.Client {
		t.Cleanup(func() { b.Close() })
		var sb backend.Backend = b
		if blind {
			sb = &overstating{Backend: b}
		}
		c, err := simba.New(sb, simba.WithTTL(slowTTL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			px.Heal() // a test that failed left the holder cut off
			await.For(t, await.Returned(c.Close), closeWait, "client %s: Close did not return", name)
		})
		if _, err := c.Election("x").RunWhileLeader(log.Task(name, c)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	sb, err := kubernetes.New(srv.ConfigVia(px.Addr(), srv.Admin()), kubernetes.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	slow := start("slow", sb, true)
	holder := log.Next("slow", opTimeout)
	if holder == nil {
		t.Fatalf("attempt %d: no term of the slow holder within %v", attempt, opTimeout)
	}
	db, err := kubernetes.New(srv.Admin(), kubernetes.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	direct := start("direct", db, false)

	px.DelayReplies(slowDelay)
	// Two renewals confirmed through the delay: the second was sent once
	// the delay was on, its reply slowDelay late.
	var renewed time.Time
	for i := range 2 {
		var ok bool
		if renewed, ok = awaitRenewal(holder.Term, 3*slowTTL); !ok {
			if closedNow(holder.Term.Revoked()) {
				t.Logf("attempt %d: the holder's term %d ended by itself with replies %v late, after %d renewals: void", attempt, holder.Term.Token(), slowDelay, i)
				return true
			}
			t.Fatalf("attempt %d: no renewal of the holder confirmed within %v with replies %v late (deadline %v)", attempt, 3*slowTTL, slowDelay, holder.Term.Deadline().Format(time.StampMicro))
		}
	}
	time.Sleep(time.Until(renewed.Add(slowDelay / 4)))
	px.Blackhole()
	cutAt := time.Now()
	next := log.Next("direct", opTimeout)
	if next == nil {
		t.Fatalf("attempt %d: no take-over by the direct client within %v of the cut", attempt, opTimeout)
	}
	select {
	case <-holder.Term.Revoked():
	case <-time.After(5 * time.Second):
		t.Fatalf("the cut holder's term %d was not revoked 5s after term %d began", holder.Term.Token(), next.Term.Token())
	}
	end := holder.Term.Deadline()
	if end.Before(cutAt) {
		t.Logf("attempt %d: term %d of the slow holder ended %v before its cut, by itself: void", attempt, holder.Term.Token(), cutAt.Sub(end))
		return true
	}
	var freed time.Time
	if !eventually(opTimeout, func() bool { var ok bool; freed, ok = grant.ended(holder.Term.Token(), holder.Session); return ok }) {
		t.Fatalf("the holding of token %d by session %s not seen ended within %v after term %d began", holder.Term.Token(), holder.Session, opTimeout, next.Term.Token())
	}
	t.Logf("replies %v late, cut %v after a renewal's reply: term %d of the slow holder ended %v after that reply, %v after the cut, %s the server freed its holding and %s term %d of the direct client began",
		slowDelay, cutAt.Sub(renewed).Round(time.Millisecond), holder.Term.Token(), end.Sub(renewed).Round(time.Millisecond),
		end.Sub(cutAt).Round(time.Millisecond), relative(end, freed), relative(end, next.Term.Start()), next.Term.Token())
	// The last renewal confirmed was sent at least slowDelay before its
	// reply came (the proxy held the reply that long), so a right term
	// ends by renewed - slowDelay + TTL - margin; one counted from the
	// reply ends at renewed + TTL - margin. The bound is half way.
	if bound := renewed.Add(slowTTL - slowMargin - slowDelay/2); end.After(bound) {
		t.Errorf("term %d of the slow holder ended at %v, %v after the reply of its last renewal came: want it to end by %v after (the renewal was sent at least %v before its reply, and its term lasts the TTL %v less the margin %v after that)",
			holder.Term.Token(), end.Format(time.StampMicro), end.Sub(renewed).Round(time.Millisecond), bound.Sub(renewed), slowDelay, slowTTL, slowMargin)
	}
	if next.Term.Token() <= holder.Term.Token() {
		t.Errorf("token %d after %d", next.Term.Token(), holder.Term.Token())
	}
	_, errs := check.AgainstGrants(
		[]check.Term{{Name: "x", Token: holder.Term.Token(), Start: holder.Term.Start(), End: end}},
		[]check.Grant{{Name: "x", Token: holder.Term.Token(), Start: holder.Term.Start(), End: freed, Ended: true, Expired: true}})
	for _, err := range errs {
		t.Error(err)
	}
	// The held replies, delivered now, do not revive the ended term.
	px.Heal()
	px.DelayReplies(0)
	if !eventually(opTimeout, func() bool { id := slow.SessionID(); return id != "" && id != holder.Session }) {
		t.Fatalf("the slow holder has no new session %v after the link healed", opTimeout)
	}
	if holder.Term.Valid() {
		t.Errorf("term %d of the slow holder valid again once its held replies came", holder.Term.Token())
	}
	for _, c := range []*simba.Client{slow, direct} {
		await.For(t, await.Returned(c.Close), closeWait, "a client's Close did not return")
	}
	for _, err := range log.CheckTerms() { // I1, I2
		t.Error(err)
	}
	// No check.StaleWrites here: this backend's writes are ordered by
	// their answers (staleWrites), and a write the server applied before
	// the cut is answered slowDelay later, or after the heal: after writes
	// it came before.
	return false
}

// awaitRenewal waits up to d for term's deadline to move, a renewal
// confirmed, and returns when it saw it move; false if it did not, or the
// term ended.
func awaitRenewal(term *simba.Term, d time.Duration) (time.Time, bool) {
	was := term.Deadline()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if closedNow(term.Revoked()) {
			return time.Time{}, false
		}
		if term.Deadline().After(was) {
			return time.Now(), true
		}
	}
	return time.Time{}, false
}

// closedNow reports whether ch is closed.
func closedNow(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// relative says when a was, relative to b: "1.2s before", "3ms after".
func relative(a, b time.Time) string {
	if d := b.Sub(a).Round(time.Millisecond); d >= 0 {
		return d.String() + " before"
	}
	return a.Sub(b).Round(time.Millisecond).String() + " after"
}
