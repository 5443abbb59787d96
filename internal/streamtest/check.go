package streamtest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
)

// The checkers below run over the recorded calls of a test and return
// every violation found. A checker that cannot fail proves nothing: stream's
// TestCheckersCatchViolations feeds each a violating history.

// Grant is one holding of a partition's lease, as the backend saw it.
type Grant struct {
	Partition  int
	Token      uint64
	Start, End time.Time
	Ended      bool // whether it has ended (End is then set)
}

// TermKey names one term of one partition: the calls made in it.
type TermKey struct {
	Partition int
	Token     uint64
}

// CheckCalls checks, per term: each message starts once; with max 1,
// Process calls start in strictly increasing offset order; never more than
// max run at once; Window runs only when no
// Process call is pending, and no Process call starts while it runs; a
// checkpoint is saved only when no Process or Window call is pending.
// It returns the highest concurrency seen.
func CheckCalls(evs []Event, max int) (seen int, errs []error) {
	type state struct {
		running map[int64]bool
		started map[int64]bool
		window  bool
		saving  bool
		last    int64
	}
	terms := map[TermKey]*state{}
	for i, e := range evs {
		k := TermKey{e.Partition, e.Token}
		s := terms[k]
		if s == nil {
			s = &state{running: map[int64]bool{}, started: map[int64]bool{}, last: -1}
			terms[k] = s
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("event %d (%v): %s", i, e, fmt.Sprintf(format, args...)))
		}
		switch e.Kind {
		case ProcessStart:
			// With one call at a time, calls start in offset order; with
			// more, calls handed out in order may begin in any order.
			if max == 1 && e.Offset <= s.last {
				bad("offset %d started after %d: out of order", e.Offset, s.last)
			}
			if s.started[e.Offset] {
				bad("offset %d started twice in one term", e.Offset)
			}
			s.started[e.Offset] = true
			s.last = e.Offset
			if s.window {
				bad("Process started while Window runs")
			}
			if s.saving {
				bad("Process started while a checkpoint is saved")
			}
			s.running[e.Offset] = true
			if len(s.running) > max {
				bad("%d Process calls in flight, more than %d", len(s.running), max)
			}
			seen = maxInt(seen, len(s.running))
		case ProcessEnd:
			delete(s.running, e.Offset)
		case WindowStart:
			if len(s.running) > 0 {
				bad("Window started with %d Process calls pending", len(s.running))
			}
			if s.saving {
				bad("Window started while a checkpoint is saved")
			}
			s.window = true
		case WindowEnd:
			s.window = false
		case CheckpointSave:
			if len(s.running) > 0 || s.window {
				bad("checkpoint saved with %d Process calls pending (window %v)", len(s.running), s.window)
			}
			s.saving = true
		case CheckpointSaved:
			s.saving = false
		}
	}
	return seen, errs
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// CheckCheckpoints checks every accepted checkpoint: it covers only
// processed messages (every offset below it had a successful Process call
// before the save began; offsets are contiguous from 0 in the tests), it
// never moves backwards, and it came from the term holding the partition's
// lease at the time (no write of a stale term accepted; checked against
// grants when given, else only by token order). Every load returns the last
// accepted checkpoint, or one whose write had an unsure outcome (an error
// other than a refusal: on a real network a write may take effect although
// its answer is lost).
func CheckCheckpoints(evs []Event, grants []Grant) []error {
	var errs []error
	done := map[int]map[int64]bool{}
	unsure := map[int]map[int64]bool{} // checkpoints written with an unsure outcome since the last load
	last := map[int]int64{}            // last accepted checkpoint per partition
	lastToken := map[int]uint64{}      // its token
	for i, e := range evs {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("event %d (%v): %s", i, e, fmt.Sprintf(format, args...)))
		}
		switch e.Kind {
		case ProcessEnd:
			if e.Err == nil {
				if done[e.Partition] == nil {
					done[e.Partition] = map[int64]bool{}
				}
				done[e.Partition][e.Offset] = true
			}
		case CheckpointLoad:
			want, ok := last[e.Partition]
			if !ok {
				want = -1
			}
			if e.Err == nil && e.Offset != want {
				if !unsure[e.Partition][e.Offset] {
					bad("loaded checkpoint %d, the last accepted is %d", e.Offset, want)
				}
				last[e.Partition] = e.Offset // an unsure write took effect
			}
			delete(unsure, e.Partition)
		case CheckpointSave:
			for off := int64(0); off < e.Offset; off++ {
				if !done[e.Partition][off] {
					bad("checkpoint %d covers offset %d, not processed", e.Offset, off)
					break
				}
			}
		case CheckpointSaved:
			if e.Err != nil {
				if !errors.Is(e.Err, simba.ErrTermExpired) && !errors.Is(e.Err, backend.ErrConflict) {
					// Neither refused nor confirmed: a write whose answer
					// was lost may have taken effect.
					if unsure[e.Partition] == nil {
						unsure[e.Partition] = map[int64]bool{}
					}
					unsure[e.Partition][e.Offset] = true
				}
				continue
			}
			if prev, ok := last[e.Partition]; ok && e.Offset < prev {
				bad("checkpoint moved backwards from %d", prev)
			}
			if e.Token < lastToken[e.Partition] {
				bad("accepted from token %d after token %d wrote", e.Token, lastToken[e.Partition])
			}
			last[e.Partition], lastToken[e.Partition] = e.Offset, e.Token
			if grants != nil && !holding(grants, e.Partition, e.Token, e.At) {
				bad("accepted while token %d did not hold the partition's lease", e.Token)
			}
		}
	}
	return errs
}

// holding reports whether token held partition's lease at instant at.
func holding(grants []Grant, partition int, token uint64, at time.Time) bool {
	for _, g := range grants {
		if g.Partition == partition && g.Token == token {
			return !g.Start.After(at) && (!g.Ended || !g.End.Before(at))
		}
	}
	return false
}

// CheckAtLeastOnce checks that every offset in [0, m) of every partition in
// [0, p) was processed successfully at least once.
func CheckAtLeastOnce(evs []Event, p int, m int64) []error {
	done := map[[2]int64]bool{}
	for _, e := range evs {
		if e.Kind == ProcessEnd && e.Err == nil {
			done[[2]int64{int64(e.Partition), e.Offset}] = true
		}
	}
	var errs []error
	for part := range p {
		var missing []int64
		for off := range m {
			if !done[[2]int64{int64(part), off}] {
				missing = append(missing, off)
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("partition %d: offsets %v never processed", part, missing))
		}
	}
	return errs
}

// CheckResume checks that every term's lowest Process call is at the
// checkpoint it loaded (0 when none): it neither skips nor repeats what its
// predecessors checkpointed.
func CheckResume(evs []Event) []error {
	loaded := map[TermKey]int64{}
	lowest := map[TermKey]int64{}
	var order []TermKey
	for _, e := range evs {
		k := TermKey{e.Partition, e.Token}
		switch e.Kind {
		case CheckpointLoad:
			loaded[k] = max(e.Offset, 0)
		case ProcessStart:
			if low, ok := lowest[k]; !ok || e.Offset < low {
				if !ok {
					order = append(order, k)
				}
				lowest[k] = e.Offset
			}
		}
	}
	var errs []error
	for _, k := range order {
		if want, ok := loaded[k]; !ok || lowest[k] != want {
			errs = append(errs, fmt.Errorf("partition %d, token %d: lowest message %d, but it loaded %d (found %v)", k.Partition, k.Token, lowest[k], want, ok))
		}
	}
	return errs
}

// Dump logs the events, for failed tests.
func Dump(t *testing.T, evs []Event) {
	t.Helper()
	if len(evs) > 400 {
		t.Logf("%d events; the last 400:", len(evs))
		evs = evs[len(evs)-400:]
	}
	for _, e := range evs {
		t.Log(e)
	}
}

// Duplicates returns how many successful Process calls repeated a message
// already processed.
func Duplicates(evs []Event) int {
	seen := map[[2]int64]bool{}
	n := 0
	for _, e := range evs {
		if e.Kind == ProcessEnd && e.Err == nil {
			k := [2]int64{int64(e.Partition), e.Offset}
			if seen[k] {
				n++
			}
			seen[k] = true
		}
	}
	return n
}
