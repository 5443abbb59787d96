package simba_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
)

// TestCatchUpWindowAfterFailOver: FixedRate(1m) after an initial delay of
// 30s, MisfireRunOnce, a catch-up window of 150s. a runs at 30s and 90s,
// plans 150s and crashes at 100s; z takes over at 430s: the starts at
// 150s, 210s and 270s are older than the window (skipped), 330s and 390s
// are within it: one catch-up run now for 390s, 330s skipped (misfire).
func TestCatchUpWindowAfterFailOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		log := &infoLog{}
		s := simba.FixedRate(time.Minute).WithInitialDelay(30 * time.Second).WithMisfire(simba.MisfireRunOnce).WithCatchUpWindow(150 * time.Second)
		ca, na := node(t, b, "a", h, simba.WithMemberID("a"))
		_, err := ca.Election("report").Schedule(s, log.task("a", h, nil))
		require.NoError(t, err)
		time.Sleep(100 * time.Second)
		origin := h.Terms()[0].Start()
		na.Crash()
		closed := await.Returned(ca.Close)
		time.Sleep(330 * time.Second)

		cz, _ := node(t, b, "z", h, simba.WithMemberID("z"))
		_, err = cz.Election("report").Schedule(s, log.task("z", h, nil))
		require.NoError(t, err)
		time.Sleep(45 * time.Second)
		runs := log.since(origin.Add(400 * time.Second))
		require.Len(t, runs, 2)
		assert.Equal(t, origin.Add(430*time.Second), runs[0].at, "the catch-up run at once")
		assert.Equal(t, simba.SourceMisfire, runs[0].info.Source)
		assert.Equal(t, 1, runs[0].info.Attempt)
		assert.WithinDuration(t, origin.Add(390*time.Second), runs[0].info.Planned, 0, "it stands for the latest start missed")
		assert.Equal(t, origin.Add(460*time.Second), runs[1].at, "then z's own plan, after its initial delay")
		want := []skipAt{
			{simba.SkipCatchUpWindow, 3, 150 * time.Second, 270 * time.Second},
			{simba.SkipMisfire, 1, 330 * time.Second, 330 * time.Second},
		}
		assert.Equal(t, want, skipsOf(h, origin))
		closeAll(t, cz)
		checkSkippedHistory(t, b.Records(), "report", want, origin)
		await.For(t, closed, time.Second, "Close of crashed a")
	})
}

// TestCatchUpWindowAfterDisable: the starts missed while an operator had
// the job disabled are skipped, the older ones for the catch-up window,
// the others as disabled (MisfireSkip); counted by
// simba.schedule.skipped by reason.
func TestCatchUpWindowAfterDisable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, mopt := newMeterReader(t)
		b := memory.New()
		defer b.Close()
		h := newHistory()
		log := &infoLog{}
		c, _ := node(t, b, "a", h, mopt)
		s := simba.FixedRate(time.Minute).WithCatchUpWindow(150 * time.Second)
		_, err := c.Election("report").Schedule(s, log.task("a", h, nil))
		require.NoError(t, err)
		time.Sleep(70 * time.Second) // ran at 0s and 60s; plans 120s
		origin := h.Terms()[0].Start()
		a := openAdmin(t, b)
		require.NoError(t, a.Disable(t.Context(), "report", "maintenance"))
		time.Sleep(360 * time.Second)
		require.NoError(t, a.Enable(t.Context(), "report", ""))
		time.Sleep(time.Second) // 431s
		runs := log.since(origin.Add(71 * time.Second))
		require.Len(t, runs, 1)
		assert.Equal(t, origin.Add(430*time.Second), runs[0].at, "the new term's plan begins at once")
		want := []skipAt{
			{simba.SkipCatchUpWindow, 3, 120 * time.Second, 240 * time.Second},
			{simba.SkipDisabled, 3, 300 * time.Second, 420 * time.Second},
		}
		assert.Equal(t, want, skipsOf(h, origin))
		e := []string{"simba.election", "report"}
		assert.Equal(t, 3.0, m.value("simba.schedule.skipped", append(e, "simba.reason", "catch_up_window")...))
		assert.Equal(t, 3.0, m.value("simba.schedule.skipped", append(e, "simba.reason", "disabled")...))
		closeAll(t, c)
		checkSkippedHistory(t, b.Records(), "report", want, origin)
	})
}
