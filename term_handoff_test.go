package simba_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
)

// A stopped term's HandOffDeadline is the deadline it had at the stop,
// fixed while renewals go on, and the lease is released exactly then to a
// run that ignores its cancellation; once released (and for a term that
// has not been stopped but lost) it is Deadline, an instant that passed.
func TestTermHandOffDeadline(t *testing.T) {
	t.Run("StoppedIgnoringCancellation", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newStandoff(t, 2500*time.Millisecond) // z starts between renewals
			b, h, obs, release, a, z, task := s.b, s.h, s.obs, s.release, s.a, s.z, s.task
			term := h.Terms()[0]
			capAt := term.Deadline()
			assert.Equal(t, capAt, term.HandOffDeadline(), "a valid term's hand-off deadline is its Deadline")
			assert.True(t, capAt.After(time.Now()), "the deadline %v of a valid term is not in the future", capAt)

			stopAt := time.Now()
			task.Stop()
			stopped := task.Done()
			synctest.Wait()
			assert.False(t, term.Valid(), "the term is valid after Stop")
			assert.Equal(t, stopAt, term.Deadline(), "Deadline after Stop: the instant the term stopped being valid")
			assert.Equal(t, capAt, term.HandOffDeadline(), "HandOffDeadline after Stop: the deadline at the stop")

			// The session renews on; the horizon of the stopped term does not move.
			time.Sleep(time.Until(capAt) - time.Millisecond)
			synctest.Wait()
			assert.Equal(t, capAt, term.HandOffDeadline(), "HandOffDeadline moved with the renewals after the stop")
			_, token, held := b.Holder("e")
			assert.True(t, held && token == term.Token(), "the lease went before the hand-off deadline (held %v, token %d)", held, token)

			time.Sleep(time.Millisecond)
			synctest.Wait()
			g := grantOf(t, b, "e", term.Token())
			assert.True(t, g.Ended && g.Reason == "released", "lease not released at the hand-off deadline: ended %v, %q", g.Ended, g.Reason)
			assert.Equal(t, capAt, g.End, "the lease released at +%v, want the hand-off deadline at +%v", g.End.Sub(stopAt), capAt.Sub(stopAt))
			assert.Equal(t, stopAt, term.HandOffDeadline(), "HandOffDeadline once the lease is released: Deadline, which has passed")
			require.Len(t, h.Terms(), 2, "z did not take over at the hand-off deadline")

			close(release)
			await.For(t, stopped, time.Second, "Stop did not complete once the run returned")
			closeAll(t, a, z)
			handOffOrder(t, obs, b)
			h.CheckTerms(t, b)
		})
	})
	t.Run("CleanUpBoundByIt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := memory.New()
			defer b.Close()
			h := newHistory()
			c, _ := node(t, b, "a", h)
			type seen struct {
				horizon, deadline time.Time
				err               error
			}
			cleanUp := make(chan seen, 1)
			task, err := c.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
				h.SawTerm("a", term)
				<-ctx.Done()
				wctx, cancel := context.WithDeadline(context.Background(), term.HandOffDeadline())
				defer cancel()
				<-wctx.Done() // a clean-up that takes all the time it has
				cleanUp <- seen{term.HandOffDeadline(), term.Deadline(), term.PutRecord(context.Background(), "checkpoint", []byte("1"))}
				return nil
			})
			require.NoError(t, err)
			time.Sleep(1500 * time.Millisecond)
			synctest.Wait()
			term := h.Terms()[0]
			capAt := term.Deadline()
			stopAt := time.Now()
			task.Stop()
			stopped := task.Done()
			s := <-cleanUp
			assert.Equal(t, capAt, time.Now(), "the clean-up's ctx did not end at the hand-off deadline")
			assert.Equal(t, stopAt, s.deadline)
			// At the horizon the lease is no longer guaranteed: the cap
			// hands it off then, and the write is refused.
			assert.Equal(t, stopAt, s.horizon, "HandOffDeadline at the horizon: passed")
			assert.ErrorIs(t, s.err, simba.ErrTermExpired, "a write at the horizon")
			await.For(t, stopped, time.Second, "Stop did not complete once the run returned")
			closeAll(t, c)
		})
	})
	t.Run("Lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := memory.New()
			defer b.Close()
			h := newHistory()
			c, n := node(t, b, "a", h)
			_, err := c.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
			require.NoError(t, err)
			synctest.Wait()
			term := h.Terms()[0]
			n.Partition()
			<-term.Revoked()
			assert.Equal(t, term.Deadline(), term.HandOffDeadline(), "a lost term has no hand-off to wait for")
			assert.False(t, term.HandOffDeadline().After(time.Now()), "a lost term's hand-off deadline %v is in the future", term.HandOffDeadline())
			n.Heal()
			closeAll(t, c)
		})
	})
}

// HandOffDeadline bounds the clean-up of a stopped term: the lease stays
// the term's until then, or until the function returns.
func ExampleTerm_HandOffDeadline() {
	b := memory.New()
	defer b.Close()
	client, _ := simba.New(b)
	defer client.Close()

	running := make(chan struct{})
	task, _ := client.Election("stream").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		close(running)
		<-ctx.Done() // stopped: the term is no longer valid...
		fmt.Println("valid after the stop:", term.Valid())
		// ...but the lease is still its own until the hand-off deadline.
		left := time.Until(term.HandOffDeadline())
		fmt.Println("time left for the final checkpoint:", left > 0)
		wctx, cancel := context.WithDeadline(context.Background(), term.HandOffDeadline())
		defer cancel()
		fmt.Println("final checkpoint:", term.PutRecord(wctx, "checkpoint", []byte("42")))
		return nil
	})
	<-running
	task.Stop()
	<-task.Done()
	// Output:
	// valid after the stop: false
	// time left for the final checkpoint: true
	// final checkpoint: <nil>
}
