package zookeeper_test

import (
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/slowreply"
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

// TestSlowRepliesThenCut (package slowreply's scenario) delays every reply to the holder by slowDelay, lets
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
	slowreply.Run(t, slowreply.Scenario{TTL: slowTTL, Margin: slowMargin, Delay: slowDelay,
		Attempt: func(t *testing.T, attempt int) *slowreply.Setup {
			root := zktest.Root(t, addr)
			px, err := faultproxy.New(addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			var log termLog
			ch := make(chan started, 4)
			sessions := make(chan simba.SessionStarted, 8)
			// No status records from the holder: ZooKeeper counts the
			// session's timeout from the last packet it received, and a
			// health record written after the last renewal confirmed
			// (every 5s) would move the server's expiry, and the next
			// term, later than that renewal's request + TTL.
			slow := client(t, newBackendAt(t, px.Addr(), root), slowTTL, simba.WithStatus(false), simba.WithEventHandler(func(e simba.Event) {
				if s, ok := e.(simba.SessionStarted); ok {
					select {
					case sessions <- s:
					default:
					}
				}
			}))
			if _, err := slow.Election("slow").RunWhileLeader(log.task("slow", ch)); err != nil {
				t.Fatal(err)
			}
			holder := next(t, ch, slowreply.Timeout, "the slow holder's term")
			if s := <-sessions; s.TTL != slowTTL { // sent before the term began
				t.Fatalf("the slow holder's session %s was granted a TTL of %v, want %v", s.Session, s.TTL, slowTTL)
			}
			direct := client(t, newBackendAt(t, addr, root), slowTTL)
			if _, err := direct.Election("slow").RunWhileLeader(log.task("direct", ch)); err != nil {
				t.Fatal(err)
			}
			return &slowreply.Setup{Proxy: px, Slow: slow, Holder: holder.term, Name: "slow",
				// The server expired the cut holder's session, and with it
				// its candidacy, no later than the next term began: the
				// default Freed.
				Next: func(d time.Duration) *simba.Term {
					took := next(t, ch, d, "the direct client's take-over")
					if took.who != "direct" {
						t.Fatalf("term %d began on %s after the cut, want the direct client's", took.term.Token(), took.who)
					}
					return took.term
				},
				Finish: func() {
					for _, c := range []*simba.Client{slow, direct} {
						closeWithin(t, c)
					}
					log.check(t) // I1, I2
				},
			}
		},
	})
}
