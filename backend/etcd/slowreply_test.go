package etcd_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/check"
)

// The slow-reply test's timings. The holder's replies come slowDelay late:
// far more than the drift margin (slowTTL/10, the default: 400ms), so that
// a deadline counted from a renewal's reply instead of its request runs
// slowDelay - margin = 1s past etcd's expiry of the lease, which etcd
// applies within 500ms (its lessor looks for expired leases twice a
// second); and far less than what a correct client renews through: with
// replies that late the renewals go back to back, each confirmed
// slowDelay after it was sent and 2×slowDelay = 2.8s after the one before,
// against a deadline slowTTL - margin = 3.6s after it.
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
// next term's start: etcd freed the lease by then).
//
// With SIMBA_PLANT=deadline-from-reply (session.go: the deadline counted
// from the renewal's reply) it fails, three runs in three, with: term 3 of
// the slow holder ended at …56.895709, 3.598s after the reply of its last
// renewal came: want it to end by 2.9s after; term 7 of the direct client
// began 597ms before term 3 of the cut slow holder ended (and the same
// overlap as check.AgainstGrants' I4 and check.Terms' I1; 597–630ms over
// the three). Without it the term ends 2.2s after that reply, and 2.1s
// before the next term begins.
func TestSlowRepliesThenCut(t *testing.T) {
	srv := startServer(t)
	for attempt := range maxSlowAttempts {
		if !slowReplyAttempt(t, srv.Endpoints()[0], fmt.Sprintf("%sa%d/", testPrefix(t), attempt), attempt) {
			return
		}
	}
	t.Fatalf("%d attempts void: each time the holder's term ended by itself before the cut (the machine is too loaded for a %v TTL with replies %v late)",
		maxSlowAttempts, slowTTL, slowDelay)
}

// maxSlowAttempts bounds the attempts of TestSlowRepliesThenCut.
const maxSlowAttempts = 3

// slowReplyAttempt plays the test once, under a prefix of its own, and
// reports whether it was void: the holder's term ended before the cut,
// which is then not what ended it.
func slowReplyAttempt(t *testing.T, endpoint, prefix string, attempt int) (void bool) {
	px := newProxy(t, endpoint)
	log := newTermLog()
	slow := newNode(t, "slow", []string{px.Addr()}, prefix, slowTTL)
	t.Cleanup(px.Heal) // before the clients close, if the test failed with the holder cut off
	if _, err := slow.client.Election("slow").RunWhileLeader(log.task(slow.name)); err != nil {
		t.Fatal(err)
	}
	holder := log.next(t, slow.name, opTimeout)
	direct := newNode(t, "direct", []string{endpoint}, prefix, slowTTL)
	if _, err := direct.client.Election("slow").RunWhileLeader(log.task(direct.name)); err != nil {
		t.Fatal(err)
	}

	px.DelayReplies(slowDelay)
	// Two renewals confirmed through the delay: the second was sent once
	// the delay was on, its reply slowDelay late.
	var renewed time.Time
	for i := range 2 {
		var ok bool
		if renewed, ok = awaitRenewal(holder.term, 3*slowTTL); !ok {
			if closed(holder.term.Revoked()) {
				t.Logf("attempt %d: the holder's term %d ended by itself with replies %v late, after %d renewals: void", attempt, holder.term.Token(), slowDelay, i)
				return true
			}
			t.Fatalf("attempt %d: no renewal of the holder confirmed within %v with replies %v late (deadline %v)", attempt, 3*slowTTL, slowDelay, holder.term.Deadline().Format(time.StampMicro))
		}
	}
	time.Sleep(time.Until(renewed.Add(slowDelay / 4)))
	session := slow.client.SessionID()
	px.Blackhole()
	cutAt := time.Now()
	next := log.next(t, direct.name, opTimeout)
	if !waitFor(holder.ended, 5*time.Second) {
		t.Fatalf("the cut holder's term %d was not revoked 5s after term %d began", holder.term.Token(), next.term.Token())
	}
	end := holder.term.Deadline()
	if end.Before(cutAt) {
		t.Logf("attempt %d: term %d of the slow holder ended %v before its cut, by itself: void", attempt, holder.term.Token(), cutAt.Sub(end))
		return true
	}
	gap := next.start.Sub(end)
	t.Logf("replies %v late, cut %v after a renewal's reply: term %d of the slow holder ended %v after that reply, %v after the cut, %s term %d of the direct client began",
		slowDelay, cutAt.Sub(renewed).Round(time.Millisecond), holder.term.Token(), end.Sub(renewed).Round(time.Millisecond),
		end.Sub(cutAt).Round(time.Millisecond), relative(end, next.start), next.term.Token())
	// The last renewal confirmed was sent at least slowDelay before its
	// reply came (the proxy held the reply that long), so a right term
	// ends by renewed - slowDelay + TTL - margin; one counted from the
	// reply ends at renewed + TTL - margin. The bound is half way.
	if bound := renewed.Add(slowTTL - slowMargin - slowDelay/2); end.After(bound) {
		t.Errorf("term %d of the slow holder ended at %v, %v after the reply of its last renewal came: want it to end by %v after (the renewal was sent at least %v before its reply, and its term lasts the TTL %v less the margin %v after that)",
			holder.term.Token(), end.Format(time.StampMicro), end.Sub(renewed).Round(time.Millisecond), bound.Sub(renewed), slowDelay, slowTTL, slowMargin)
	}
	if gap <= 0 {
		t.Errorf("term %d of the direct client began at %v, %v before term %d of the cut slow holder ended", next.term.Token(), next.start.Format(time.StampMicro), -gap, holder.term.Token())
	}
	if next.term.Token() <= holder.term.Token() {
		t.Errorf("token %d after %d", next.term.Token(), holder.term.Token())
	}
	// I4 by the shared checker: etcd freed the cut holder's key (by
	// expiry) no later than the next term began.
	_, errs := check.AgainstGrants(
		[]check.Term{{Name: "slow", Token: holder.term.Token(), Start: holder.start, End: end}},
		[]check.Grant{{Name: "slow", Token: holder.term.Token(), Start: holder.start, End: next.start, Ended: true, Expired: true}})
	for _, err := range errs {
		t.Error(err)
	}
	// The held replies, delivered now, do not revive the ended term.
	px.Heal()
	px.DelayReplies(0)
	for deadline := time.Now().Add(opTimeout); ; time.Sleep(20 * time.Millisecond) {
		if id := slow.client.SessionID(); id != "" && id != session {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow holder has no new session %v after the link healed", opTimeout)
		}
	}
	if holder.term.Valid() {
		t.Errorf("term %d of the slow holder valid again once its held replies came", holder.term.Token())
	}
	for _, n := range []*node{slow, direct} {
		await.For(t, await.Returned(n.client.Close), closeWait, "node %s: Close did not return", n.name)
	}
	log.check(t) // I1, I2
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

// relative says when a was, relative to b: "1.2s before", "3ms after".
func relative(a, b time.Time) string {
	if d := b.Sub(a).Round(time.Millisecond); d >= 0 {
		return d.String() + " before"
	}
	return a.Sub(b).Round(time.Millisecond).String() + " after"
}
