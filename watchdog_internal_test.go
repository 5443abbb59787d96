package simba

import (
	"math"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// watchedTerm returns a term of a generation that never ends, with a
// watchdog of limit whose stuck calls end the term and are recorded: fired
// returns, for each, the offset it came at and the idle time it reported.
func watchedTerm(limit time.Duration) (term *Term, fired func() []time.Duration) {
	g := &generation{base: time.Now()}
	g.deadline.Store(math.MaxInt64)
	term = newTerm(TermRef{Election: "e", Partition: -1}, g)
	var mu sync.Mutex
	var calls []time.Duration
	term.dog = newWatchdog(term, limit, func(idle time.Duration) {
		mu.Lock()
		calls = append(calls, g.now(), idle)
		mu.Unlock()
		term.revoke(RevokeStuck, nil)
	})
	return term, func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), calls...)
	}
}

// TestWatchdogOneTimerPerTerm: the watchdog keeps one timer for the term,
// whatever the number of runs and Progress calls; overlapping runs keep it
// armed until the last returns; it fires at the last progress plus the
// limit, once, and leaves the timer stopped.
func TestWatchdogOneTimerPerTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 5 * time.Second
		term, fired := watchedTerm(limit)
		w := term.dog

		term.Progress() // no run going: recorded, nothing armed
		if w.timer != nil {
			t.Fatal("a timer before the first run")
		}
		term.watchdogOn()
		timer := w.timer
		for range 100 {
			time.Sleep(limit / 10)
			term.Progress()
		}
		term.watchdogOff()
		if w.timer.Stop() {
			t.Error("the timer is still pending after the run returned")
		}
		time.Sleep(time.Hour) // off between runs
		if got := fired(); len(got) != 0 {
			t.Fatalf("fired between runs: %v", got)
		}

		start := w.term.gen.now()
		term.watchdogOn()
		term.watchdogOn() // a second, overlapping run
		if w.timer != timer {
			t.Error("a second timer for the term")
		}
		time.Sleep(2 * time.Second)
		term.Progress()
		term.watchdogOff() // one of the two returned: still watching
		synctest.Wait()
		time.Sleep(time.Minute)
		want := []time.Duration{start + 2*time.Second + limit, limit}
		if got := fired(); !slices.Equal(got, want) {
			t.Errorf("fired (at, idle) %v, want %v", got, want)
		}
		if w.timer.Stop() {
			t.Error("the timer is pending after it fired")
		}
		term.watchdogOff()
		term.watchdogOn() // the term is over: a late run arms nothing
		if w.timer.Stop() {
			t.Error("the timer was armed for a term given up")
		}
		term.watchdogOff()
	})
}

// TestProgressAllocatesNothing: Progress is an atomic store, with a
// watchdog and without.
func TestProgressAllocatesNothing(t *testing.T) {
	term, _ := watchedTerm(time.Second)
	if n := testing.AllocsPerRun(1000, term.Progress); n != 0 {
		t.Errorf("Progress allocates %v times a call", n)
	}
	term.dog = nil
	if n := testing.AllocsPerRun(1000, term.Progress); n != 0 {
		t.Errorf("Progress without a watchdog allocates %v times a call", n)
	}
}

// BenchmarkProgress measures Term.Progress under a watchdog, alone and
// from parallel goroutines (run with -benchmem: 0 allocations).
func BenchmarkProgress(b *testing.B) {
	term, _ := watchedTerm(time.Hour)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			term.Progress()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				term.Progress()
			}
		})
	})
	b.Run("none", func(b *testing.B) {
		term, _ := watchedTerm(time.Hour)
		term.dog = nil
		b.ReportAllocs()
		for b.Loop() {
			term.Progress()
		}
	})
}
