package kubernetes_test

import (
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/kubetest"
	"github.com/simba-go/simba/internal/slowreply"
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

// TestSlowRepliesThenCut (package slowreply's scenario) delays every reply from the API server to the
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
	slowreply.Run(t, slowreply.Scenario{TTL: slowTTL, Margin: slowMargin, Delay: slowDelay,
		Attempt: func(t *testing.T, attempt int) *slowreply.Setup { return slowReplyAttempt(t, srv, attempt) }})
}

// slowReplyAttempt sets up an attempt of TestSlowRepliesThenCut, in a
// namespace of its own.
func slowReplyAttempt(t *testing.T, srv *kubetest.Server, attempt int) *slowreply.Setup {
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
	holder := log.Next("slow", slowreply.Timeout)
	if holder == nil {
		t.Fatalf("attempt %d: no term of the slow holder within %v", attempt, slowreply.Timeout)
	}
	db, err := kubernetes.New(srv.Admin(), kubernetes.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	direct := start("direct", db, false)
	return &slowreply.Setup{Proxy: px, Slow: slow, Holder: holder.Term, Name: "x",
		Next: func(d time.Duration) *simba.Term {
			next := log.Next("direct", d)
			if next == nil {
				t.Fatalf("attempt %d: no take-over by the direct client within %v of the cut", attempt, d)
			}
			return next.Term
		},
		// The contender's delete of the holder's session, as the test's
		// own list-and-watch saw it.
		Freed: func(next *simba.Term) time.Time {
			var freed time.Time
			if !eventually(slowreply.Timeout, func() bool { var ok bool; freed, ok = grant.ended(holder.Term.Token(), holder.Session); return ok }) {
				t.Fatalf("the holding of token %d by session %s not seen ended within %v after term %d began", holder.Term.Token(), holder.Session, slowreply.Timeout, next.Token())
			}
			return freed
		},
		Finish: func() {
			for _, c := range []*simba.Client{slow, direct} {
				await.For(t, await.Returned(c.Close), closeWait, "a client's Close did not return")
			}
			for _, err := range log.CheckTerms() { // I1, I2
				t.Error(err)
			}
			// No check.StaleWrites here: this backend's writes are
			// ordered by their answers (staleWrites), and a write the
			// server applied before the cut is answered slowDelay later,
			// or after the heal: after writes it came before.
		},
	}
}
