package handoffbench

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Overlap collects the blackhole rounds of one side: the holder's link is
// cut, another contender takes over, and the round overlaps when the old
// holder still believed it led after the new one started. It is safe for
// concurrent use, by rounds played in parallel.
type Overlap struct {
	Side string

	mu          sync.Mutex
	overlapping int
	largest     time.Duration // the largest overlap
	margin      time.Duration // the smallest margin (start - believed until) over all rounds
	failover    []time.Duration
}

// Add records one round: the link was cut at cut, the new leader started
// at started, and the old holder believed it led until believedUntil, all
// on this process's clock.
func (o *Overlap) Add(cut, started, believedUntil time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := started.Sub(believedUntil)
	if len(o.failover) == 0 || m < o.margin {
		o.margin = m
	}
	if m <= 0 {
		o.overlapping++
		o.largest = max(o.largest, -m)
	}
	o.failover = append(o.failover, started.Sub(cut))
}

// Rounds returns the number of rounds recorded and of those that
// overlapped.
func (o *Overlap) Rounds() (rounds, overlapping int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.failover), o.overlapping
}

// OverlapMarkdown writes one table row per side: the rounds, those with
// overlap and the largest, the smallest margin between the old holder's
// belief ending and the new one starting (negative: an overlap), and the
// fail-over times (cut → new leader running).
func OverlapMarkdown(w io.Writer, sides ...*Overlap) {
	fmt.Fprintln(w, "| side | rounds | rounds with overlap | largest overlap | smallest margin | fail-over p50 | p90 | p99 | max |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, o := range sides {
		o.mu.Lock()
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s |\n", o.Side, len(o.failover), o.overlapping, Ms(o.largest), Ms(o.margin), Summary(o.failover))
		o.mu.Unlock()
	}
}
