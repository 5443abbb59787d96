package simba

import (
	"sync"
	"sync/atomic"
	"time"
)

// watchdog is the progress watchdog of one term ([WithProgressWatchdog]).
// While at least one run of the task's function is going, limit must not
// pass without progress (a [Term.Progress] call, or the start of a run when
// none was going); when it does, stuck is called once, and ends the term.
//
// It uses one timer per term, not one per Progress call: the timer is armed
// for limit when a run starts, and when it fires it looks at the latest
// progress and, if there was some since, re-arms for the remainder only.
// Progress is then one atomic store. The timer is stopped when the last run
// returns, so the watchdog is off between a schedule's runs.
type watchdog struct {
	term  *Term
	limit time.Duration
	// stuck ends the term; idle is how long it went without progress.
	stuck func(idle time.Duration)

	// last is the offset from term.gen.base of the latest progress.
	last atomic.Int64

	mu    sync.Mutex
	runs  int         // runs going: more than one when runs overlap
	timer *time.Timer // nil until the first run starts
	fired bool        // stuck was called: the term is over
}

func newWatchdog(term *Term, limit time.Duration, stuck func(idle time.Duration)) *watchdog {
	return &watchdog{term: term, limit: limit, stuck: stuck}
}

// progress records progress now.
func (w *watchdog) progress() { w.last.Store(int64(w.term.gen.now())) }

// arm is called when a run starts: the first of overlapping runs starts the
// count of limit from now.
func (w *watchdog) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.runs++
	if w.runs > 1 || w.fired {
		return
	}
	w.progress()
	if w.timer == nil {
		w.timer = time.AfterFunc(w.limit, w.check)
	} else {
		w.timer.Reset(w.limit)
	}
}

// disarm is called when a run returns: after the last of overlapping runs
// the watchdog is off until the next run starts.
func (w *watchdog) disarm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.runs--
	if w.runs == 0 && w.timer != nil {
		w.timer.Stop()
	}
}

// check runs when the timer fires. A call that finds the watchdog off (a
// run returned as the timer fired) or the term over does nothing and leaves
// the timer stopped.
func (w *watchdog) check() {
	w.mu.Lock()
	if w.runs == 0 || w.fired {
		w.mu.Unlock()
		return
	}
	select {
	case <-w.term.Revoked(): // ended otherwise; its run is late to return
		w.mu.Unlock()
		return
	default:
	}
	idle := w.term.gen.now() - time.Duration(w.last.Load())
	if idle < w.limit {
		w.timer.Reset(w.limit - idle)
		w.mu.Unlock()
		return
	}
	w.fired = true
	w.mu.Unlock()
	w.stuck(idle)
}
