package simba_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
)

func TestTermRecordsAreFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		a, na := node(t, b, "a", h)
		z, _ := node(t, b, "z", h)
		_, err := a.Election("ingest").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait()
		_, err = z.Election("ingest").RunWhileLeader(holdUntilRevoked("z", h))
		require.NoError(t, err)
		synctest.Wait()
		old := h.Terms()[0]
		ctx := t.Context()
		_, err = old.GetRecord(ctx, "cursor")
		assert.ErrorIs(t, err, backend.ErrNoRecord)
		require.NoError(t, old.PutRecord(ctx, "cursor", []byte("10")))
		v, err := old.GetRecord(ctx, "cursor")
		require.NoError(t, err)
		assert.Equal(t, "10", string(v))

		// a is cut off; its term ends, z takes over and writes.
		na.Partition()
		time.Sleep(2 * testTTL)
		require.Len(t, h.Terms(), 2)
		cur := h.Terms()[1]
		require.NoError(t, cur.PutRecord(ctx, "cursor", []byte("20")))
		assert.ErrorIs(t, old.PutRecord(ctx, "cursor", []byte("11")), simba.ErrTermExpired)
		v, err = cur.GetRecord(ctx, "cursor")
		require.NoError(t, err)
		assert.Equal(t, "20", string(v), "the deposed term never overwrote it")
		na.Heal()
		closeAll(t, a, z)
	})
}

func TestTermRecordsDuringTheHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h)
		final := make(chan error, 1)
		task, err := c.Election("stream").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			<-ctx.Done()
			// The final checkpoint, after the stop revoked the term.
			final <- term.PutRecord(context.Background(), "checkpoint", []byte("42"))
			return nil
		})
		require.NoError(t, err)
		synctest.Wait()
		task.Stop()
		await.For(t, task.Done(), testTTL, "the task's Stop did not complete within the TTL")
		require.NoError(t, await.For(t, final, testTTL, "the stopped run's final write did not return within the TTL"),
			"a stopped term may still write until its lease is released")
		term := h.Terms()[0]
		assert.ErrorIs(t, term.PutRecord(t.Context(), "checkpoint", []byte("43")), simba.ErrTermExpired, "not after the release")
		closeAll(t, c)
	})
}
