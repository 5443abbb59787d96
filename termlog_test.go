package simba_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
	"github.com/simba-go/simba/internal/records"
	"github.com/simba-go/simba/internal/scenario"
)

// The status's term log (what the console's timeline draws): each holder
// adds its term; a hand-off ends it with its reason and revocation time; a
// successor ends a term that failed over at its own start.
func TestStatusTermLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		ca, _ := node(t, b, "a", h, simba.WithMemberID("a"))
		cb, nb := node(t, b, "b", h, simba.WithMemberID("b"))
		ta, err := ca.Election("ingest").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		time.Sleep(time.Second)
		_, err = cb.Election("ingest").RunWhileLeader(holdUntilRevoked("b", h))
		require.NoError(t, err)
		time.Sleep(time.Second)

		stopped := time.Now()
		ta.Stop()
		<-ta.Done() // a hands off: b takes over
		time.Sleep(time.Second)
		_, err = ca.Election("ingest").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		time.Sleep(time.Second)
		crashed := time.Now()
		nb.Crash() // b ends without a hand-off: a takes over after its TTL
		time.Sleep(3 * testTTL)

		a := openAdmin(t, b)
		st, err := a.Status(t.Context(), "ingest")
		require.NoError(t, err)
		require.Len(t, st.Terms, 3, "%+v", st.Terms)
		first, second, third := st.Terms[0], st.Terms[1], st.Terms[2]
		assert.Equal(t, "a", first.Member)
		assert.Equal(t, simba.RevokeStopped.String(), first.Ended)
		assert.True(t, first.End.Equal(stopped), "a hand-off ends at its revocation: %v, not %v", first.End, stopped)
		assert.Equal(t, testTTL.Milliseconds(), first.TTLms)

		assert.Equal(t, "b", second.Member)
		assert.Equal(t, records.EndedFailOver, second.Ended)
		assert.True(t, second.End.Equal(third.Start), "a fail-over ends at the successor's start")
		assert.True(t, second.End.After(crashed), "the successor began after b crashed")

		assert.Equal(t, "a", third.Member)
		assert.Empty(t, third.Ended, "the holder's term is open")
		assert.True(t, third.End.IsZero())
		assert.Less(t, first.Token, second.Token)
		assert.Less(t, second.Token, third.Token)
		require.NotNil(t, st.Holder)
		assert.Equal(t, third.Token, st.Holder.Token)

		require.NoError(t, ca.Close())
		st, err = a.Status(t.Context(), "ingest")
		require.NoError(t, err)
		require.Len(t, st.Terms, 3)
		assert.Equal(t, simba.RevokeClosed.String(), st.Terms[2].Ended)
		assert.False(t, st.Terms[2].End.Before(st.Terms[2].Start))
	})
}

// A partition the group's assignment moves ends "moved" in its log.
func TestStatusTermLogMovedPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		ca, _ := node(t, b, "a", h, simba.WithMemberID("a"))
		cb, _ := node(t, b, "b", h, simba.WithMemberID("b"))
		_, err := ca.Group("billing", 2).RunWhileLeader(func(ctx context.Context, term *simba.Term, _ int) error {
			<-ctx.Done()
			return nil
		})
		require.NoError(t, err)
		time.Sleep(2 * time.Second)
		_, err = cb.Group("billing", 2).RunWhileLeader(func(ctx context.Context, term *simba.Term, _ int) error {
			<-ctx.Done()
			return nil
		})
		require.NoError(t, err)
		time.Sleep(3 * testTTL)

		a := openAdmin(t, b)
		var moved int
		for _, p := range []string{"billing.0", "billing.1"} {
			st, err := a.Status(t.Context(), p)
			require.NoError(t, err)
			require.NotEmpty(t, st.Terms, p)
			if len(st.Terms) == 2 {
				moved++
				assert.Equal(t, "a", st.Terms[0].Member, p)
				assert.Equal(t, records.EndedMoved, st.Terms[0].Ended, p)
				assert.Equal(t, "b", st.Terms[1].Member, p)
			}
		}
		assert.Positive(t, moved, "b's join moves a partition to b")
	})
}

// Each client publishes its recent renewals, and how much of its term was
// left at each, in its health record; Close deletes it, and a new client
// deletes the records of clients gone for an hour.
func TestHealthRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		ghost := b.Node("ghost")
		sess, err := ghost.Open(t.Context(), backend.SessionOptions{TTL: testTTL})
		require.NoError(t, err)
		old := records.Health{Member: "ghost", Updated: time.Now().Add(-2 * time.Hour)}
		recent := records.Health{Member: "recent", Updated: time.Now().Add(-time.Minute)}
		for _, r := range []records.Health{old, recent} {
			_, err = sess.(backend.Records).PutRecord(t.Context(), records.HealthKey(r.Member), records.Encode(r), backend.Condition{})
			require.NoError(t, err)
		}
		require.NoError(t, sess.Close(t.Context()))

		h := newHistory()
		c, _ := node(t, b, "a", h, simba.WithMemberID("a"))
		off, _ := node(t, b, "quiet", h, simba.WithMemberID("quiet"), simba.WithStatus(false))
		time.Sleep(20 * time.Second)

		a := openAdmin(t, b)
		health, err := a.Health(t.Context())
		require.NoError(t, err)
		members := map[string]admin.Health{}
		for _, r := range health {
			members[r.Member] = r
		}
		assert.NotContains(t, members, "ghost", "a record an hour old is deleted")
		assert.Contains(t, members, "recent")
		assert.NotContains(t, members, "quiet", "WithStatus(false) publishes nothing")
		got, ok := members["a"]
		require.True(t, ok, "%+v", health)
		assert.Equal(t, testTTL.Milliseconds(), got.TTLms)
		assert.Equal(t, c.SessionID(), got.Session)
		require.NotEmpty(t, got.Renewals)
		assert.LessOrEqual(t, len(got.Renewals), records.HealthLen)
		for _, r := range got.Renewals {
			// Renewed every TTL/3 with no delay: two thirds of the term
			// left at each, less the margin.
			assert.Greater(t, r.LeftMs, int64(0))
			assert.Less(t, r.LeftMs, testTTL.Milliseconds())
		}

		require.NoError(t, c.Close())
		require.NoError(t, off.Close())
		health, err = a.Health(t.Context())
		require.NoError(t, err)
		for _, r := range health {
			assert.NotEqual(t, "a", r.Member, "Close deletes the client's record")
		}
	})
}

// A client behind a slow link renews with little of its term left, and
// its health record says so: what the console marks "close to its
// deadline" (under a third of the TTL).
func TestHealthRecordShowsASlowLink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		c, n := node(t, b, "slow", h, simba.WithMemberID("slow"))
		require.NoError(t, c.Ready(t.Context()))
		n.SetDelay(500*time.Millisecond, 500*time.Millisecond) // a renewal's round trip: 1s
		time.Sleep(30 * time.Second)

		health, err := openAdmin(t, b).Health(t.Context())
		require.NoError(t, err)
		require.Len(t, health, 1)
		last := health[0].Renewals[len(health[0].Renewals)-1]
		assert.Equal(t, int64(1000), last.RTTms)
		// Renewed a third of the TTL after the last send, confirmed a second
		// later: two thirds of the TTL, less the margin and the round trip.
		assert.Positive(t, last.LeftMs)
		assert.Less(t, last.LeftMs, testTTL.Milliseconds()/3, "%+v", last)
		n.SetDelay(0, 0)
	})
}

// termLogSession fails every read (reads) of a term log record, or the
// writes while writeFails is positive, as a request behind thousands of
// others times out; and holds its reads of status records while the gate
// holds a channel, until it is closed.
type termLogSession struct {
	backend.Session
	backend.Records
	reads      bool
	writeFails *atomic.Int32
	gate       *atomic.Pointer[chan struct{}]
}

func (s termLogSession) GetRecord(ctx context.Context, key string) (backend.Record, error) {
	if ch := s.gate.Load(); ch != nil && strings.HasPrefix(key, records.StatusPrefix) {
		<-*ch
	}
	if s.reads && strings.HasPrefix(key, records.TermsPrefix) {
		return backend.Record{}, fmt.Errorf("get record %q: %w", key, context.DeadlineExceeded)
	}
	return s.Records.GetRecord(ctx, key)
}

func (s termLogSession) PutRecord(ctx context.Context, key string, value []byte, cond backend.Condition) (backend.Record, error) {
	if strings.HasPrefix(key, records.TermsPrefix) && s.writeFails.Add(-1) >= 0 {
		return backend.Record{}, fmt.Errorf("put record %q: %w", key, context.DeadlineExceeded)
	}
	return s.Records.PutRecord(ctx, key, value, cond)
}

// TestTermLogRecord: the term log is a record of its own, written by each
// holder once its term has begun, so that the status a hand-off writes in
// its release carries the ending term alone, not the log; a holder that
// cannot read or write the log keeps the terms it lacks in its status. Two
// clients take the election in turn, 40 terms (more than the log keeps):
// after each hand-off the status holds the ended term only (when both can
// use the log), the log does not have that term's end yet (the release did
// not write it), and the lease's terms, as the admin merges them, are the
// last 32, each ended as it was.
func TestTermLogRecord(t *testing.T) {
	for _, mode := range []string{"written", "b's first writes fail", "b cannot write it", "b cannot read it"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				h := newHistory()
				ca, _ := node(t, b, "a", h, simba.WithMemberID("a"))
				fails, gate := &atomic.Int32{}, &atomic.Pointer[chan struct{}]{}
				switch mode {
				case "b's first writes fail":
					fails.Store(2) // tried again within the term
				case "b cannot write it":
					fails.Store(1 << 30)
				}
				f := wrapSessions{b.Node("b"), func(s backend.Session) backend.Session {
					return termLogSession{Session: s, Records: s.(backend.Records), reads: mode == "b cannot read it", writeFails: fails, gate: gate}
				}}
				cb, err := simba.New(f, simba.WithTTL(testTTL), simba.WithMemberID("b"), simba.WithLogger(scenario.Logger(t, "b")))
				require.NoError(t, err)
				defer closeAll(t, cb)
				var tokens []uint64
				logs := mode == "written" || mode == "b's first writes fail" // both clients write the log
				for i := range 40 {
					c := ca
					if i%2 == 1 {
						c = cb
					}
					// The last term (b's) is handed off before it wrote
					// either record: its status read is held until it is
					// stopped.
					short := i == 39
					hold := make(chan struct{})
					if short {
						gate.Store(&hold)
					}
					terms := make(chan *simba.Term, 1)
					task, err := c.Election("e").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
						terms <- term
						<-ctx.Done()
						return nil
					})
					require.NoError(t, err)
					term := <-terms
					tokens = append(tokens, term.Token())
					if !short {
						// The status and the log are read and written (a log
						// read that fails is tried for 3 TTLs).
						time.Sleep(4 * testTTL)
					}
					task.Stop()
					if short {
						synctest.Wait() // the hand-off waits for the status worker
						gate.Store(nil)
						close(hold)
					}
					<-task.Done()

					s, err := b.Node("reader").Open(t.Context(), backend.SessionOptions{TTL: testTTL})
					require.NoError(t, err)
					rec := s.(backend.Records)
					r, err := rec.GetRecord(t.Context(), records.StatusKey("e"))
					require.NoError(t, err)
					var st records.Status
					require.NoError(t, records.Decode(r.Value, &st))
					require.NotEmpty(t, st.Terms, "term %d", i)
					last := st.Terms[len(st.Terms)-1]
					require.True(t, last.Token == term.Token() && last.Ended == simba.RevokeStopped.String(),
						"term %d (token %d): the status's last term %+v", i, term.Token(), last)
					if short {
						assert.Len(t, st.Terms, 2, "term %d, handed off before it wrote the log: its status carries the term before it and its own: %+v", i, st.Terms)
					} else if logs || (i%2 == 0 && i > 0) {
						// a writes the log at its start, and so b's term
						// before it, whatever b could do.
						assert.Len(t, st.Terms, 1, "term %d: the hand-off's status carries its own term only: %+v", i, st.Terms)
					} else if i > 0 {
						assert.Len(t, st.Terms, 2, "term %d: b's status carries a's term, which b could not log, and its own: %+v", i, st.Terms)
					}
					r, err = rec.GetRecord(t.Context(), records.TermsKey("e"))
					require.NoError(t, err, "term %d: the log", i)
					require.NoError(t, s.Close(t.Context()))
					var log records.TermLog
					require.NoError(t, records.Decode(r.Value, &log))
					if short {
						assert.False(t, slices.ContainsFunc(log.Terms, func(l records.Term) bool { return l.Token == term.Token() }),
							"term %d: the log %+v has the term handed off before it wrote the log: the release wrote it", i, log.Terms)
					} else if logs || i%2 == 0 {
						require.NotEmpty(t, log.Terms)
						logLast := log.Terms[len(log.Terms)-1]
						assert.True(t, logLast.Token == term.Token() && logLast.Ended == "",
							"term %d: the log's last term %+v, want this term, open (its end is the status's until the next holder writes the log)", i, logLast)
					}
				}
				a := openAdmin(t, b)
				st, err := a.Status(t.Context(), "e")
				require.NoError(t, err)
				got := make([]uint64, len(st.Terms))
				for i, term := range st.Terms {
					got[i] = term.Token
					assert.Equal(t, simba.RevokeStopped.String(), term.Ended, "term %d", term.Token)
					assert.False(t, term.End.IsZero(), "term %d", term.Token)
				}
				assert.Equal(t, tokens[len(tokens)-records.TermsLen:], got, "the lease's last %d terms", records.TermsLen)
			})
		})
	}
}

// TestTermLogOpenTermFailedOver: a holder that wrote the term log at its
// start but not its status, and ended without a hand-off (a crash), has
// its term open in the log and absent from the status; its successor ends
// it there as a fail-over, as it ends the holder a status names.
func TestTermLogOpenTermFailedOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		ca, _ := node(t, b, "a", h, simba.WithMemberID("a"))
		cb := flakyClient(t, b, "b", 0, 1<<30) // its status (and history) writes fail
		defer closeAll(t, cb)
		nb := b.Node("b")

		ta, err := ca.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		time.Sleep(time.Second)
		ta.Stop()
		<-ta.Done()
		_, err = cb.Election("e").RunWhileLeader(holdUntilRevoked("b", h))
		require.NoError(t, err)
		time.Sleep(time.Second) // b writes the log; its status writes fail
		crashed := time.Now()
		nb.Crash()
		_, err = ca.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		time.Sleep(3 * testTTL)

		a := openAdmin(t, b)
		st, err := a.Status(t.Context(), "e")
		require.NoError(t, err)
		require.Len(t, st.Terms, 3, "a's, b's and a's again: %+v", st.Terms)
		bt := st.Terms[1]
		assert.Equal(t, "b", bt.Member)
		assert.Equal(t, records.EndedFailOver, bt.Ended, "b's term, open in the log, ended by its successor: %+v", st.Terms)
		assert.True(t, bt.End.After(crashed) && bt.End.Equal(st.Terms[2].Start), "a fail-over ends at the successor's start: %+v", st.Terms)
		assert.Empty(t, st.Terms[2].Ended, "a's term holds")
	})
}

// TestTermLogAddsAMissingHolder: a status that names a holder its terms
// and the log lack (written before either carried terms) gets that
// holder's term, ended as a fail-over at its successor's start.
func TestTermLogAddsAMissingHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		s, err := b.Node("old").Open(t.Context(), backend.SessionOptions{TTL: testTTL})
		require.NoError(t, err)
		since := time.Now().Add(-time.Minute)
		old := records.Status{Lease: "e", Partition: -1, Holder: &records.Holder{Member: "z", Session: "z-1", Token: 0, Since: since}}
		_, err = s.(backend.Records).PutRecord(t.Context(), records.StatusKey("e"), records.Encode(old), backend.Condition{})
		require.NoError(t, err)
		require.NoError(t, s.Close(t.Context()))

		h := newHistory()
		ca, _ := node(t, b, "a", h, simba.WithMemberID("a"))
		_, err = ca.Election("e").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		time.Sleep(time.Second)

		st, err := openAdmin(t, b).Status(t.Context(), "e")
		require.NoError(t, err)
		require.Len(t, st.Terms, 2, "z's and a's: %+v", st.Terms)
		z, a := st.Terms[0], st.Terms[1]
		assert.True(t, z.Member == "z" && z.Start.Equal(since) && z.Ended == records.EndedFailOver && z.End.Equal(a.Start),
			"z's term, added and ended at a's start: %+v", st.Terms)
		assert.True(t, a.Member == "a" && a.Ended == "", "a's term holds: %+v", st.Terms)
	})
}
