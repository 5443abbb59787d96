package simba

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/records"
)

// WithStatus turns the status and history records off or on (default on,
// where the backend has records; see [backend.Records]). The holder of each
// election writes its status (holder, last run, next planned start,
// counts) and a bounded history of runs, fenced by its token, for the
// simba command and the console, and so that a successor learns of a
// fail-over, an interrupted run or a missed planned start. It costs about
// four small writes per run; turn it off for very frequent runs.
func WithStatus(on bool) Option {
	return func(o *options) error {
		o.noStatus = !on
		return nil
	}
}

// statusWriter keeps the status and history records of one term. A nil
// *statusWriter does nothing.
type statusWriter struct {
	c      *Client
	rec    backend.Records
	term   *Term
	cond   backend.Condition
	member string

	// turn serializes the writes and guards st and closed. It is a channel
	// rather than a mutex: a writer waits for its turn across a network
	// call, and waiting on a channel lets virtual time run in tests.
	turn     chan struct{}
	st       records.Status
	closed   bool // handed off: no more writes
	failOver bool // the previous holder ended without a hand-off
	missed   bool // a planned start passed while no one held the lease
}

func (w *statusWriter) lock()   { w.turn <- struct{}{} }
func (w *statusWriter) unlock() { <-w.turn }

// openStatus reads the status the previous holder left, marks its
// in-flight run interrupted, and records this term as the holder. It
// returns nil when status records are off or unsupported.
func (c *Client) openStatus(g *generation, term *Term, schedule string) *statusWriter {
	rec, ok := g.sess.(backend.Records)
	if !ok || c.opts.noStatus {
		return nil
	}
	ref := term.ref
	w := &statusWriter{
		c: c, rec: rec, term: term, member: c.memberID(g),
		cond: backend.Condition{Lease: ref.Election, Token: ref.Token},
		turn: make(chan struct{}, 1),
	}
	ctx, cancel := w.ctx()
	defer cancel()
	now := time.Now()
	prev, err := rec.GetRecord(ctx, records.StatusKey(ref.Election))
	switch {
	case err == nil:
		if err := records.Decode(prev.Value, &w.st); err != nil {
			c.log.Warn("unreadable status record; starting afresh", "election", ref.Election, "err", err)
			w.st = records.Status{}
		}
	case !errors.Is(err, backend.ErrNoRecord):
		c.log.Warn("reading the status record failed", "election", ref.Election, "err", err)
	}
	w.failOver = w.st.Holder != nil && w.st.Holder.Token != ref.Token
	w.missed = !w.st.NextPlanned.IsZero() && w.st.NextPlanned.Before(now)
	if w.failOver && w.st.LastRun != nil && w.st.LastRun.Result == records.Running {
		run := *w.st.LastRun
		run.Result, run.Error = records.Interrupted, fmt.Sprintf("holder %s (token %d) ended without a hand-off while it ran", run.Member, run.Token)
		w.put(ctx, records.HistoryKey(ref.Election, run.Seq), records.Encode(run))
		w.st.LastRun = &run
	}
	w.st.Lease, w.st.Group, w.st.Partition, w.st.Schedule = ref.Election, ref.Group, ref.Partition, schedule
	w.st.Holder = &records.Holder{Member: w.member, Session: g.sess.ID(), Token: ref.Token, Since: term.start}
	w.writeStatus(ctx)
	return w
}

// ctx bounds a write by the session: the backend's fence decides whether
// the term may still write (the last run of a term ends after the term, and
// must still reach the history while the lease is held).
func (w *statusWriter) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(w.term.gen.ctx, w.term.gen.ttl)
}

// put writes a record fenced by the term; a failure is logged, never
// returned: status must not fail the work.
func (w *statusWriter) put(ctx context.Context, key string, value []byte) {
	if _, err := w.rec.PutRecord(ctx, key, value, w.cond); err != nil {
		level := "failed"
		if errors.Is(err, backend.ErrConflict) {
			level = "refused: the term is over"
		}
		w.c.log.Debug("writing a status record "+level, "key", key, "err", err)
	}
}

// writeStatus writes the status. w holds the turn, or is not shared yet.
func (w *statusWriter) writeStatus(ctx context.Context) {
	w.st.Updated = time.Now()
	w.put(ctx, records.StatusKey(w.term.ref.Election), records.Encode(w.st))
}

// started records the start of a run and returns its sequence number.
func (w *statusWriter) started(start time.Time, source string) uint64 {
	if w == nil {
		return 0
	}
	w.lock()
	defer w.unlock()
	if w.closed {
		return 0
	}
	w.st.HistorySeq++
	w.st.LastRun = &records.Run{Seq: w.st.HistorySeq, Token: w.term.ref.Token, Member: w.member, Start: start, Result: records.Running, Source: source}
	ctx, cancel := w.ctx()
	defer cancel()
	w.writeStatus(ctx)
	return w.st.HistorySeq
}

// ended records the end of run seq in the history and the status, with the
// schedule's next planned start (zero for none), and drops the oldest run.
func (w *statusWriter) ended(seq uint64, end time.Time, result Result, err error) {
	if w == nil {
		return
	}
	w.lock()
	defer w.unlock()
	if w.closed {
		return
	}
	if w.st.LastRun == nil || w.st.LastRun.Seq != seq {
		return
	}
	run := *w.st.LastRun
	run.End, run.Result = end, result.String()
	if err != nil {
		run.Error = err.Error()
	}
	w.st.LastRun = &run
	if result == Failed {
		w.st.Failed++
	} else {
		w.st.Succeeded++
	}
	ctx, cancel := w.ctx()
	defer cancel()
	ref := w.term.ref
	w.put(ctx, records.HistoryKey(ref.Election, seq), records.Encode(run))
	w.writeStatus(ctx)
	if seq > records.HistoryLen {
		if err := w.rec.DeleteRecord(ctx, records.HistoryKey(ref.Election, seq-records.HistoryLen), w.cond); err != nil {
			w.c.log.Debug("trimming the history failed", "election", ref.Election, "err", err)
		}
	}
}

// planned records the schedule's next planned start.
func (w *statusWriter) planned(next time.Time) {
	if w == nil {
		return
	}
	w.lock()
	defer w.unlock()
	if w.closed {
		return
	}
	if w.st.NextPlanned.Equal(next) {
		return
	}
	w.st.NextPlanned = next
	ctx, cancel := w.ctx()
	defer cancel()
	w.writeStatus(ctx)
}

// handedOff records that the term ended cleanly, before its lease is
// released: a successor that finds no holder knows there was no fail-over.
// The write is bounded by the session, not by the term, which has ended.
func (w *statusWriter) handedOff(g *generation) {
	if w == nil {
		return
	}
	w.lock()
	defer w.unlock()
	if w.closed {
		return
	}
	w.closed = true
	w.st.Holder = nil
	w.st.Updated = time.Now()
	ctx, cancel := context.WithTimeout(g.ctx, g.ttl)
	defer cancel()
	w.put(ctx, records.StatusKey(w.term.ref.Election), records.Encode(w.st))
}

// firstSource is the source of the first run of the term.
func (w *statusWriter) firstSource() string {
	if w != nil && w.failOver {
		return records.SourceFailOver
	}
	return records.SourceNormal
}

// missedStart reports whether a planned start passed while no one held the
// lease.
func (w *statusWriter) missedStart() bool { return w != nil && w.missed }
