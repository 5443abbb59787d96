package simba

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/internal/records"
)

// WithStatus turns the status and history records off or on (default on,
// where the backend has records; see [backend.Records]). The holder of each
// election writes its status (holder, last run, next planned start,
// counts) and a bounded history of runs, fenced by its token, for the
// simba command and the console, and so that a successor learns of a
// fail-over, an interrupted run or a missed planned start. The writes are
// made off the task's path, in order, status writes coalesced: about two
// small writes per run. A hand-off waits for the last status: where the
// backend can (backend.RecordReleaser, which every backend of this module
// has), it is written in the same step that releases the lease, so it
// costs the hand-off no write of its own, only a larger one: 0.2–0.3 ms at
// the median on etcd and on ZooKeeper in docs/BENCHMARKS.md (a hand-off of
// 1.9 ms instead of 1.7 on etcd, 1.4 instead of 1.1 on ZooKeeper, fsync on).
func WithStatus(on bool) Option {
	return func(o *options) error {
		o.noStatus = !on
		return nil
	}
}

// sourceFirst stands for the source of a term's first run: "fail-over" if
// the previous holder ended without a hand-off, "normal" otherwise, known
// once the previous status is read.
const sourceFirst = ""

// statusWriter keeps the status and history records of one term. Its
// methods only queue the changes: a worker goroutine, started when there is
// work and gone when there is none, applies them in order, writing each
// run's history entry and the status once per batch. A nil *statusWriter
// does nothing.
type statusWriter struct {
	c      *Client
	rec    backend.Records
	term   *Term
	cond   backend.Condition
	member string
	opened chan struct{} // closed when the previous status has been read

	mu      sync.Mutex
	queue   []func(ctx context.Context) // changes not yet applied
	working bool                        // a worker is draining the queue
	drained chan struct{}               // closed when the queue empties; nil when idle
	closed  bool                        // handed off: nothing more is queued
	// finalize: the hand-off releases the lease with the last records
	// (backend.RecordReleaser), so the worker leaves them in final
	// instead of writing them.
	finalize bool
	final    []backend.Record
	closing  chan struct{} // closed with closed
	workers  int           // workers started (for tests)

	// The worker's own state: only the worker touches it.
	st       records.Status
	enc      records.StatusEncoder // of st
	dirty    bool                  // st changed since it was last written
	history  map[string][]byte     // history records to write with the status
	failOver bool                  // the previous holder ended without a hand-off
	unread   bool                  // the previous status could not be read: write nothing
	failures int                   // flushes in a row with failed writes
	// The term log (records.TermLog): st.Terms is all of it, in memory;
	// the status record carries only the terms after logThrough.
	logDirty   bool                   // the log is to be written
	logThrough uint64                 // the last ended term in the log last read or written
	inflight   map[uint64]records.Run // the runs started and not ended, by seq

	// What the previous holders left, set before opened is closed and
	// read-only after it.
	prevPlanned time.Time // the first planned start missed, when missed
	prevEnded   string    // how the last term before this one ended
	prevStreak  int       // the failed runs in a row before this term
}

// runHandle ties a run's end to its start; the worker fills in its
// sequence number.
type runHandle struct{ seq uint64 }

// openStatus starts the status records of term: the worker reads the
// status the previous holder left, marks its in-flight run interrupted,
// and records this term as the holder. It returns nil when status records
// are off or unsupported.
func (c *Client) openStatus(g *generation, term *Term, schedule string) *statusWriter {
	rec, ok := g.sess.(backend.Records)
	if !ok || c.opts.noStatus {
		return nil
	}
	ref := term.ref
	w := &statusWriter{
		c: c, rec: rec, term: term, member: c.memberID(g),
		cond:    backend.Condition{Lease: ref.Election, Token: ref.Token},
		opened:  make(chan struct{}),
		closing: make(chan struct{}),
	}
	w.enqueue(func(context.Context) {
		defer close(w.opened)
		// Nothing of the status goes before the term's own start: its
		// operations read (checkStart) is the one request between the
		// grant and the first run, and a status write sent ahead of it
		// would hold it up (a server answers a session's requests in
		// order; ZooKeeper holds a read behind the session's pending
		// write). The status is read and written as the work begins.
		select {
		case <-term.ready:
		case <-term.revoked:
		case <-g.ctx.Done():
		}
		prev, err := w.readPrevious(g, records.StatusKey(ref.Election))
		switch {
		case err == nil:
			if err := records.Decode(prev.Value, &w.st); err != nil {
				c.log.Warn("unreadable status record; starting afresh", "election", ref.Election, "err", err)
				w.st = records.Status{}
			}
		case errors.Is(err, backend.ErrNoRecord):
		case errors.As(err, new(*backend.MalformedError)):
			// Another read gives the same bytes: start afresh at once.
			c.log.Warn("unreadable status record; starting afresh", "election", ref.Election, "err", err)
		default:
			// Writing now would replace what the previous holders left
			// (history sequence, counts, next planned start) with a fresh
			// status: this term writes none.
			w.unread = true
			if g.ctx.Err() == nil && !w.revoked() {
				c.log.Warn("reading the status record failed; this term writes no status", "election", ref.Election, "err", err)
			}
		}
		w.failOver = w.st.Holder != nil && w.st.Holder.Token != ref.Token
		w.prevPlanned, w.prevStreak = w.st.NextPlanned, w.st.FailStreak
		if w.failOver && w.st.LastRun != nil && w.st.LastRun.Result == records.Running {
			run := *w.st.LastRun
			run.Result, run.Error = records.Interrupted, fmt.Sprintf("holder %s (token %d) ended without a hand-off while it ran", run.Member, run.Token)
			w.addHistory(run)
			w.st.LastRun = &run
		}
		// The term log after the status (see records.Status.Terms); the
		// first run's source and gap wait for both (see awaitOpened).
		if !w.unread {
			if log, ok := w.readLog(g); ok {
				w.st.Terms = records.MergeTerms(log, w.st.Terms)
				w.logThrough, w.logDirty = lastEnded(log), true
			}
		}
		if w.failOver && !slices.ContainsFunc(w.st.Terms, func(t records.Term) bool { return t.Token == w.st.Holder.Token }) {
			// A holder missing from the log (written before there was one).
			prev := w.st.Holder
			w.st.Terms = appendTerm(w.st.Terms, records.Term{Token: prev.Token, Member: prev.Member, Start: prev.Since})
		}
		endOpenTerms(w.st.Terms, ref.Token, term.start)
		w.prevEnded = gapEnded(w.st.Terms)
		w.st.Lease, w.st.Group, w.st.Partition, w.st.Schedule = ref.Election, ref.Group, ref.Partition, schedule
		w.st.Holder = &records.Holder{Member: w.member, Session: g.sess.ID(), Token: ref.Token, Since: term.start}
		w.st.Terms = appendTerm(w.st.Terms, records.Term{Token: ref.Token, Member: w.member, Start: term.start, TTLms: g.ttl.Milliseconds()})
		w.dirty = true
	})
	return w
}

// readPrevious reads the record at key (the status, the term log) that
// the previous holders left. Each attempt has
// a renewal period's time; a read that fails (behind thousands of others,
// when a client takes thousands of leases at once) is tried again while the
// term lasts, for up to readStatusPeriods renewal periods: the schedule's
// first run waits for the read, and status must not hold the work up for
// longer.
func (w *statusWriter) readPrevious(g *generation, key string) (backend.Record, error) {
	all, cancel := context.WithTimeout(g.ctx, readStatusPeriods*g.ttl)
	defer cancel()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(all, g.ttl)
		rec, err := w.rec.GetRecord(ctx, key)
		cancel()
		var bad *backend.MalformedError
		if err == nil || errors.Is(err, backend.ErrNoRecord) || errors.As(err, &bad) || w.revoked() ||
			!backoff.Sleep(all, backoff.Wait(attempt, g.ttl/3)) {
			return rec, err
		}
	}
}

// readLog reads the lease's term log (records.TermLog) as readPrevious
// reads the status, and returns its terms: none when there is no log, or
// when it is unreadable (the log written at this term's start replaces
// it). It returns false when the read failed: this term writes no log,
// and its status carries the terms the log may lack.
func (w *statusWriter) readLog(g *generation) ([]records.Term, bool) {
	key := records.TermsKey(w.term.ref.Election)
	r, err := w.readPrevious(g, key)
	switch {
	case err == nil:
		var log records.TermLog
		if err := records.Decode(r.Value, &log); err == nil {
			return log.Terms, true
		}
		w.c.log.Warn("unreadable term log record; starting afresh", "election", w.term.ref.Election, "err", err)
	case errors.Is(err, backend.ErrNoRecord):
	case errors.As(err, new(*backend.MalformedError)):
		w.c.log.Warn("unreadable term log record; starting afresh", "election", w.term.ref.Election, "err", err)
	default:
		if g.ctx.Err() == nil && !w.revoked() {
			w.c.log.Warn("reading the term log record failed; the status carries the terms", "election", w.term.ref.Election, "err", err)
		}
		return nil, false
	}
	return nil, true
}

// readStatusPeriods bounds the time readPrevious takes, in renewal periods.
const readStatusPeriods = 3

// enqueue adds a change, and starts a worker if none is running. It
// reports false once the writer is closed.
func (w *statusWriter) enqueue(f func(ctx context.Context)) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enqueueLocked(f)
}

// enqueueLocked is enqueue with w.mu held.
func (w *statusWriter) enqueueLocked(f func(ctx context.Context)) bool {
	if w.closed {
		return false
	}
	w.queue = append(w.queue, f)
	if !w.working && !w.term.handOffComing() {
		w.startLocked()
	}
	return true
}

// startLocked starts a worker. w.mu is held.
func (w *statusWriter) startLocked() {
	w.workers++
	w.working = true
	w.drained = make(chan struct{})
	w.c.wg.Go(w.work)
}

// endWorkerLocked records that the worker ends, and tells handedOff's
// wait. w.mu is held.
func (w *statusWriter) endWorkerLocked() {
	w.working = false
	close(w.drained)
	w.drained = nil
}

// work applies the queued changes in order and writes what they changed,
// until the queue is empty. Changes queued while it writes are applied
// together before the next writes, so that a run's end and the hand-off
// after it come to one status write.
func (w *statusWriter) work() {
	// Writes are bounded by the session: the backend's fence decides
	// whether the term may still write (the last run of a term ends after
	// the term, and must still reach the history while the lease is held).
	waited := false
	for {
		// Each step has a renewal period's time (the reads of
		// openStatus set their own).
		ctx, cancel := context.WithTimeout(w.term.gen.ctx, w.term.gen.ttl)
		more := w.step(ctx, &waited)
		cancel()
		if !more {
			return
		}
	}
}

// step is one round of the worker: it applies the queued changes, or
// writes what they changed, or reports that the worker ends (false).
func (w *statusWriter) step(ctx context.Context, waited *bool) bool {
	w.mu.Lock()
	batch := w.queue
	w.queue = nil
	if len(batch) == 0 && w.closed && w.finalize {
		w.final, _ = w.take(true)
	}
	if len(batch) == 0 && !w.dirty && !w.logDirty && len(w.history) == 0 {
		w.endWorkerLocked()
		w.mu.Unlock()
		return false
	}
	closed := w.closed
	w.mu.Unlock()
	switch {
	case len(batch) > 0:
		for _, f := range batch {
			f(ctx)
		}
	case !closed && !*waited && w.revoked():
		// The term is over: its hand-off is coming, and its last status
		// goes with it (a run's end and "no holder" in one write, or with
		// the release). Not for longer than the writes could take. When
		// the client ended the term itself, its hand-off applies and
		// takes what is left (see handedOff): the worker ends.
		if w.term.handOffComing() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if len(w.queue) > 0 || w.closed {
				return true // the hand-off came meanwhile: go on
			}
			w.endWorkerLocked()
			return false
		}
		*waited = true
		select {
		case <-w.closing:
		case <-ctx.Done():
		}
	default:
		w.flush(ctx)
		if w.failures > 0 { // some writes are to be tried again
			backoff.Sleep(ctx, backoff.Wait(w.failures, w.term.gen.ttl/3))
		}
	}
	return true
}

// revoked reports whether the term has been revoked.
func (w *statusWriter) revoked() bool {
	select {
	case <-w.term.revoked:
		return true
	default:
		return false
	}
}

// addHistory queues run's history record for the next flush; a later run
// in the same slot replaces it.
func (w *statusWriter) addHistory(run records.Run) {
	w.addHistoryRecord(records.HistoryKey(w.term.ref.Election, run.Seq), records.Encode(run))
}

// addHistoryRecord queues a history record for the next flush.
func (w *statusWriter) addHistoryRecord(key string, value []byte) {
	if w.history == nil {
		w.history = make(map[string][]byte)
	}
	w.history[key] = value
}

// take returns the records flush would write, and forgets them; and the
// token the log's write, if among them, brings logThrough to. The last
// records (final: those the hand-off writes with its release) leave the
// log out: the status carries what the log lacks, and the next holder
// writes it.
func (w *statusWriter) take(final bool) (out []backend.Record, through uint64) {
	w.forgetUnread()
	for key, value := range w.history {
		out = append(out, backend.Record{Key: key, Value: value})
	}
	w.history = nil // not cleared: a term keeps its writer, and a map its buckets
	switch {
	case w.logDirty && final:
		w.logDirty = false // left to the next holder
	case w.logDirty:
		w.logDirty = false
		log := records.TermLog{Lease: w.term.ref.Election, Terms: w.st.Terms, Updated: time.Now()}
		out = append(out, backend.Record{Key: records.TermsKey(w.term.ref.Election), Value: records.Encode(log)})
		through = lastEnded(w.st.Terms)
	}
	if w.dirty {
		w.dirty = false
		w.st.Updated = time.Now()
		st := w.st
		st.Terms = w.unlogged()
		out = append(out, backend.Record{Key: records.StatusKey(w.term.ref.Election), Value: w.enc.Encode(&st)})
	}
	return out, through
}

// lastEnded returns the token of the last ended term of terms, 0 if none.
func lastEnded(terms []records.Term) uint64 {
	var last uint64
	for _, t := range terms {
		if t.Ended != "" {
			last = max(last, t.Token)
		}
	}
	return last
}

// unlogged returns the terms the status carries: those after the last
// ended term of the log last written (see records.Status.Terms).
func (w *statusWriter) unlogged() []records.Term {
	i := slices.IndexFunc(w.st.Terms, func(t records.Term) bool { return t.Token > w.logThrough })
	if i < 0 {
		return nil
	}
	return w.st.Terms[i:]
}

// forgetUnread drops the changes of a term that could not read the
// previous status: it writes none.
func (w *statusWriter) forgetUnread() {
	if w.unread {
		w.history, w.dirty, w.logDirty = nil, false, false
	}
}

// maxStatusFailures bounds the flushes in a row that may fail before the
// records they carry are dropped.
const maxStatusFailures = 5

// flush writes the history records and the status concurrently: each is a
// record of its own, and the writes are fenced alike. Records whose write
// failed (a timeout behind thousands of other requests, say) are kept for
// the next flush, which the worker makes after a backoff, up to
// maxStatusFailures flushes in a row; a write the fence refuses (the term
// is over) is dropped.
func (w *statusWriter) flush(ctx context.Context) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []backend.Record
	)
	recs, through := w.take(false)
	logKey := records.TermsKey(w.term.ref.Election)
	for _, r := range recs {
		wg.Go(func() {
			if !w.put(ctx, r.Key, r.Value) {
				mu.Lock()
				failed = append(failed, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if through != 0 && !slices.ContainsFunc(failed, func(r backend.Record) bool { return r.Key == logKey }) {
		// Written: the statuses from now on leave the terms it holds out.
		w.logThrough = max(w.logThrough, through)
	}
	if len(failed) == 0 {
		w.failures = 0
		return
	}
	if w.failures++; w.failures >= maxStatusFailures {
		w.c.log.Warn("writing status records failed; dropped", "election", w.term.ref.Election, "records", len(failed), "attempts", w.failures)
		w.failures = 0
		return
	}
	statusKey := records.StatusKey(w.term.ref.Election)
	for _, r := range failed {
		if r.Key == statusKey {
			w.dirty = true // written anew from w.st
		} else if r.Key == logKey {
			w.logDirty = true
		} else if _, ok := w.history[r.Key]; !ok {
			w.addHistoryRecord(r.Key, r.Value)
		}
	}
}

// put writes a record fenced by the term, and reports false if it failed
// but may succeed if tried again. A failure is logged, never returned:
// status must not fail the work.
func (w *statusWriter) put(ctx context.Context, key string, value []byte) bool {
	_, err := w.rec.PutRecord(ctx, key, value, w.cond)
	if err == nil {
		return true
	}
	if errors.Is(err, backend.ErrConflict) {
		w.c.log.Debug("writing a status record refused: the term is over", "key", key, "err", err)
		return true
	}
	w.c.log.Debug("writing a status record failed", "key", key, "err", err)
	return false
}

// started records the start of an attempt of a run; source is
// sourceFirst for the first run of a leader task's term, args a trigger's
// arguments.
func (w *statusWriter) started(start time.Time, source string, attempt int, args map[string]string) *runHandle {
	if w == nil {
		return nil
	}
	h := &runHandle{}
	w.enqueue(func(ctx context.Context) {
		if source == sourceFirst {
			source = w.firstSource()
		}
		w.st.HistorySeq++
		h.seq = w.st.HistorySeq
		run := records.Run{Seq: h.seq, Token: w.term.ref.Token, Member: w.member, Start: start, Result: records.Running, Source: source, Attempt: attempt, Args: args}
		w.st.LastRun = &run
		if w.inflight == nil {
			w.inflight = make(map[uint64]records.Run)
		}
		w.inflight[h.seq] = run
		w.dirty = true
		// Read the history slot the run will end in, off the task's
		// path, where the backend remembers what it read (ZooKeeper): it
		// then writes the run's end with the hand-off without reading.
		if pf, ok := w.rec.(backend.RecordPrefetcher); ok {
			pf.PrefetchRecords(ctx, records.HistoryKey(w.term.ref.Election, h.seq))
		}
	})
	return h
}

// ended records the end of a run in the history (in place of the run
// HistoryLen before it) and the status; exit is the exit status the run
// reported (see "Exit codes" in the package doc), or nil. Runs of a
// schedule may overlap: each ends its own entry, and the status's LastRun
// is the last one started.
func (w *statusWriter) ended(h *runHandle, end time.Time, result Result, err error, exit *int) {
	if w == nil || h == nil {
		return
	}
	w.enqueue(func(context.Context) {
		run, ok := w.inflight[h.seq]
		if h.seq == 0 || !ok {
			return
		}
		delete(w.inflight, h.seq)
		run.End, run.Result, run.ExitCode = end, result.String(), exit
		if err != nil {
			run.Error = err.Error()
		}
		if w.st.LastRun != nil && w.st.LastRun.Seq == h.seq {
			w.st.LastRun = &run
		}
		if result == ResultFailed {
			w.st.Failed++
		} else {
			w.st.Succeeded++
		}
		w.dirty = true
		w.addHistory(run)
	})
}

// skipped records planned starts that were skipped, one history entry for
// the occasion: sp's starts, for reason.
func (w *statusWriter) skipped(reason SkipReason, sp span) {
	if w == nil || sp.count == 0 {
		return
	}
	w.enqueue(func(context.Context) {
		w.st.HistorySeq++
		w.st.SkippedRuns += uint64(sp.count)
		w.dirty = true
		w.addHistory(records.Run{
			Seq: w.st.HistorySeq, Token: w.term.ref.Token, Member: w.member,
			Start: sp.first, End: sp.last, Result: records.Skipped, Skipped: sp.count, Error: reason.String(),
		})
	})
}

// failStreak records the failed runs in a row.
func (w *statusWriter) failStreak(n int) {
	if w == nil {
		return
	}
	w.enqueue(func(context.Context) {
		if w.st.FailStreak != n {
			w.st.FailStreak = n
			w.dirty = true
		}
	})
}

// planned records the schedule's next planned start.
func (w *statusWriter) planned(next time.Time) {
	if w == nil {
		return
	}
	w.enqueue(func(context.Context) {
		if !w.st.NextPlanned.Equal(next) {
			w.st.NextPlanned = next
			w.dirty = true
		}
	})
}

// handedOff records that the term ended cleanly and waits until every
// change is written, before its lease is released: a successor that finds
// no holder knows there was no fail-over. The wait is bounded by the
// session. With finalize (the lease is a backend.RecordReleaser), the last
// records are not written but returned, for the release to write them in
// the same step; nil when there are none, or when the wait was cut short.
//
// The term's entry in the term log ends at, for the reason ended.
func (w *statusWriter) handedOff(g *generation, finalize bool, ended string, at time.Time) []backend.Record {
	if w == nil {
		return nil
	}
	end := func(context.Context) {
		w.st.Holder = nil
		endTerm(w.st.Terms, w.term.ref.Token, at, ended)
		// A run still going is one that ignored the cancellation until the
		// term's deadline, where the lease is handed off without it: it
		// can record nothing after this, and the next holder sees no
		// fail-over, so it is recorded here, or it would vanish from the
		// history.
		if run := w.st.LastRun; run != nil && run.Result == records.Running {
			if _, ok := w.inflight[run.Seq]; !ok {
				if w.inflight == nil {
					w.inflight = make(map[uint64]records.Run)
				}
				w.inflight[run.Seq] = *run
			}
		}
		for seq, r := range w.inflight {
			r.End, r.Result = time.Now(), records.Interrupted
			r.Error = fmt.Sprintf("handed off at the term's deadline while it ran: it ignored the cancellation (holder %s, token %d)", r.Member, r.Token)
			if w.st.LastRun != nil && w.st.LastRun.Seq == seq {
				w.st.LastRun = &r
			}
			w.addHistory(r)
			delete(w.inflight, seq)
		}
		w.dirty = true
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed, w.finalize = true, finalize
	close(w.closing)
	if finalize && !w.working {
		// No worker: this goroutine applies what is queued (the changes
		// left for the hand-off, see enqueueLocked) and takes the last
		// records itself, on the hand-off's path, without waking one.
		batch := w.queue
		w.queue, w.working = nil, true
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(g.ctx, g.ttl) // as a worker's step
		for _, f := range batch {
			f(ctx)
		}
		end(ctx)
		cancel()
		final, _ := w.take(true)
		w.mu.Lock()
		w.working = false
		w.mu.Unlock()
		return final
	}
	w.queue = append(w.queue, end)
	if !w.working {
		w.startLocked()
	}
	drained := w.drained
	w.mu.Unlock()
	select {
	case <-drained:
		return w.final // written by the worker before it closed drained
	case <-g.ctx.Done():
		return nil
	}
}

// awaitOpened waits until the previous status has been read, so that
// firstSource, gap and streakBefore are known; false if ctx ends first.
func (w *statusWriter) awaitOpened(ctx context.Context) bool {
	if w == nil {
		return true
	}
	select {
	case <-w.opened:
		return true
	case <-ctx.Done():
		return false
	}
}

// firstSource is the source of the first run of the term; call it after
// awaitOpened, or from the worker.
func (w *statusWriter) firstSource() string {
	if w != nil && w.failOver {
		return records.SourceFailOver
	}
	return records.SourceNormal
}

// gap returns, after awaitOpened, the previous holder's next planned start
// and how the term before this one ended (records.Term's Ended), and false
// when there is none. The starts of the previous plan from then until this
// term's schedule begins passed while no one ran them: the caller compares
// with the time its schedule begins, not the time the read began (a read
// that took a while, behind a slow link, must not hide the starts that
// passed during it).
func (w *statusWriter) gap() (from time.Time, ended string, ok bool) {
	if w == nil || w.prevPlanned.IsZero() {
		return time.Time{}, "", false
	}
	return w.prevPlanned, w.prevEnded, true
}

// streakBefore returns, after awaitOpened, the failed runs in a row the
// status counted before this term, and false when there is no status to
// tell. A term after a disable or a pause counts afresh: the operator who
// enabled the job gives it its failures again.
func (w *statusWriter) streakBefore() (int, bool) {
	if w == nil || w.unread {
		return 0, false
	}
	if w.prevEnded == RevokeDisabled.String() || w.prevEnded == RevokePaused.String() {
		return 0, true
	}
	return w.prevStreak, true
}

// source returns the source of a run: src, or for sourceFirst the term's
// first source, once the previous status is read (which ends within
// readStatusPeriods renewal periods, or with the session).
func (w *statusWriter) source(src RunSource) RunSource {
	if src != sourceFirst {
		return src
	}
	if w == nil {
		return SourceNormal
	}
	if !w.awaitOpened(w.term.gen.ctx) {
		return SourceNormal
	}
	return RunSource(w.firstSource())
}

// gapEnded says how the terms before a new one stopped running the
// schedule: how the last ended, or, where the last terms all ended
// disabled after one that paused or was disabled (a term that wins the
// lease while its job is disabled ends at once, disabled), how the first of
// those ended.
func gapEnded(terms []records.Term) string {
	i := len(terms) - 1
	if i < 0 {
		return ""
	}
	disabled, paused := RevokeDisabled.String(), RevokePaused.String()
	for i > 0 && terms[i].Ended == disabled && (terms[i-1].Ended == disabled || terms[i-1].Ended == paused) {
		i--
	}
	return terms[i].Ended
}

// appendTerm adds t to the term log, dropping the oldest terms past
// records.TermsLen.
func appendTerm(terms []records.Term, t records.Term) []records.Term {
	terms = append(terms, t)
	if n := len(terms) - records.TermsLen; n > 0 {
		terms = slices.Delete(terms, 0, n)
	}
	return terms
}

// endTerm ends the open entry of token in the term log, if there is one:
// at, for the reason ended.
func endTerm(terms []records.Term, token uint64, at time.Time, ended string) {
	for i := len(terms) - 1; i >= 0; i-- {
		if t := &terms[i]; t.Token == token {
			if t.Ended == "" {
				t.End, t.Ended = at, ended
			}
			return
		}
	}
}

// endOpenTerms ends every open term of terms but own's, as a fail-over
// at start (an upper bound of its end): every term before own's is over,
// and one still open ended without a hand-off (which would have ended it
// in the status): the holder the previous status names, or one that wrote
// the log at its start but never its status.
func endOpenTerms(terms []records.Term, own uint64, start time.Time) {
	for i := range terms {
		if terms[i].Ended == "" && terms[i].Token != own {
			terms[i].End, terms[i].Ended = start, records.EndedFailOver
		}
	}
}
