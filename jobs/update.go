package jobs

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
)

// ErrStopped reports an [Jobs.Update] of jobs that were stopped (by
// [Jobs.Stop], Shutdown or Close, or because their client closed), before
// or during the update.
var ErrStopped = errors.New("simba/jobs: the jobs are stopped")

// Update makes the running jobs those of cfg, without stopping the others:
//
//  1. It checks cfg as [Start] does, with the handlers registered in the
//     Registry given to Start as they are now (handlers registered since
//     may serve new jobs), and returns every problem before it changes
//     anything: all or nothing. It logs the [Warnings] at Warn.
//  2. It stops the jobs cfg removes and those it changes, all at once, and
//     waits until each has handed off: its runs returned and its leases
//     released, so that another node takes a removed job over at once.
//  3. It starts the jobs cfg changes, and those it adds, in cfg's order.
//
// A job is matched by its kind and its name (or group), and changed when
// any field of it differs (a RetryPolicy's RetryIf function counts as
// changed unless both are nil), or the notifier in force for it (its own
// Notify, or cfg's) does. A job that did not change keeps running
// untouched: its terms and its runs go on. Scheduling disabled
// ([EnabledEnv] when set, else cfg.Disabled) stops every job; enabled
// again, they start. Update logs what it changed.
//
// If a job fails to start (for example with [simba.ErrAlreadyStarted]),
// Update starts the others and returns an error naming it; that job is
// not running, and the next Update tries to start it again.
//
// Update waits for the hand-offs, each bounded by its term's remaining
// time as every hand-off is: it must not be called from a handler of a job
// it stops (it would wait for the run that called it). Updates are
// serialised, and safe to call concurrently with Stop, Shutdown and
// Close; once the jobs are stopped, Update returns an error wrapping
// [ErrStopped] and changes nothing.
func (j *Jobs) Update(cfg Config) error {
	j.changing.Lock()
	defer j.changing.Unlock()
	if j.isStopping() {
		return fmt.Errorf("%supdate: %w", prefix, ErrStopped)
	}
	hs := j.reg.snapshot()
	if err := validate(hs, cfg, j.o.commands != nil); err != nil {
		return err
	}
	enabled, by, err := schedulingEnabled(cfg, j.o.lookupEnv)
	if err != nil {
		return err
	}
	for _, w := range warnings(hs, cfg) {
		j.log.Warn("job configuration", "warning", w.Error())
	}
	var want []wanted
	if enabled {
		want = j.wanted(hs, cfg)
	}
	j.mu.Lock()
	current := slices.Clone(j.jobs)
	j.mu.Unlock()

	c := diff(current, want)
	j.stopJobs(c.stop)
	j.mu.Lock()
	j.jobs = slices.DeleteFunc(j.jobs, func(s *started) bool { return slices.Contains(c.stop, s) })
	j.mu.Unlock()
	if !enabled && len(current) > 0 {
		j.log.Info("scheduling disabled; every job stopped", "by", by)
	}

	var failed []error
	for i, w := range c.start {
		if j.isStopping() {
			return fmt.Errorf("%supdate: %d jobs not started: %w", prefix, len(c.start)-i, ErrStopped)
		}
		s, err := j.startJob(w)
		if err != nil {
			j.log.Error("a job failed to start", "job", w.name, "err", err)
			failed = append(failed, err)
			continue
		}
		j.mu.Lock()
		j.jobs = append(j.jobs, s)
		j.mu.Unlock()
	}
	j.log.Info("jobs updated", "added", c.added, "changed", c.changed, "removed", c.removed, "unchanged", c.unchanged, "failed_to_start", len(failed))
	switch len(failed) {
	case 0:
		return nil
	case 1:
		return failed[0]
	}
	return fmt.Errorf("%supdate: %d jobs failed to start: %w", prefix, len(failed), errors.Join(failed...))
}

// isStopping reports whether Stop was called.
func (j *Jobs) isStopping() bool {
	select {
	case <-j.stopping:
		return true
	default:
		return false
	}
}

// change is what an Update does: the jobs it stops and starts, and their
// names by what happens to them.
type change struct {
	stop                    []*started
	start                   []wanted
	added, changed, removed []string
	unchanged               int
}

// diff compares the running jobs with the wanted ones.
func diff(current []*started, want []wanted) change {
	var c change
	running := map[string]*started{}
	for _, s := range current {
		running[s.key] = s
	}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w.key] = true
		s, ok := running[w.key]
		switch {
		case !ok:
			c.added = append(c.added, w.name)
			c.start = append(c.start, w)
		case !reflect.DeepEqual(s.def, w.def):
			c.changed = append(c.changed, w.name)
			c.stop = append(c.stop, s)
			c.start = append(c.start, w)
		default:
			c.unchanged++
		}
	}
	for _, s := range current {
		if !wanted[s.key] {
			c.removed = append(c.removed, s.name)
			c.stop = append(c.stop, s)
		}
	}
	return c
}
