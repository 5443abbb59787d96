package etcd_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/slowreply"
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

// TestSlowRepliesThenCut (package slowreply's scenario) delays every reply to the holder by slowDelay, lets
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
	endpoint := srv.Endpoints()[0]
	slowreply.Run(t, slowreply.Scenario{TTL: slowTTL, Margin: slowMargin, Delay: slowDelay,
		Attempt: func(t *testing.T, attempt int) *slowreply.Setup {
			prefix := fmt.Sprintf("%sa%d/", testPrefix(t), attempt)
			px := newProxy(t, endpoint)
			log := newTermLog()
			slow := newNode(t, "slow", []string{px.Addr()}, prefix, slowTTL)
			if _, err := slow.client.Election("slow").RunWhileLeader(log.task(slow.name)); err != nil {
				t.Fatal(err)
			}
			holder := log.next(t, slow.name, slowreply.Timeout)
			direct := newNode(t, "direct", []string{endpoint}, prefix, slowTTL)
			if _, err := direct.client.Election("slow").RunWhileLeader(log.task(direct.name)); err != nil {
				t.Fatal(err)
			}
			return &slowreply.Setup{Proxy: px, Slow: slow.client, Holder: holder.term, Name: "slow",
				// etcd freed the cut holder's key (by expiry) no later
				// than the next term began: the default Freed.
				Next: func(d time.Duration) *simba.Term { return log.next(t, direct.name, d).term },
				Finish: func() {
					for _, n := range []*node{slow, direct} {
						await.For(t, await.Returned(n.client.Close), closeWait, "node %s: Close did not return", n.name)
					}
					log.check(t) // I1, I2
				},
			}
		},
	})
}
