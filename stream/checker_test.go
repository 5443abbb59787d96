package stream_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// The checkers below run over the recorded calls of a test and return
// every violation found. A checker that cannot fail proves nothing:
// TestCheckersCatchViolations feeds each a violating history.

// grant is one holding of a partition's lease, as the backend saw it.
type grant struct {
	partition  int
	token      uint64
	start, end time.Time
	ended      bool
}

// grantsOf returns the backend's holdings of the group's partitions.
func grantsOf(b *memory.Backend) []grant {
	var out []grant
	for _, g := range b.History() {
		var p int
		if _, err := fmt.Sscanf(g.Name, group+".%d", &p); err != nil {
			continue
		}
		out = append(out, grant{partition: p, token: g.Token, start: g.Start, end: g.End, ended: g.Ended})
	}
	return out
}

// term is the calls of one term of one partition.
type termKey struct {
	partition int
	token     uint64
}

// checkCalls checks, per term: each message starts once; with max 1,
// Process calls start in strictly increasing offset order; never more than
// max run at once; Window runs only when no
// Process call is pending, and no Process call starts while it runs; a
// checkpoint is saved only when no Process or Window call is pending.
// It returns the highest concurrency seen.
func checkCalls(evs []ev, max int) (seen int, errs []error) {
	type state struct {
		running map[int64]bool
		started map[int64]bool
		window  bool
		saving  bool
		last    int64
	}
	terms := map[termKey]*state{}
	for i, e := range evs {
		k := termKey{e.partition, e.token}
		s := terms[k]
		if s == nil {
			s = &state{running: map[int64]bool{}, started: map[int64]bool{}, last: -1}
			terms[k] = s
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("event %d (%v): %s", i, e, fmt.Sprintf(format, args...)))
		}
		switch e.kind {
		case kStart:
			// With one call at a time, calls start in offset order; with
			// more, calls handed out in order may begin in any order.
			if max == 1 && e.offset <= s.last {
				bad("offset %d started after %d: out of order", e.offset, s.last)
			}
			if s.started[e.offset] {
				bad("offset %d started twice in one term", e.offset)
			}
			s.started[e.offset] = true
			s.last = e.offset
			if s.window {
				bad("Process started while Window runs")
			}
			if s.saving {
				bad("Process started while a checkpoint is saved")
			}
			s.running[e.offset] = true
			if len(s.running) > max {
				bad("%d Process calls in flight, more than %d", len(s.running), max)
			}
			seen = maxInt(seen, len(s.running))
		case kEnd:
			delete(s.running, e.offset)
		case kWStart:
			if len(s.running) > 0 {
				bad("Window started with %d Process calls pending", len(s.running))
			}
			if s.saving {
				bad("Window started while a checkpoint is saved")
			}
			s.window = true
		case kWEnd:
			s.window = false
		case kSave:
			if len(s.running) > 0 || s.window {
				bad("checkpoint saved with %d Process calls pending (window %v)", len(s.running), s.window)
			}
			s.saving = true
		case kSaved:
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

// checkCheckpoints checks every accepted checkpoint: it covers only
// processed messages (every offset below it had a successful Process call
// before the save began; offsets are contiguous from 0 in the tests), it
// never moves backwards, and it came from the term holding the partition's
// lease at the time (no write of a stale term accepted; checked against
// grants when given, else only by token order). Every load returns the last
// accepted checkpoint, or one whose write had an unsure outcome (an error
// other than a refusal: on a real network a write may take effect although
// its answer is lost).
func checkCheckpoints(evs []ev, grants []grant) []error {
	var errs []error
	done := map[int]map[int64]bool{}
	unsure := map[int]map[int64]bool{} // checkpoints written with an unsure outcome since the last load
	last := map[int]int64{}            // last accepted checkpoint per partition
	lastToken := map[int]uint64{}      // its token
	for i, e := range evs {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("event %d (%v): %s", i, e, fmt.Sprintf(format, args...)))
		}
		switch e.kind {
		case kEnd:
			if e.err == nil {
				if done[e.partition] == nil {
					done[e.partition] = map[int64]bool{}
				}
				done[e.partition][e.offset] = true
			}
		case kLoad:
			want, ok := last[e.partition]
			if !ok {
				want = -1
			}
			if e.err == nil && e.offset != want {
				if !unsure[e.partition][e.offset] {
					bad("loaded checkpoint %d, the last accepted is %d", e.offset, want)
				}
				last[e.partition] = e.offset // an unsure write took effect
			}
			delete(unsure, e.partition)
		case kSave:
			for off := int64(0); off < e.offset; off++ {
				if !done[e.partition][off] {
					bad("checkpoint %d covers offset %d, not processed", e.offset, off)
					break
				}
			}
		case kSaved:
			if e.err != nil {
				if !errors.Is(e.err, simba.ErrTermExpired) && !errors.Is(e.err, backend.ErrConflict) {
					// Neither refused nor confirmed: a write whose answer
					// was lost may have taken effect.
					if unsure[e.partition] == nil {
						unsure[e.partition] = map[int64]bool{}
					}
					unsure[e.partition][e.offset] = true
				}
				continue
			}
			if prev, ok := last[e.partition]; ok && e.offset < prev {
				bad("checkpoint moved backwards from %d", prev)
			}
			if e.token < lastToken[e.partition] {
				bad("accepted from token %d after token %d wrote", e.token, lastToken[e.partition])
			}
			last[e.partition], lastToken[e.partition] = e.offset, e.token
			if grants != nil && !holding(grants, e.partition, e.token, e.at) {
				bad("accepted while token %d did not hold the partition's lease", e.token)
			}
		}
	}
	return errs
}

// holding reports whether token held partition's lease at instant at.
func holding(grants []grant, partition int, token uint64, at time.Time) bool {
	for _, g := range grants {
		if g.partition == partition && g.token == token {
			return !g.start.After(at) && (!g.ended || !g.end.Before(at))
		}
	}
	return false
}

// checkAtLeastOnce checks that every offset in [0, m) of every partition in
// [0, p) was processed successfully at least once.
func checkAtLeastOnce(evs []ev, p int, m int64) []error {
	done := map[[2]int64]bool{}
	for _, e := range evs {
		if e.kind == kEnd && e.err == nil {
			done[[2]int64{int64(e.partition), e.offset}] = true
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

// checkResume checks that every term's lowest Process call is at the
// checkpoint it loaded (0 when none): it neither skips nor repeats what its
// predecessors checkpointed.
func checkResume(evs []ev) []error {
	loaded := map[termKey]int64{}
	lowest := map[termKey]int64{}
	var order []termKey
	for _, e := range evs {
		k := termKey{e.partition, e.token}
		switch e.kind {
		case kLoad:
			loaded[k] = max(e.offset, 0)
		case kStart:
			if low, ok := lowest[k]; !ok || e.offset < low {
				if !ok {
					order = append(order, k)
				}
				lowest[k] = e.offset
			}
		}
	}
	var errs []error
	for _, k := range order {
		if want, ok := loaded[k]; !ok || lowest[k] != want {
			errs = append(errs, fmt.Errorf("partition %d, token %d: lowest message %d, but it loaded %d (found %v)", k.partition, k.token, lowest[k], want, ok))
		}
	}
	return errs
}

// checkAll runs every checker and fails the test on any violation.
func checkAll(t *testing.T, evs []ev, b *memory.Backend, maxConcurrency, partitions int, m int64) (concurrency int) {
	t.Helper()
	seen, errs := checkCalls(evs, maxConcurrency)
	errs = append(errs, checkCheckpoints(evs, grantsOf(b))...)
	errs = append(errs, checkAtLeastOnce(evs, partitions, m)...)
	errs = append(errs, checkResume(evs)...)
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		dump(t, evs)
	}
	return seen
}

// dump logs the events, for failed tests.
func dump(t *testing.T, evs []ev) {
	t.Helper()
	if len(evs) > 400 {
		t.Logf("%d events; the last 400:", len(evs))
		evs = evs[len(evs)-400:]
	}
	for _, e := range evs {
		t.Log(e)
	}
}

// duplicates returns how many successful Process calls repeated a message
// already processed.
func duplicates(evs []ev) int {
	seen := map[[2]int64]bool{}
	n := 0
	for _, e := range evs {
		if e.kind == kEnd && e.err == nil {
			k := [2]int64{int64(e.partition), e.offset}
			if seen[k] {
				n++
			}
			seen[k] = true
		}
	}
	return n
}

func TestCheckersCatchViolations(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	e := func(k kind, token uint64, off int64, s int) ev {
		return ev{kind: k, node: "a", token: token, offset: off, at: at(s)}
	}
	grants := []grant{{partition: 0, token: 1, start: at(0), end: at(10), ended: true}, {partition: 0, token: 2, start: at(10)}}
	failed := errors.New("failed")
	calls := []struct {
		name string
		evs  []ev
		max  int
	}{
		{"out of order", []ev{e(kStart, 1, 1, 1), e(kEnd, 1, 1, 1), e(kStart, 1, 0, 1)}, 1},
		{"overlap with concurrency 1", []ev{e(kStart, 1, 0, 1), e(kStart, 1, 1, 1)}, 1},
		{"twice in a term", []ev{e(kStart, 1, 0, 1), e(kEnd, 1, 0, 1), e(kStart, 1, 0, 1)}, 2},
		{"more than max", []ev{e(kStart, 1, 0, 1), e(kStart, 1, 1, 1), e(kStart, 1, 2, 1)}, 2},
		{"window with pending process", []ev{e(kStart, 1, 0, 1), e(kWStart, 1, -1, 1)}, 1},
		{"process during window", []ev{e(kWStart, 1, -1, 1), e(kStart, 1, 0, 1)}, 1},
		{"checkpoint during process", []ev{e(kStart, 1, 0, 1), e(kSave, 1, 0, 1)}, 1},
		{"process during checkpoint", []ev{e(kSave, 1, 0, 1), e(kStart, 1, 0, 1)}, 1},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if _, errs := checkCalls(c.evs, c.max); len(errs) == 0 {
				t.Error("checkCalls found nothing")
			}
		})
	}
	ok := func(off int64) ev { return e(kEnd, 1, off, 1) }
	checkpoints := []struct {
		name string
		evs  []ev
	}{
		{"covers unprocessed", []ev{ok(0), e(kSave, 1, 2, 2)}},
		{"covers failed", []ev{ok(0), {kind: kEnd, token: 1, offset: 1, err: failed}, e(kSave, 1, 2, 2)}},
		{"moves backwards", []ev{ok(0), ok(1), e(kSaved, 1, 2, 2), e(kSaved, 1, 1, 3)}},
		{"stale token after newer", []ev{ok(0), ok(1), e(kSaved, 2, 1, 11), e(kSaved, 1, 2, 11)}},
		{"accepted outside its holding", []ev{ok(0), e(kSaved, 1, 1, 12)}},
		{"load not the last", []ev{ok(0), e(kSaved, 1, 1, 2), e(kLoad, 2, 0, 11)}},
		{"load of a refused write", []ev{ok(0), ok(1), e(kSaved, 1, 1, 2),
			{kind: kSaved, token: 1, offset: 2, err: backend.ErrConflict, at: at(3)}, e(kLoad, 2, 2, 11)}},
	}
	for _, c := range checkpoints {
		t.Run(c.name, func(t *testing.T) {
			if errs := checkCheckpoints(c.evs, grants); len(errs) == 0 {
				t.Error("checkCheckpoints found nothing")
			}
		})
	}
	t.Run("message lost", func(t *testing.T) {
		if errs := checkAtLeastOnce([]ev{ok(0), ok(2)}, 1, 3); len(errs) == 0 {
			t.Error("checkAtLeastOnce found nothing")
		}
	})
	t.Run("resume elsewhere", func(t *testing.T) {
		if errs := checkResume([]ev{e(kLoad, 2, 5, 11), e(kStart, 2, 6, 11)}); len(errs) == 0 {
			t.Error("checkResume found nothing")
		}
	})
	t.Run("load of an unsure write passes", func(t *testing.T) {
		lost := errors.New("connection reset")
		evs := []ev{ok(0), ok(1), e(kSave, 1, 2, 2), {kind: kSaved, token: 1, offset: 2, err: lost, at: at(2)}, e(kLoad, 2, 2, 11)}
		for _, err := range checkCheckpoints(evs, grants) {
			t.Error(err)
		}
	})
	t.Run("clean history passes", func(t *testing.T) {
		evs := []ev{e(kLoad, 1, -1, 0), e(kStart, 1, 0, 1), ok(0), e(kSave, 1, 1, 2), e(kSaved, 1, 1, 2),
			e(kLoad, 2, 1, 11), e(kStart, 2, 1, 11), e(kEnd, 2, 1, 11), e(kSave, 2, 2, 12), e(kSaved, 2, 2, 12)}
		_, errs := checkCalls(evs, 1)
		errs = append(errs, checkCheckpoints(evs, grants)...)
		errs = append(errs, checkAtLeastOnce(evs, 1, 2)...)
		errs = append(errs, checkResume(evs)...)
		for _, err := range errs {
			t.Error(err)
		}
	})
}
