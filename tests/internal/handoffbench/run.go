package handoffbench

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"
)

// Role says what a [Side] is to the report.
type Role int

const (
	// Peer is another library's recipe: one of the sides simba is
	// compared with.
	Peer Role = iota
	// Reference is simba as configured by default (status records on):
	// the side whose ratio to the best peer is reported.
	Reference
	// Simba is another configuration of simba (status records off, say):
	// shown, and broken down, but not in the ratio.
	Simba
)

// Side is one contender pair of the hand-off benchmark.
type Side struct {
	Name string
	Role Role
	// Once hands the lease over once, from the holder to the other, after
	// the waiter has waited for settle, and returns what it measured. An
	// error ends the run.
	Once func(settle time.Duration) (Round, error)
}

// Round is what one hand-off measured.
type Round struct {
	Total time.Duration // from the hand-off's start to the new holder running
	Parts *Parts        // the breakdown, for simba's sides; nil for peers
	Cost  Cost          // what the round cost the process; set by [Run]
}

// Parts is the breakdown of one simba hand-off (see [SimbaSide]).
// StopToRelease, Notify, Waiter and TaskStart add up to the total; Release
// runs alongside Notify. Waiter is negative when the waiter's own
// notification came before the independent watcher's.
type Parts struct {
	StopToRelease time.Duration // Stop called → the release call starts (the core's work before it)
	Release       time.Duration // the release call, start → return
	Notify        time.Duration // release start → the independent watcher sees the delete
	Waiter        time.Duration // that notification → the waiter's Acquire returns
	TaskStart     time.Duration // Acquire returns → the task function runs
}

// Config is the shape of a run.
type Config struct {
	Settles []time.Duration // the settle times, each played in turn
	Warmup  int             // rounds per side and settle not counted
	Rounds  int             // rounds per side and settle counted
}

// Results are the rounds of a run.
type Results struct {
	cfg    Config
	sides  []Side
	rounds [][][]Round // [settle][side][round]
}

// costDrain is how long Run waits after each round before it reads the
// round's cost, so that work the round left going is counted in it.
const costDrain = 50 * time.Millisecond

// Run plays cfg.Warmup+cfg.Rounds rounds at each settle time, the sides
// taking turns round by round. It stops at the first error, saying which
// side, settle and round.
func Run(cfg Config, sides []Side) (*Results, error) {
	r := &Results{cfg: cfg, sides: sides, rounds: make([][][]Round, len(cfg.Settles))}
	for si, settle := range cfg.Settles {
		r.rounds[si] = make([][]Round, len(sides))
		for round := range cfg.Warmup + cfg.Rounds {
			for i, side := range sides {
				c0 := sampleCost()
				x, err := side.Once(settle)
				// The round's trailing work (the new term's first status
				// write, say) is the round's cost, not the next side's.
				time.Sleep(costDrain)
				x.Cost = c0.since()
				if err != nil {
					return nil, fmt.Errorf("side %q, settle %v, round %d: %w", side.Name, settle, round, err)
				}
				if round >= cfg.Warmup {
					r.rounds[si][i] = append(r.rounds[si][i], x)
				}
			}
		}
	}
	return r, nil
}

// Totals returns the counted totals of side i at settle index s.
func (r *Results) Totals(s, i int) []time.Duration {
	var out []time.Duration
	for _, x := range r.rounds[s][i] {
		out = append(out, x.Total)
	}
	return out
}

// Costs returns the counted rounds' costs of side i at settle index s.
func (r *Results) Costs(s, i int) []Cost {
	var out []Cost
	for _, x := range r.rounds[s][i] {
		out = append(out, x.Cost)
	}
	return out
}

// Markdown writes four tables: the quantiles of every side at every
// settle; what a hand-off cost the process, the medians of each side's
// [Cost]s; per settle, the ratio of the Reference side to the best peer
// at p50 and at p99 (the best at each, which may be two peers); and the
// breakdown of simba's sides, p50 / p90 of each part. A run of peers only
// has the first two.
func (r *Results) Markdown(w io.Writer) {
	fmt.Fprintln(w, "| settle | side | p50 | p90 | p99 | max |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|")
	for s, settle := range r.cfg.Settles {
		for i, side := range r.sides {
			fmt.Fprintf(w, "| %v | %s | %s |\n", settle, side.Name, Summary(r.Totals(s, i)))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "What a hand-off cost the benchmark's process (both clients, the watcher, the harness), medians over all settles: "+
		"CPU time, heap allocations, context switches of its threads (put to sleep and woken, or preempted), read and write system calls, "+
		"goroutines created, goroutine wake-ups (runnable → running) and the time they waited runnable for a thread (a lower bound):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| side | CPU | allocations | context switches | read/write syscalls | goroutines created | wake-ups | waited runnable |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for i, side := range r.sides {
		var cs []Cost
		for s := range r.cfg.Settles {
			cs = append(cs, r.Costs(s, i)...)
		}
		fmt.Fprintf(w, "| %s | %s |\n", side.Name, costMedians(cs))
	}
	if !slices.ContainsFunc(r.sides, func(s Side) bool { return s.Role != Peer }) {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| settle | simba p50 | best peer at p50 | ratio p50 | simba p99 | best peer at p99 | ratio p99 |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---|---:|")
	for s, settle := range r.cfg.Settles {
		ref := -1
		for i, side := range r.sides {
			if side.Role == Reference {
				ref = i
			}
		}
		if ref < 0 {
			break
		}
		cells := []any{settle}
		for _, p := range []float64{0.5, 0.99} {
			mine := Quantile(r.Totals(s, ref), p)
			best, bestName := time.Duration(-1), ""
			for i, side := range r.sides {
				if side.Role != Peer {
					continue
				}
				if q := Quantile(r.Totals(s, i), p); best < 0 || q < best {
					best, bestName = q, side.Name
				}
			}
			ratio := "–"
			if best > 0 {
				ratio = fmt.Sprintf("%.2f", float64(mine)/float64(best))
			}
			cells = append(cells, Ms(mine), fmt.Sprintf("%s (%s)", bestName, Ms(best)), ratio)
		}
		fmt.Fprintf(w, "| %v | %s | %s | %s | %s | %s | %s |\n", cells...)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Breakdown of simba's hand-offs, p50 / p90 of each part (the parts' medians need not add up to the total's):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| settle | side | stop → release call | release call | notification | waiter's work | task start | total |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
	for s, settle := range r.cfg.Settles {
		for i, side := range r.sides {
			if side.Role == Peer {
				continue
			}
			var parts [6][]time.Duration
			for _, x := range r.rounds[s][i] {
				if x.Parts == nil {
					continue
				}
				for k, d := range []time.Duration{x.Parts.StopToRelease, x.Parts.Release, x.Parts.Notify, x.Parts.Waiter, x.Parts.TaskStart, x.Total} {
					parts[k] = append(parts[k], d)
				}
			}
			fmt.Fprintf(w, "| %v | %s |", settle, side.Name)
			for _, ds := range parts {
				fmt.Fprintf(w, " %s / %s |", Ms(Quantile(ds, 0.5)), Ms(Quantile(ds, 0.9)))
			}
			fmt.Fprintln(w)
		}
	}
}

// RoundsEnv, set to a number, replaces the counted rounds (and the
// warm-up, by a tenth of it) of a run, for a quick try of a benchmark.
const RoundsEnv = "SIMBA_BENCH_ROUNDS"

// Sized returns cfg with Rounds and Warmup from $SIMBA_BENCH_ROUNDS if it
// is set to a positive number.
func Sized(cfg Config) Config {
	if n, err := strconv.Atoi(os.Getenv(RoundsEnv)); err == nil && n > 0 {
		cfg.Rounds, cfg.Warmup = n, max(1, n/10)
	}
	return cfg
}
