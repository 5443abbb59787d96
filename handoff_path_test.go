package simba_test

import (
	"context"
	"errors"
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
	"github.com/simba-go/simba/internal/records"
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

// snapshotSession is a session whose leases carry the records under
// "ops/" as their grant saw them (backend.GrantSnapshot), plus extra;
// with refuse, its own listings of "ops/" fail, so that a term's start
// can only go by the grant's snapshot.
type snapshotSession struct {
	backend.Session
	backend.Records
	log    *callLog
	extra  []backend.Record
	refuse bool
}

type snapshotLease struct {
	backend.Lease
	list []backend.Record
}

func (l snapshotLease) RecordsAtGrant(prefix string) ([]backend.Record, bool) {
	if prefix != "ops/" {
		return nil, false
	}
	return l.list, true
}

func (s snapshotSession) Acquire(ctx context.Context, name string) (backend.Lease, error) {
	l, err := s.Session.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	s.log.add("granted " + name)
	list, err := s.Records.ListRecords(ctx, "ops/")
	if err != nil {
		return nil, err
	}
	return snapshotLease{l, append(list, s.extra...)}, nil
}

func (s snapshotSession) ListRecords(ctx context.Context, prefix string) ([]backend.Record, error) {
	if prefix == "ops/" && s.refuse {
		s.log.add("list ops/")
		return nil, errors.New("listing the operations: refused by the test")
	}
	return s.Records.ListRecords(ctx, prefix)
}

// TestTermStartGoesByTheGrantsSnapshot: where the lease carries the
// operations as its grant saw them (backend.GrantSnapshot, asked for
// through SessionOptions.GrantRecords), a term's start checks them
// without a read of its own: with every listing of the operations
// refused, the term runs; and a disable in the grant's snapshot (and in
// no listing) revokes the term before its first run.
//
// Ignoring the snapshot (patch: drop the GrantSnapshot branch of
// opsView.checkStart) fails "runs" with "no run of a term whose start
// could only go by its grant's snapshot" and "disabled" with "a term
// ran, though its grant's snapshot has the election disabled".
func TestTermStartGoesByTheGrantsSnapshot(t *testing.T) {
	disable := backend.Record{Key: records.DisabledPrefix + "report", Value: records.Encode(records.Op{By: "test", At: time.Unix(0, 0)}), Version: 1}
	for _, tc := range []struct {
		name   string
		extra  []backend.Record
		refuse bool
	}{{"runs", nil, true}, {"disabled", []backend.Record{disable}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				log := &callLog{}
				var asked []string
				wrapped := wrapSessions{b.Node("a"), func(s backend.Session) backend.Session {
					return snapshotSession{Session: s, Records: s.(backend.Records), log: log, extra: tc.extra, refuse: tc.refuse}
				}}
				opening := openOptions{wrapped, func(o backend.SessionOptions) { asked = append(asked, o.GrantRecords) }}
				h := newHistory()
				c, err := simba.New(opening, simba.WithTTL(testTTL), simba.WithEventHandler(h.Event))
				require.NoError(t, err)
				defer closeAll(t, c)
				_, err = c.Election("report").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
					log.add("run")
					<-ctx.Done()
					return nil
				})
				require.NoError(t, err)
				time.Sleep(5 * time.Second)
				calls := log.snapshot()
				require.Contains(t, asked, "ops/", "the sessions' GrantRecords")
				require.Contains(t, calls, "granted report")
				if tc.extra == nil {
					assert.Contains(t, calls, "run", "no run of a term whose start could only go by its grant's snapshot: %q", calls)
				} else {
					assert.NotContains(t, calls, "run", "a term ran, though its grant's snapshot has the election disabled: %q", calls)
				}
			})
		})
	}
}

// openOptions is a backend that tells see of the options of each Open.
type openOptions struct {
	backend.Backend
	see func(backend.SessionOptions)
}

func (b openOptions) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	b.see(o)
	return b.Backend.Open(ctx, o)
}
