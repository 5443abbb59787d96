package stream_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// The checkers (internal/streamtest) run over the recorded calls of a test
// and return every violation found. A checker that cannot fail proves
// nothing: TestCheckersCatchViolations feeds each a violating history.

// grantsOf returns the backend's holdings of the group's partitions.
func grantsOf(b *memory.Backend) []grant {
	var out []grant
	for _, g := range b.History() {
		var p int
		if _, err := fmt.Sscanf(g.Name, group+".%d", &p); err != nil {
			continue
		}
		out = append(out, grant{Partition: p, Token: g.Token, Start: g.Start, End: g.End, Ended: g.Ended})
	}
	return out
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

func TestCheckersCatchViolations(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	e := func(k kind, token uint64, off int64, s int) ev {
		return ev{Kind: k, Node: "a", Token: token, Offset: off, At: at(s)}
	}
	grants := []grant{{Partition: 0, Token: 1, Start: at(0), End: at(10), Ended: true}, {Partition: 0, Token: 2, Start: at(10)}}
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
		{"covers failed", []ev{ok(0), {Kind: kEnd, Token: 1, Offset: 1, Err: failed}, e(kSave, 1, 2, 2)}},
		{"moves backwards", []ev{ok(0), ok(1), e(kSaved, 1, 2, 2), e(kSaved, 1, 1, 3)}},
		{"stale token after newer", []ev{ok(0), ok(1), e(kSaved, 2, 1, 11), e(kSaved, 1, 2, 11)}},
		{"accepted outside its holding", []ev{ok(0), e(kSaved, 1, 1, 12)}},
		{"load not the last", []ev{ok(0), e(kSaved, 1, 1, 2), e(kLoad, 2, 0, 11)}},
		{"load of a refused write", []ev{ok(0), ok(1), e(kSaved, 1, 1, 2),
			{Kind: kSaved, Token: 1, Offset: 2, Err: backend.ErrConflict, At: at(3)}, e(kLoad, 2, 2, 11)}},
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
		evs := []ev{ok(0), ok(1), e(kSave, 1, 2, 2), {Kind: kSaved, Token: 1, Offset: 2, Err: lost, At: at(2)}, e(kLoad, 2, 2, 11)}
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
