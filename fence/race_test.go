package fence_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba/fence"
)

// The race tests: two writers, the deposed leader "old" with token oldToken
// and the new leader "new" with oldToken+1, write one value of a resource in
// transactions of their own, interleaved in every order and concurrently.
// Whatever the interleaving, with the fence:
//
//   - every write of new is accepted, and the final value is new's;
//   - every write of old begun after a write of new was recorded (its
//     transaction returned) is rejected with ErrStale;
//   - where the resource tells the commit order (SQL: a version column
//     bumped in the same transaction; etcd: the revision), no write of
//     old committed after a write of new.
//
// Without the fence (the negative control) the same checks find old's
// stale writes winning, so the tests can fail.
const oldToken = 41

// Sizes of the concurrent race: rounds (given per resource) of
// raceGoroutines goroutines per writer, each making raceWrites writes; the
// negative control plays negativeRounds rounds.
const (
	raceGoroutines = 4
	raceWrites     = 5
	negativeRounds = 4
)

// register is one value of a resource under test.
type register interface {
	// write writes value with token in one transaction, through the fence
	// when guarded. It returns the write's place in the resource's commit
	// order when the resource tells it (else 0), and an error matching
	// ErrStale when the fence rejected the write.
	write(ctx context.Context, token uint64, value string, guarded bool) (order int64, err error)
	// read returns the value.
	read(ctx context.Context) (string, error)
}

// newRegister returns a register of its own: a resource name and a row or
// key that no other register of the test uses.
type newRegister func(t *testing.T) register

// result is the outcome of one write.
type result struct {
	writer   string // "old" or "new"
	value    string
	start    time.Time // when the write began
	end      time.Time // when it returned
	accepted bool
	order    int64
	err      error // neither nil nor ErrStale
}

func (r result) String() string {
	return fmt.Sprintf("%s accepted=%v order=%d", r.value, r.accepted, r.order)
}

// tokenOf returns the token of writer.
func tokenOf(writer string) uint64 {
	if writer == "new" {
		return oldToken + 1
	}
	return oldToken
}

// doWrite makes one write of writer to reg and returns its result.
func doWrite(ctx context.Context, reg register, writer, value string, guarded bool) result {
	r := result{writer: writer, value: value, start: time.Now()}
	order, err := reg.write(ctx, tokenOf(writer), value, guarded)
	r.end = time.Now()
	switch {
	case err == nil:
		r.accepted, r.order = true, order
	case !errors.Is(err, fence.ErrStale):
		r.err = err
	}
	return r
}

// violations returns what breaks the fencing rules in the results of one
// register whose final value is final.
func violations(rs []result, final string) []string {
	var v []string
	var recorded time.Time // the end of the first accepted write of new
	newOrder := int64(math.MaxInt64)
	for _, r := range rs {
		if r.writer != "new" || !r.accepted {
			continue
		}
		if recorded.IsZero() || r.end.Before(recorded) {
			recorded = r.end
		}
		if r.order > 0 {
			newOrder = min(newOrder, r.order)
		}
	}
	for _, r := range rs {
		if r.writer != "old" || !r.accepted {
			continue
		}
		if !recorded.IsZero() && r.start.After(recorded) {
			v = append(v, fmt.Sprintf("write %s accepted, begun %v after token %d was recorded", r.value, r.start.Sub(recorded), oldToken+1))
		}
		if r.order > newOrder {
			v = append(v, fmt.Sprintf("write %s committed (order %d) after a write of token %d (order %d)", r.value, r.order, oldToken+1, newOrder))
		}
	}
	if !recorded.IsZero() && !strings.HasPrefix(final, "new") {
		v = append(v, fmt.Sprintf("the final value is %q, not the new leader's", final))
	}
	return v
}

// failures reports the results that failed outright, and new writes that
// were rejected, as test errors.
func failures(t *testing.T, rs []result) {
	t.Helper()
	for _, r := range rs {
		if r.err != nil {
			t.Errorf("write %s: %v", r.value, r.err)
		} else if r.writer == "new" && !r.accepted {
			t.Errorf("write %s of the newest token was rejected", r.value)
		}
	}
}

// interleavings returns every order of a writes by "old" and b by "new".
func interleavings(a, b int) [][]string {
	if a == 0 && b == 0 {
		return [][]string{nil}
	}
	var out [][]string
	if a > 0 {
		for _, rest := range interleavings(a-1, b) {
			out = append(out, append([]string{"old"}, rest...))
		}
	}
	if b > 0 {
		for _, rest := range interleavings(a, b-1) {
			out = append(out, append([]string{"new"}, rest...))
		}
	}
	return out
}

// raceSequential writes in every order of 3 writes by each writer, one at a
// time, on a register of its own per order, and checks the outcome of each
// write exactly. It returns the number of orders whose results the checks
// found violations in.
func raceSequential(t *testing.T, reg newRegister, guarded bool) (violated, orders int) {
	t.Helper()
	ctx := testCtx(t)
	for _, order := range interleavings(3, 3) {
		r := reg(t)
		var rs []result
		newSeen := false
		for i, w := range order {
			res := doWrite(ctx, r, w, fmt.Sprintf("%s-%d", w, i), guarded)
			rs = append(rs, res)
			if guarded {
				if want := w == "new" || !newSeen; res.accepted != want && res.err == nil {
					t.Errorf("order %v, write %d (%s): accepted=%v, want %v", order, i, w, res.accepted, want)
				}
			}
			newSeen = newSeen || w == "new"
		}
		failures(t, rs)
		final, err := r.read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last := ""
		for i, w := range order {
			if w == "new" || (!guarded && i == len(order)-1) {
				last = fmt.Sprintf("%s-%d", w, i)
			}
		}
		if guarded && final != last {
			t.Errorf("order %v: final value %q, want %q", order, final, last)
		}
		if v := violations(rs, final); len(v) > 0 {
			violated++
			if guarded {
				t.Errorf("order %v: %s", order, strings.Join(v, "; "))
			}
		}
		orders++
	}
	return violated, orders
}

// raceConcurrent runs rounds rounds, each on a register of its own, of
// raceGoroutines goroutines per writer making raceWrites writes each. In
// even rounds old leads and new starts once old has made k writes, in odd
// rounds the other way round, with k going through 0..all; after that both
// write at once; in the last two rounds the follower starts when the leader
// is done. It returns the number of rounds with violations and the number
// of writes.
func raceConcurrent(t *testing.T, reg newRegister, rounds int, guarded bool) (violated, writes int) {
	t.Helper()
	ctx := testCtx(t)
	perWriter := raceGoroutines * raceWrites
	for round := range rounds {
		r := reg(t)
		leader, follower := "old", "new"
		if round%2 == 1 {
			leader, follower = follower, leader
		}
		k := (round / 2 * 7) % (perWriter + 1)
		if round >= rounds-2 {
			k = perWriter
		}
		var (
			mu      sync.Mutex
			rs      []result
			led     int
			release = make(chan struct{})
			once    sync.Once
			wg      sync.WaitGroup
		)
		if k == 0 {
			once.Do(func() { close(release) })
		}
		for _, w := range []string{leader, follower} {
			for g := range raceGoroutines {
				wg.Go(func() {
					if w == follower {
						<-release
					}
					for i := range raceWrites {
						res := doWrite(ctx, r, w, fmt.Sprintf("%s-%d.%d", w, g, i), guarded)
						mu.Lock()
						rs = append(rs, res)
						if w == leader {
							if led++; led == k {
								once.Do(func() { close(release) })
							}
						}
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		failures(t, rs)
		final, err := r.read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v := violations(rs, final); len(v) > 0 {
			violated++
			if guarded {
				slices.SortFunc(rs, func(a, b result) int { return a.start.Compare(b.start) })
				t.Errorf("round %d (%s leads, %s after %d writes): %s\nwrites: %v", round, leader, follower, k, strings.Join(v, "; "), rs)
			}
		}
		writes += len(rs)
	}
	return violated, writes
}

// race runs the sequential race and rounds rounds of the concurrent race on
// reg with the fence, and the negative control without it.
func race(t *testing.T, reg newRegister, rounds int) {
	start := time.Now()
	_, orders := raceSequential(t, reg, true)
	violated, writes := raceConcurrent(t, reg, rounds, true)
	t.Logf("fenced: %d orders of 3+3 writes, then %d rounds of %d concurrent writers, %d writes: %d rounds with violations (%v)",
		orders, rounds, 2*raceGoroutines, writes, violated, time.Since(start).Round(time.Millisecond))

	// The negative control: without the fence, old's writes after new's
	// win. Every order in which old writes after new must be caught.
	start = time.Now()
	violated, orders = raceSequential(t, reg, false)
	if want := orders - 1; violated != want { // all but old,old,old,new,new,new
		t.Errorf("negative control: the checks caught %d of the %d orders in which a stale write followed", violated, want)
	}
	cviolated, writes := raceConcurrent(t, reg, negativeRounds, false)
	_ = writes
	if cviolated == 0 {
		t.Errorf("negative control: no concurrent round without the fence was caught")
	}
	t.Logf("unfenced (negative control): stale writes won in %d of %d orders and %d of %d concurrent rounds (%d writes) (%v)",
		violated, orders, cviolated, negativeRounds, writes, time.Since(start).Round(time.Millisecond))
}

func TestInterleavings(t *testing.T) {
	all := interleavings(3, 3)
	if len(all) != 20 {
		t.Fatalf("%d interleavings of 3+3, want 20", len(all))
	}
	seen := map[string]bool{}
	for _, o := range all {
		seen[strings.Join(o, ",")] = true
	}
	if len(seen) != 20 {
		t.Errorf("duplicate interleavings")
	}
}
