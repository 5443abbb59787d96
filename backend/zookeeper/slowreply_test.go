package zookeeper_test

import (
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/internal/check"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/zktest"
)

// The slow-reply test's timings. The session timeout is the server's
// largest (20 ticks of 200ms), so the granted TTL is the one asked for.
// The holder's replies come slowDelay late: far more than the drift margin
// (slowTTL/10, the default: 400ms), so that a deadline counted from a
// renewal's reply instead of its request runs slowDelay - margin = 1s
// past the server's expiry of the session, which it applies within a tick;
// and far less than what a correct client renews through: with replies
// that late the renewals go back to back, each confirmed slowDelay after
// it was sent and 2×slowDelay = 2.8s after the one before, against a
// deadline slowTTL - margin = 3.6s after it; and less than the 2/3 of the
// timeout (2.67s) after which the backend gives up on a connection whose
// request has had no answer.
const (
	slowTTL    = 4 * time.Second
	slowMargin = slowTTL / 10
	slowDelay  = 1400 * time.Millisecond
)

// TestSlowRepliesThenCut delays every reply to the holder by slowDelay, lets
// it renew through that, and then cuts its link (Blackhole), slowDelay/4
// after a renewal's reply came: its term must end, on its own clock, by
// the TTL less the margin after that renewal was sent, which is at least
// slowDelay before its reply came; and strictly before the directly
// connected client's term begins (I1, and I4 with the holding's end the
// next term's start: the server expired the session by then).
//
// With SIMBA_PLANT=deadline-from-reply (session.go: the deadline counted
// from the renewal's reply) it fails, three runs in three, with: term
// 20182 of the slow holder ended at …39.728553, 3.599s after the reply of
// its last renewal came: want it to end by 2.9s after; and, as
// check.AgainstGrants' I4 and check.Terms' I1, terms 20182 and 20184
// overlap by 810ms (778–957ms over the three). Without it the term ends
// 2.2s after that reply, and 1.9–2.0s before the next term begins.
func TestSlowRepliesThenCut(t *testing.T) {
	t.Parallel()
	addr := zktest.Addr(t)
	for attempt := range maxSlowAttempts {
		if !slowReplyAttempt(t, addr, zktest.Root(t, addr), attempt) {
			return
		}
	}
	t.Fatalf("%d attempts void: each time the holder's term ended by itself before the cut (the machine is too loaded for a %v TTL with replies %v late)",
		maxSlowAttempts, slowTTL, slowDelay)
}

// maxSlowAttempts bounds the attempts of TestSlowRepliesThenCut.
const maxSlowAttempts = 3

// slowReplyAttempt plays the test once, under a root of its own, and
// reports whether it was void: the holder's term ended before the cut,
// which is then not what ended it.
func slowReplyAttempt(t *testing.T, addr, root string, attempt int) (void bool) {
	px, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	var log termLog
	ch := make(chan started, 4)
	sessions := make(chan simba.SessionStarted, 8)
	// No status records from the holder: ZooKeeper counts the session's
	// timeout from the last packet it received, and a health record written
	// after the last renewal confirmed (every 5s) would move the server's
	// expiry, and the next term, later than that renewal's request + TTL.
	slow := client(t, newBackendAt(t, px.Addr(), root), slowTTL, simba.WithStatus(false), simba.WithEventHandler(func(e simba.Event) {
		if s, ok := e.(simba.SessionStarted); ok {
			select {
			case sessions <- s:
			default:
			}
		}
	}))
	t.Cleanup(px.Heal) // before the clients close, if the test failed with the holder cut off
	if _, err := slow.Election("slow").RunWhileLeader(log.task("slow", ch)); err != nil {
		t.Fatal(err)
	}
	holder := next(t, ch, opTimeout, "the slow holder's term")
	if s := <-sessions; s.TTL != slowTTL { // sent before the term began
		t.Fatalf("the slow holder's session %s was granted a TTL of %v, want %v", s.Session, s.TTL, slowTTL)
	}
	direct := client(t, newBackendAt(t, addr, root), slowTTL)
	if _, err := direct.Election("slow").RunWhileLeader(log.task("direct", ch)); err != nil {
		t.Fatal(err)
	}

	px.DelayReplies(slowDelay)
	// Two renewals confirmed through the delay: the second was sent once
	// the delay was on, its reply slowDelay late.
	var renewed time.Time
	for i := range 2 {
		var ok bool
		if renewed, ok = awaitRenewal(holder.term, 3*slowTTL); !ok {
			if closedNow(holder.term.Revoked()) {
				t.Logf("attempt %d: the holder's term %d ended by itself with replies %v late, after %d renewals: void", attempt, holder.term.Token(), slowDelay, i)
				return true
			}
			t.Fatalf("attempt %d: no renewal of the holder confirmed within %v with replies %v late (deadline %v)", attempt, 3*slowTTL, slowDelay, holder.term.Deadline().Format(time.StampMicro))
		}
	}
	time.Sleep(time.Until(renewed.Add(slowDelay / 4)))
	session := slow.SessionID()
	px.Blackhole()
	cutAt := time.Now()
	took := next(t, ch, opTimeout, "the direct client's take-over")
	if took.who != "direct" {
		t.Fatalf("term %d began on %s after the cut, want the direct client's", took.term.Token(), took.who)
	}
	select {
	case <-holder.term.Revoked():
	case <-time.After(5 * time.Second):
		t.Fatalf("the cut holder's term %d was not revoked 5s after term %d began", holder.term.Token(), took.term.Token())
	}
	end := holder.term.Deadline()
	if end.Before(cutAt) {
		t.Logf("attempt %d: term %d of the slow holder ended %v before its cut, by itself: void", attempt, holder.term.Token(), cutAt.Sub(end))
		return true
	}
	start := took.term.Start()
	t.Logf("replies %v late, cut %v after a renewal's reply: term %d of the slow holder ended %v after that reply, %v after the cut, %s term %d of the direct client began",
		slowDelay, cutAt.Sub(renewed).Round(time.Millisecond), holder.term.Token(), end.Sub(renewed).Round(time.Millisecond),
		end.Sub(cutAt).Round(time.Millisecond), relative(end, start), took.term.Token())
	// The last renewal confirmed was sent at least slowDelay before its
	// reply came (the proxy held the reply that long), so a right term
	// ends by renewed - slowDelay + TTL - margin; one counted from the
	// reply ends at renewed + TTL - margin. The bound is half way.
	if bound := renewed.Add(slowTTL - slowMargin - slowDelay/2); end.After(bound) {
		t.Errorf("term %d of the slow holder ended at %v, %v after the reply of its last renewal came: want it to end by %v after (the renewal was sent at least %v before its reply, and its term lasts the TTL %v less the margin %v after that)",
			holder.term.Token(), end.Format(time.StampMicro), end.Sub(renewed).Round(time.Millisecond), bound.Sub(renewed), slowDelay, slowTTL, slowMargin)
	}
	if took.term.Token() <= holder.term.Token() {
		t.Errorf("token %d after %d", took.term.Token(), holder.term.Token())
	}
	// I4 by the shared checker: the server expired the cut holder's
	// session, and with it its candidacy, no later than the next term
	// began.
	_, errs := check.AgainstGrants(
		[]check.Term{{Name: "slow", Token: holder.term.Token(), Start: holder.term.Start(), End: end}},
		[]check.Grant{{Name: "slow", Token: holder.term.Token(), Start: holder.term.Start(), End: start, Ended: true, Expired: true}})
	for _, err := range errs {
		t.Error(err)
	}
	// The held replies, delivered now, do not revive the ended term.
	px.Heal()
	px.DelayReplies(0)
	for deadline := time.Now().Add(opTimeout); ; time.Sleep(20 * time.Millisecond) {
		if id := slow.SessionID(); id != "" && id != session {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow holder has no new session %v after the link healed", opTimeout)
		}
	}
	if holder.term.Valid() {
		t.Errorf("term %d of the slow holder valid again once its held replies came", holder.term.Token())
	}
	for _, c := range []*simba.Client{slow, direct} {
		closeWithin(t, c)
	}
	log.check(t) // I1, I2
	return false
}

// opTimeout bounds the waits of TestSlowRepliesThenCut for a term.
const opTimeout = 20 * time.Second

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
