package simba_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// callLog is the order of what a term's holder sent its backend and
// when its work began.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *callLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

// loggedSession logs its record requests; its reads of the operations
// take opsDelay, as over a slow link.
type loggedSession struct {
	backend.Session
	backend.Records
	log      *callLog
	opsDelay time.Duration
}

func (s loggedSession) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	l, err := s.Session.Acquire(ctx, name)
	if err == nil {
		s.log.add("granted " + name)
	}
	return l, err
}

func (s loggedSession) ListRecords(ctx context.Context, prefix string) ([]backend.Record, error) {
	s.log.add("list " + prefix)
	if prefix != "ops/" {
		return s.Records.ListRecords(ctx, prefix)
	}
	time.Sleep(s.opsDelay)
	defer s.log.add("listed ops/")
	return s.Records.ListRecords(ctx, prefix)
}

func (s loggedSession) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	s.log.add("get " + key)
	return s.Records.GetRecord(ctx, key)
}

func (s loggedSession) PutRecord(ctx context.Context, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	s.log.add("put " + key)
	return s.Records.PutRecord(ctx, key, value, cond)
}

// TestTermStartSendsOnlyItsOperationsRead: between the grant and the
// term's first run the holder sends one request, its read of the
// operations (the check that no disable or drain was recorded before the
// grant); the status record is read and written only once that read is
// done, as the work begins, so that a status write queued ahead of the operations read
// (a server answers a session's requests in order) never holds the first
// run up. The read of the operations is slowed down, so that anything
// sent alongside it would be seen.
func TestTermStartSendsOnlyItsOperationsRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		log := &callLog{}
		logged := wrapSessions{b.Node("a"), func(s backend.Session) backend.Session {
			return loggedSession{Session: s, Records: s.(backend.Records), log: log, opsDelay: 50 * time.Millisecond}
		}}
		c, err := simba.New(logged, simba.WithTTL(testTTL), simba.WithEventHandler(h.Event))
		require.NoError(t, err)
		defer closeAll(t, c)
		time.Sleep(time.Second) // the client's own first reads
		_, err = c.Election("report").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			log.add("run")
			<-ctx.Done()
			return nil
		})
		require.NoError(t, err)
		time.Sleep(time.Second)
		calls := log.snapshot()
		t.Logf("calls: %q", calls)
		granted := indexOf(calls, 0, "granted report")
		listed := indexOf(calls, granted+1, "listed ops/")
		run := indexOf(calls, granted+1, "run")
		require.True(t, granted >= 0 && listed > granted && run > listed, "no grant, operations read and run in that order in %q", calls)
		assert.Equal(t, []string{"list ops/"}, calls[granted+1:listed], "requests between the grant and the end of its operations read")
		var status []string
		for _, c := range calls[listed:] {
			if strings.Contains(c, "status/report") {
				status = append(status, c)
			}
		}
		require.NotEmpty(t, status, "no status request once the operations were read")
		assert.Equal(t, "get status/report", status[0], "the first status request, once the operations are read")
	})
}

// indexOf is the index of the first v in s at or after from, or -1.
func indexOf(s []string, from int, v string) int {
	for i := max(0, from); i < len(s); i++ {
		if s[i] == v {
			return i
		}
	}
	return -1
}

// TestStopRevokesOnTheCallersGoroutine: when LeaderTask.Stop returns, the
// term it stopped is already revoked and its work's ctx cancelled: the
// revocation is not left to a goroutine of its own, one more wake-up on
// the hand-off's path (issue 43).
//
// Leaving it to the holding's watch of the task's ctx (patch: drop the
// revoke of t.current from LeaderTask.stop) fails with "the term is not
// revoked when Stop returns".
func TestStopRevokesOnTheCallersGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		c, err := simba.New(b.Node("a"), simba.WithTTL(testTTL))
		require.NoError(t, err)
		defer closeAll(t, c)
		terms := make(chan *simba.Term, 1)
		ctxs := make(chan context.Context, 1)
		task, err := c.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			terms <- term
			ctxs <- ctx
			<-ctx.Done()
			return nil
		})
		require.NoError(t, err)
		term, ctx := <-terms, <-ctxs
		task.Stop()
		select {
		case <-term.Revoked():
		default:
			t.Fatal("the term is not revoked when Stop returns")
		}
		require.Error(t, ctx.Err(), "the work's ctx when Stop returns")
		<-task.Done()
	})
}
