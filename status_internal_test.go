package simba

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/records"
)

// TestHandOffTakesTheLastStatusItself: once the client has ended a term
// itself (here LeaderTask.Stop), the status changes that follow (the run's
// end) are left for the hand-off, which applies them and takes the last
// status for its release on its own goroutine: no worker is started, or
// woken, on the hand-off's path (issue 43). The status the release wrote
// says so: no holder, the run ended, the term ended "stopped".
//
// Starting a worker for every change (patch: in enqueueLocked, drop
// "&& !w.term.handOffComing()") fails with "workers started after the
// term was stopped: 1".
func TestHandOffTakesTheLastStatusItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		c, err := New(b.Node("a"), WithTTL(3*time.Second))
		require.NoError(t, err)
		defer c.Close()
		terms := make(chan *Term, 1)
		task, err := c.Election("e").RunWhileLeader(func(ctx context.Context, term *Term) error {
			select {
			case terms <- term:
			default:
			}
			<-ctx.Done()
			return nil
		})
		require.NoError(t, err)
		term := <-terms
		time.Sleep(time.Second) // the status is read and written
		synctest.Wait()
		w := term.status
		w.mu.Lock()
		before := w.workers
		w.mu.Unlock()
		task.Stop()
		<-task.Done()
		w.mu.Lock()
		require.Zero(t, w.workers-before, "workers started after the term was stopped: %d", w.workers-before)
		require.False(t, w.working)
		w.mu.Unlock()

		s, err := b.Node("reader").Open(t.Context(), backend.SessionOptions{TTL: 3 * time.Second})
		require.NoError(t, err)
		defer s.Close(context.Background())
		rec, err := s.(backend.Records).GetRecord(t.Context(), records.StatusKey("e"))
		require.NoError(t, err)
		var st records.Status
		require.NoError(t, records.Decode(rec.Value, &st))
		require.Nil(t, st.Holder, "the holder after the hand-off")
		require.NotNil(t, st.LastRun)
		require.NotEqual(t, records.Running, st.LastRun.Result, "the last run's result after the hand-off")
		require.NotEmpty(t, st.Terms)
		last := st.Terms[len(st.Terms)-1]
		require.Equal(t, term.Token(), last.Token)
		require.Equal(t, RevokeStopped.String(), last.Ended)
	})
}
