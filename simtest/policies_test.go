package simtest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/simtest"
)

// runLog records what the schedules of TestSchedulePolicies did, across
// the nodes of one seed: every run (attempt) with its window, and every
// skipped start reported.
type runLog struct {
	mu       sync.Mutex
	runs     map[string][]runSpan // by lease
	skipped  map[string][]simba.Skipped
	revoked  map[string][]simba.Revoked // the terms ended by an operator's disable
	disabled time.Time                  // when the operator's disable of "disabled" was recorded
	enabled  time.Time                  // when it was enabled again
}

type runSpan struct {
	node       string
	token      uint64
	info       simba.RunInfo
	start, end time.Time
}

// draw draws from n's source, which the runs of every job of the node
// share: a *rand.Rand is not safe for concurrent use.
func (l *runLog) draw(n *simtest.Node, k int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return n.Rand().IntN(k)
}

func (l *runLog) add(lease string, s runSpan) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[lease] = append(l.runs[lease], s)
}

func (l *runLog) event(e simba.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e := e.(type) {
	case simba.Skipped:
		l.skipped[e.Election] = append(l.skipped[e.Election], e)
	case simba.Revoked:
		if e.Reason == simba.RevokeDisabled {
			l.revoked[e.Election] = append(l.revoked[e.Election], e)
		}
	}
}

// current is the log of the seed running: simtest runs seeds one after
// the other, and the event handler of Config.Options is shared by them.
var current struct {
	sync.Mutex
	log *runLog
}

// TestSchedulePolicies runs one schedule per overlap policy, one with
// retries and one an operator disables, with runs that often outlast the
// period, under the default random faults, and checks on top of simtest's
// invariants: never two runs of one job at once (at most two under
// OverlapAllow with a limit of 2), every retry in the term of its first
// attempt, no run after the disable (at the latest the holder's term ends
// a TTL after it), and every planned start of the skipping schedule either
// run or reported skipped.
func TestSchedulePolicies(t *testing.T) {
	const period = time.Second
	cfg := simtest.Config{
		Seeds: 8,
		Options: []simba.Option{simba.WithEventHandler(func(e simba.Event) {
			current.Lock()
			l := current.log
			current.Unlock()
			if l != nil {
				l.event(e)
			}
		})},
	}
	jobs := map[string]simba.Schedule{
		"skip":     simba.FixedRate(period).WithOverlap(simba.OverlapSkip),
		"buffer":   simba.FixedRate(period).WithOverlap(simba.OverlapBufferOne),
		"cancel":   simba.FixedRate(period).WithOverlap(simba.OverlapCancelRunning),
		"allow":    simba.FixedRate(period).WithOverlap(simba.OverlapAllow).WithMaxConcurrent(2),
		"retry":    simba.FixedRate(2 * period).WithRetry(simba.RetryPolicy{Attempts: 3, Backoff: 200 * time.Millisecond}),
		"disabled": simba.FixedRate(period),
	}
	simtest.Run(t, cfg, func(c *simtest.Cluster) {
		log := &runLog{runs: map[string][]runSpan{}, skipped: map[string][]simba.Skipped{}, revoked: map[string][]simba.Revoked{}}
		current.Lock()
		current.log = log
		current.Unlock()
		ttl := c.Config().TTL

		c.Start(func(n *simtest.Node) error {
			for name, s := range jobs {
				_, err := n.Client().Election(name).Schedule(s, func(ctx context.Context, term *simba.Term) error {
					info, _ := simba.RunInfoFrom(ctx)
					span := runSpan{node: n.Name(), token: term.Token(), info: info, start: time.Now()}
					// Half the runs outlast the period, some of them two.
					d := []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond, 2500 * time.Millisecond}[log.draw(n, 3)]
					t := time.NewTimer(d)
					select {
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
					}
					span.end = time.Now()
					log.add(name, span)
					if name == "retry" && info.Attempt < 3 && log.draw(n, 2) == 0 {
						return errors.New("flaky")
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		})

		// The operator disables "disabled" half-way through the faults,
		// and enables it again a quarter later.
		var op sync.WaitGroup
		op.Go(func() {
			operate := func(at time.Duration, do func(ctx context.Context, a *admin.Admin) error, when *time.Time) {
				time.Sleep(at - c.Elapsed())
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				a, err := admin.Open(ctx, c.Backend())
				if err != nil {
					c.Logf("opening admin: %v", err)
					return
				}
				defer a.Close()
				if err := do(ctx, a); err != nil {
					c.Logf("operating: %v", err)
					return
				}
				log.mu.Lock()
				*when = time.Now()
				log.mu.Unlock()
			}
			d := c.Config().Duration
			operate(d/2, func(ctx context.Context, a *admin.Admin) error { return a.Disable(ctx, "disabled", "simtest") }, &log.disabled)
			operate(d*3/4, func(ctx context.Context, a *admin.Admin) error { return a.Enable(ctx, "disabled", "simtest") }, &log.enabled)
		})

		c.Finally("schedule policies", func() error {
			op.Wait()
			log.mu.Lock()
			defer log.mu.Unlock()
			var errs []error
			for name := range jobs {
				limit := 1
				if name == "allow" {
					limit = 2
				}
				if err := maxAtOnce(log.runs[name], limit); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
				}
			}
			errs = append(errs, retriesInTerm(log.runs["retry"]))
			if log.disabled.IsZero() || log.enabled.IsZero() {
				errs = append(errs, fmt.Errorf("disabled: the operator's disable (%v) or enable (%v) never took", log.disabled, log.enabled))
			}
			for _, r := range log.runs["disabled"] {
				if !log.disabled.IsZero() && r.start.After(log.disabled.Add(ttl)) && r.start.Before(log.enabled) {
					errs = append(errs, fmt.Errorf("disabled: %s ran at %v (token %d, %+v), %v after the disable", r.node, r.start, r.token, r.info, r.start.Sub(log.disabled)))
				}
			}
			// The starts passed while disabled are reported: as disabled
			// when a term ended by the disable (its holder, or a node
			// that won the lease as the disable was written), as a
			// misfire when the holder had gone before (a crash: nothing
			// recorded that the lease was disabled).
			if len(log.revoked["disabled"]) > 0 && !slices.ContainsFunc(log.skipped["disabled"], func(s simba.Skipped) bool { return s.Reason == simba.SkipDisabled }) {
				errs = append(errs, fmt.Errorf("disabled: a term ended disabled at %v, but no start was reported skipped as disabled: %+v", log.revoked["disabled"][0].At, log.skipped["disabled"]))
			}
			if err := covered(log.runs["disabled"], log.skipped["disabled"], period); err != nil {
				errs = append(errs, fmt.Errorf("disabled: %w", err))
			}
			if err := covered(log.runs["skip"], log.skipped["skip"], period); err != nil {
				errs = append(errs, fmt.Errorf("skip: %w", err))
			}
			return errors.Join(errs...)
		})
	})
}

// maxAtOnce reports an instant at which more than limit runs were going.
func maxAtOnce(runs []runSpan, limit int) error {
	for i, a := range runs {
		at := []runSpan{a}
		for j, b := range runs {
			if j != i && b.start.Compare(a.start) <= 0 && b.end.After(a.start) {
				at = append(at, b)
			}
		}
		if len(at) > limit {
			return fmt.Errorf("%d runs at once at %v (at most %d): %v", len(at), a.start, limit, at)
		}
	}
	return nil
}

// retriesInTerm reports a retry that did not follow its previous attempt
// in the same term.
func retriesInTerm(runs []runSpan) error {
	for _, r := range runs {
		if r.info.Attempt <= 1 {
			continue
		}
		ok := slices.ContainsFunc(runs, func(p runSpan) bool {
			return p.token == r.token && p.info.Attempt == r.info.Attempt-1 && !p.end.After(r.start)
		})
		if !ok {
			return fmt.Errorf("retry: attempt %d at %v (token %d) follows no attempt %d of its term", r.info.Attempt, r.start, r.token, r.info.Attempt-1)
		}
	}
	return nil
}

// covered reports a stretch longer than a period (and a half, for the
// instants a loop wakes at) without a planned start that either ran or was
// reported skipped.
func covered(runs []runSpan, skipped []simba.Skipped, period time.Duration) error {
	var at []time.Time
	for _, r := range runs {
		if r.info.Source != simba.SourceTrigger && r.info.Attempt <= 1 {
			at = append(at, r.start)
		}
	}
	for _, s := range skipped {
		for t := s.First; !t.After(s.Last); t = t.Add(period) {
			at = append(at, t)
		}
		at = append(at, s.Last)
	}
	slices.SortFunc(at, time.Time.Compare)
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap > period+period/2 {
			// Say what was around the gap: the runs and the reports.
			from, to := at[i-1].Add(-3*period), at[i].Add(3*period)
			var near []string
			for _, r := range runs {
				if r.end.After(from) && r.start.Before(to) {
					near = append(near, fmt.Sprintf("run %s token %d %s attempt %d planned %v: %v–%v", r.node, r.token, r.info.Source, r.info.Attempt, r.info.Planned.Format("05.000"), r.start.Format("05.000"), r.end.Format("05.000")))
				}
			}
			for _, s := range skipped {
				if s.Last.After(from) && s.First.Before(to) {
					near = append(near, fmt.Sprintf("skipped token %d: %d (%s) %v–%v, reported at %v", s.Token, s.Count, s.Reason, s.First.Format("05.000"), s.Last.Format("05.000"), s.At.Format("05.000")))
				}
			}
			return fmt.Errorf("no planned start run or reported skipped between %v and %v (%v); around it:\n\t%s", at[i-1], at[i], gap, strings.Join(near, "\n\t"))
		}
	}
	if len(at) == 0 {
		return errors.New("never ran")
	}
	return nil
}
