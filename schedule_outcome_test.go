package simba_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/records"
)

// infoLog records the RunInfo and the time of every run of its tasks.
type infoLog struct {
	mu   sync.Mutex
	runs []infoRun
}

type infoRun struct {
	node string
	at   time.Time
	info simba.RunInfo
}

// task returns a task function for node that records its runs and
// returns what fail says.
func (l *infoLog) task(node string, h *history, fail func() error) func(context.Context, *simba.Term) error {
	return func(ctx context.Context, term *simba.Term) error {
		h.SawTerm(node, term)
		info, _ := simba.RunInfoFrom(ctx)
		l.mu.Lock()
		l.runs = append(l.runs, infoRun{node, time.Now(), info})
		l.mu.Unlock()
		if fail != nil {
			return fail()
		}
		return nil
	}
}

func (l *infoLog) since(t time.Time) []infoRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []infoRun
	for _, r := range l.runs {
		if !r.at.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

// putOp writes an operation record as an operator's tool does.
func putOp(t *testing.T, b *memory.Backend, key string, op records.Op) {
	t.Helper()
	s, err := b.Node("operator").Open(t.Context(), backend.SessionOptions{TTL: testTTL})
	require.NoError(t, err)
	defer s.Close(context.Background())
	_, err = s.(backend.Records).PutRecord(t.Context(), key, records.Encode(op), backend.Condition{})
	require.NoError(t, err)
}

// opIn returns the operation record at key in recs.
func opIn(t *testing.T, recs []backend.Record, key string) (records.Op, bool) {
	t.Helper()
	for _, r := range recs {
		if r.Key == key {
			var op records.Op
			require.NoError(t, records.Decode(r.Value, &op))
			return op, true
		}
	}
	return records.Op{}, false
}

// TestPauseAfterFailures: after 3 failed runs in a row the holder disables
// the job as `simba disable` does (the op record says Paused, with who and
// why, and the audit trail has the entry), its term ends RevokePaused, and
// nothing runs anywhere until an operator enables it; the starts missed
// meanwhile are reported skipped as paused.
func TestPauseAfterFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, mopt := newMeterReader(t)
		b := memory.New()
		defer b.Close()
		h := newHistory()
		log := &infoLog{}
		var failing atomic.Bool
		failing.Store(true)
		fail := func() error {
			if failing.Load() {
				return errors.New("boom")
			}
			return nil
		}
		s := simba.FixedRate(10 * time.Second).WithPauseAfter(3)
		ca, _ := node(t, b, "a", h, simba.WithMemberID("a"), mopt)
		_, err := ca.Election("report").Schedule(s, log.task("a", h, fail))
		require.NoError(t, err)
		synctest.Wait()
		cz, _ := node(t, b, "z", h, simba.WithMemberID("z"))
		_, err = cz.Election("report").Schedule(s, log.task("z", h, fail))
		require.NoError(t, err)
		time.Sleep(25 * time.Second) // a's runs at 0s, 10s, 20s fail
		origin := h.Terms()[0].Start()
		pausedAt := origin.Add(20 * time.Second)

		p := eventsOf[simba.Paused](h)
		require.Len(t, p, 1)
		assert.Equal(t, 3, p[0].Failures)
		assert.EqualError(t, p[0].Err, "boom")
		assert.Equal(t, pausedAt, p[0].At)
		rev := eventsOf[simba.Revoked](h)
		require.NotEmpty(t, rev)
		assert.Equal(t, simba.RevokePaused, rev[0].Reason, "a's term ends paused")
		assert.Equal(t, 1.0, m.value("simba.term.revoked", "simba.election", "report", "simba.reason", "paused"))

		reason := "paused after 3 failed runs in a row: boom"
		op, ok := opIn(t, b.Records(), records.DisabledPrefix+"report")
		require.True(t, ok, "the disable is recorded")
		assert.WithinDuration(t, pausedAt, op.At, 0)
		op.At = time.Time{}
		assert.Equal(t, records.Op{By: "a", Reason: reason, Paused: true}, op)
		adm := openAdmin(t, b)
		audit, problems, err := adm.Audit(t.Context(), admin.AuditFilter{Name: "report"})
		require.NoError(t, err)
		assert.Empty(t, problems)
		require.Len(t, audit, 1)
		assert.Equal(t, "disable", audit[0].Op)
		assert.Equal(t, "a", audit[0].By)
		assert.Equal(t, reason, audit[0].Reason)
		assert.WithinDuration(t, pausedAt, audit[0].At, 0)
		assert.True(t, audit[0].Changed)
		st, err := adm.Status(t.Context(), "report")
		require.NoError(t, err)
		assert.Nil(t, st.Holder, "a handed off")

		time.Sleep(5 * time.Minute)
		assert.Empty(t, log.since(pausedAt.Add(time.Nanosecond)), "no run anywhere while paused")
		assert.Equal(t, 3, statusIn(t, b.Records(), "report").FailStreak)

		failing.Store(false)
		require.NoError(t, adm.Enable(t.Context(), "report", "fixed"))
		synctest.Wait()
		enabledAt := time.Now()
		time.Sleep(15 * time.Second)
		runs := log.since(enabledAt)
		require.Len(t, runs, 2, "enabled: it runs again")
		assert.Equal(t, enabledAt, runs[0].at)
		// The starts from 30s to the enable passed while it was paused.
		last := enabledAt.Sub(origin).Truncate(10 * time.Second)
		if last == enabledAt.Sub(origin) {
			last -= 10 * time.Second
		}
		n := int((last-30*time.Second)/(10*time.Second)) + 1
		assert.Equal(t, []skipAt{{simba.SkipPaused, n, 30 * time.Second, last}}, skipsOf(h, origin))
		closeAll(t, ca, cz)
		assert.Zero(t, statusIn(t, b.Records(), "report").FailStreak)
		h.CheckTerms(t, b)
	})
}

// noRecordsSession hides a session's records: a backend without them.
type noRecordsSession struct{ backend.Session }

// TestPauseWithoutRecords: with nothing to disable, a schedule that pauses
// ends its term and stops its task on this client.
func TestPauseWithoutRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		log := &infoLog{}
		bare := wrapSessions{b.Node("a"), func(s backend.Session) backend.Session { return noRecordsSession{s} }}
		c, err := simba.New(bare, simba.WithTTL(testTTL), simba.WithEventHandler(h.Event))
		require.NoError(t, err)
		s := simba.FixedRate(10 * time.Second).WithPauseAfter(2)
		task, err := c.Election("report").Schedule(s, log.task("a", h, func() error { return errors.New("boom") }))
		require.NoError(t, err)
		await.For(t, task.Done(), time.Minute, "the paused task did not stop")
		time.Sleep(time.Minute)
		assert.Len(t, log.since(time.Time{}), 2, "no run after the pause")
		require.Len(t, eventsOf[simba.Paused](h), 1)
		assert.Equal(t, simba.RevokePaused, eventsOf[simba.Revoked](h)[0].Reason)
		closeAll(t, c)
	})
}

// TestFailureHandler: the handler is called once per failed run, with the
// streak of failures, never for a run cancelled by its term's end, on a
// goroutine Shutdown waits for, with a ctx that ends when the client
// closes.
func TestFailureHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var got []simba.RunFailure
		handler := simba.WithFailureHandler(func(ctx context.Context, f simba.RunFailure) {
			<-ctx.Done() // Shutdown waits for it
			mu.Lock()
			got = append(got, f)
			mu.Unlock()
		})
		boom := errors.New("boom")
		out := scheduleFor(t, simba.FixedRate(10*time.Second), 45*time.Second, func(ctx context.Context, i int) error {
			switch i {
			case 2:
				return nil
			case 4:
				<-ctx.Done() // still going when the client closes: cancelled
				return ctx.Err()
			}
			return boom
		}, handler)
		mu.Lock()
		defer mu.Unlock()
		var streaks []int
		for _, f := range got {
			assert.ErrorIs(t, f.Err, boom)
			assert.Equal(t, 1, f.Attempts)
			assert.Equal(t, simba.SourceNormal, f.Source)
			streaks = append(streaks, f.Failures)
		}
		assert.ElementsMatch(t, []int{1, 2, 1}, streaks, "runs 0, 1 and 3 failed; run 2 succeeded; run 4 was cancelled")
		assert.Equal(t, 1, statusIn(t, out.records, "report").FailStreak)
	})
}

// TestFailureHandlerOfLeaderTasks: a leader task's failed run calls the
// handler too, and the streak goes on across its terms.
func TestFailureHandlerOfLeaderTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, _ := node(t, b, "a", h, simba.WithMemberID("a"))
		var mu sync.Mutex
		var got []simba.RunFailure
		_, err := c.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			h.SawTerm("a", term)
			return errors.New("cannot connect")
		}, simba.WithFailureHandler(func(_ context.Context, f simba.RunFailure) {
			mu.Lock()
			got = append(got, f)
			mu.Unlock()
		}))
		require.NoError(t, err)
		synctest.Wait()
		require.NoError(t, openAdmin(t, b).Resign(t.Context(), "ingest", 0, "again"))
		time.Sleep(2 * testTTL) // sits out a TTL, then a second term
		require.Len(t, h.Terms(), 2)
		mu.Lock()
		require.Len(t, got, 2)
		assert.Equal(t, []int{1, 2}, []int{got[0].Failures, got[1].Failures})
		assert.Equal(t, h.Terms()[1].Token(), got[1].Token)
		assert.Equal(t, "a", got[1].Member)
		mu.Unlock()
		closeAll(t, c)
	})
}
