package fencetest

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

// The race tests (Race): two writers, the deposed leader "old" with token OldToken
// and the new leader "new" with OldToken+1, write one value of a resource in
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
const OldToken = 41

// Sizes of the concurrent race: rounds (given per resource) of
// raceGoroutines goroutines per writer, each making raceWrites writes; the
// negative control plays negativeRounds rounds.
const (
	raceGoroutines = 4
	raceWrites     = 5
	negativeRounds = 4
)

// Register is one value of a resource under test.
type Register interface {
	// Write writes value with token in one transaction, through the fence
	// when guarded. It returns the write's place in the resource's commit
	// order when the resource tells it (else 0), and an error matching
	// ErrStale when the fence rejected the write.
	Write(ctx context.Context, token uint64, value string, guarded bool) (order int64, err error)
	// Read returns the value.
	Read(ctx context.Context) (string, error)
}

// NewRegister returns a Register of its own: a resource name and a row or
// key that no other Register of the test uses.
type NewRegister func(t *testing.T) Register

// Result is the outcome of one write.
type Result struct {
	Writer   string // "old" or "new"
	Value    string
	Start    time.Time // when the write began
	End      time.Time // when it returned
	Accepted bool
	Order    int64
	Err      error // neither nil nor ErrStale
}

func (r Result) String() string {
	return fmt.Sprintf("%s accepted=%v order=%d", r.Value, r.Accepted, r.Order)
}

// TokenOf returns the token of writer.
func TokenOf(writer string) uint64 {
	if writer == "new" {
		return OldToken + 1
	}
	return OldToken
}

// doWrite makes one write of writer to reg and returns its Result.
func doWrite(ctx context.Context, reg Register, writer, value string, guarded bool) Result {
	r := Result{Writer: writer, Value: value, Start: time.Now()}
	order, err := reg.Write(ctx, TokenOf(writer), value, guarded)
	r.End = time.Now()
	switch {
	case err == nil:
		r.Accepted, r.Order = true, order
	case !errors.Is(err, fence.ErrStale):
		r.Err = err
	}
	return r
}

// Violations returns what breaks the fencing rules in the results of one
// Register whose final value is final.
func Violations(rs []Result, final string) []string {
	var v []string
	var recorded time.Time // the end of the first accepted write of new
	newOrder := int64(math.MaxInt64)
	for _, r := range rs {
		if r.Writer != "new" || !r.Accepted {
			continue
		}
		if recorded.IsZero() || r.End.Before(recorded) {
			recorded = r.End
		}
		if r.Order > 0 {
			newOrder = min(newOrder, r.Order)
		}
	}
	for _, r := range rs {
		if r.Writer != "old" || !r.Accepted {
			continue
		}
		if !recorded.IsZero() && r.Start.After(recorded) {
			v = append(v, fmt.Sprintf("write %s accepted, begun %v after token %d was recorded", r.Value, r.Start.Sub(recorded), OldToken+1))
		}
		if r.Order > newOrder {
			v = append(v, fmt.Sprintf("write %s committed (order %d) after a write of token %d (order %d)", r.Value, r.Order, OldToken+1, newOrder))
		}
	}
	if !recorded.IsZero() && !strings.HasPrefix(final, "new") {
		v = append(v, fmt.Sprintf("the final value is %q, not the new leader's", final))
	}
	return v
}

// Failures reports the results that failed outright, and new writes that
// were rejected, as test errors.
func Failures(t *testing.T, rs []Result) {
	t.Helper()
	for _, r := range rs {
		if r.Err != nil {
			t.Errorf("write %s: %v", r.Value, r.Err)
		} else if r.Writer == "new" && !r.Accepted {
			t.Errorf("write %s of the newest token was rejected", r.Value)
		}
	}
}

// Interleavings returns every order of a writes by "old" and b by "new".
func Interleavings(a, b int) [][]string {
	if a == 0 && b == 0 {
		return [][]string{nil}
	}
	var out [][]string
	if a > 0 {
		for _, rest := range Interleavings(a-1, b) {
			out = append(out, append([]string{"old"}, rest...))
		}
	}
	if b > 0 {
		for _, rest := range Interleavings(a, b-1) {
			out = append(out, append([]string{"new"}, rest...))
		}
	}
	return out
}

// raceSequential writes in every order of 3 writes by each writer, one at a
// time, on a Register of its own per order, and checks the outcome of each
// write exactly. It returns the number of orders whose results the checks
// found Violations in.
func raceSequential(t *testing.T, reg NewRegister, guarded bool) (violated, orders int) {
	t.Helper()
	ctx := Ctx(t)
	for _, order := range Interleavings(3, 3) {
		r := reg(t)
		var rs []Result
		newSeen := false
		for i, w := range order {
			res := doWrite(ctx, r, w, fmt.Sprintf("%s-%d", w, i), guarded)
			rs = append(rs, res)
			if guarded {
				if want := w == "new" || !newSeen; res.Accepted != want && res.Err == nil {
					t.Errorf("order %v, write %d (%s): accepted=%v, want %v", order, i, w, res.Accepted, want)
				}
			}
			newSeen = newSeen || w == "new"
		}
		Failures(t, rs)
		final, err := r.Read(ctx)
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
		if v := Violations(rs, final); len(v) > 0 {
			violated++
			if guarded {
				t.Errorf("order %v: %s", order, strings.Join(v, "; "))
			}
		}
		orders++
	}
	return violated, orders
}

// raceConcurrent runs rounds rounds, each on a Register of its own, of
// raceGoroutines goroutines per writer making raceWrites writes each. In
// even rounds old leads and new starts once old has made k writes, in odd
// rounds the other way round, with k going through 0..all; after that both
// write at once; in the last two rounds the follower starts when the leader
// is done. It returns the number of rounds with Violations and the number
// of writes.
func raceConcurrent(t *testing.T, reg NewRegister, rounds int, guarded bool) (violated, writes int) {
	t.Helper()
	ctx := Ctx(t)
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
			rs      []Result
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
		Failures(t, rs)
		final, err := r.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v := Violations(rs, final); len(v) > 0 {
			violated++
			if guarded {
				slices.SortFunc(rs, func(a, b Result) int { return a.Start.Compare(b.Start) })
				t.Errorf("round %d (%s leads, %s after %d writes): %s\nwrites: %v", round, leader, follower, k, strings.Join(v, "; "), rs)
			}
		}
		writes += len(rs)
	}
	return violated, writes
}

// Race runs the sequential race and rounds rounds of the concurrent race on
// reg with the fence, and the negative control without it.
func Race(t *testing.T, reg NewRegister, rounds int) {
	start := time.Now()
	_, orders := raceSequential(t, reg, true)
	violated, writes := raceConcurrent(t, reg, rounds, true)
	t.Logf("fenced: %d orders of 3+3 writes, then %d rounds of %d concurrent writers, %d writes: %d rounds with Violations (%v)",
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
