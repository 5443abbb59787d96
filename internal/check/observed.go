package check

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// The checkers in this file do not trust the library's report of when a
// term ended. They take what a task was told (Valid, EnsureValid, its ctx,
// the horizon Deadline promised it) and when its run returned, and compare
// that with what the backend did: when it granted and freed each holding.
// A library whose Valid lies, or whose hand-off releases the lease before
// the run has exited, fails them even if its own account of its terms is
// consistent.

// Observation is what a task was told about its term at one instant: that
// the term was valid then, and promised until Until.
type Observation struct {
	Name  string // lease name
	Token uint64 // the term's token
	Node  string // who looked
	// What the task asked: "Valid", "EnsureValid(step)", "ctx" (its run's
	// ctx was not cancelled) or "Deadline" (the horizon, sampled while
	// valid). A live ctx is only exact in virtual time: a real process
	// resumed after a pause runs its task before the timer that cancels
	// the ctx, so the chaos run records it without checking it.
	What string
	At   time.Time // when the task looked
	// Until is the instant the answer promised validity until: At for
	// Valid and ctx, At+step for EnsureValid, the returned instant for
	// Deadline.
	Until time.Time
}

// Exit is the end of one run of a term's task.
type Exit struct {
	Name  string
	Token uint64
	Node  string
	At    time.Time // when the run returned
	// Horizon is the latest Until among the run's observations: how long
	// the run was ever told its term would last.
	Horizon time.Time
}

// Observed checks I4 from what the tasks saw, against the backend's
// grants, read on the same clock as the observations. A watcher's grants
// may start early and end late (the checks are then weaker, never wrong),
// but must not start late or end early:
//
//   - a holding the backend expired (Grant.Expired) was promised to its
//     task only until strictly before the expiry: every Until < End;
//   - a holding that ended otherwise (released, evicted, closed) was not
//     reported valid after it ended: every At ≤ End;
//   - no observation precedes its grant, and every observation has one.
//
// So no task is ever told its term is valid while the backend may grant,
// or has granted, the lease to someone else.
func Observed(obs []Observation, grants []Grant) []error {
	type key struct {
		name  string
		token uint64
	}
	byKey := map[key]Grant{}
	for _, g := range grants {
		byKey[key{g.Name, g.Token}] = g
	}
	var errs []error
	reported := map[key]bool{} // one error per term and kind of violation
	for _, o := range obs {
		k := key{o.Name, o.Token}
		g, ok := byKey[k]
		switch {
		case !ok:
			if !reported[k] {
				errs = append(errs, fmt.Errorf("I4: lease %q: %s told %s its term %d is valid, but the backend has no grant of that token",
					o.Name, o.What, o.Node, o.Token))
			}
		case o.At.Before(g.Start):
			errs = append(errs, fmt.Errorf("I4: lease %q: %s told %s at %v that term %d is valid, before its grant at %v",
				o.Name, o.What, o.Node, o.At, o.Token, g.Start))
		case !g.Ended:
			continue
		case g.Expired && !o.Until.Before(g.End):
			errs = append(errs, fmt.Errorf("I4: lease %q: %s told %s at %v that term %d is valid until %v, but the backend expired it at %v",
				o.Name, o.What, o.Node, o.At, o.Token, o.Until, g.End))
		case !g.Expired && o.At.After(g.End):
			errs = append(errs, fmt.Errorf("I4: lease %q: %s told %s at %v that term %d is valid, %v after the backend freed it",
				o.Name, o.What, o.Node, o.At, o.Token, o.At.Sub(g.End)))
		default:
			continue
		}
		reported[k] = true
	}
	return errs
}

// HandOffOrder checks I7, the hand-off order (first the task, then the
// lease): the backend granted a lease to the next holder only after the run
// of the previous term had returned or, for a run that ignored its
// cancellation, once the horizon that run had been promised had passed.
// Whether the previous holding was released or expired does not matter:
// expiry comes after the horizon. A grant's Seen (or, where it is not
// set, its Start) may be late, never early; a
// grant after an eviction (Grant.Evicted) is not held against the evicted
// term.
func HandOffOrder(exits []Exit, grants []Grant) []error {
	byName := map[string][]Grant{}
	for _, g := range grants {
		byName[g.Name] = append(byName[g.Name], g)
	}
	for _, gs := range byName {
		sort.SliceStable(gs, func(i, j int) bool { return gs[i].Start.Before(gs[j].Start) })
	}
	var errs []error
	for _, e := range exits {
		gs := byName[e.Name]
		i := sort.Search(len(gs), func(i int) bool { return gs[i].Token >= e.Token })
		if i >= len(gs) || gs[i].Token != e.Token || gs[i].Evicted || i+1 == len(gs) {
			continue // no grant of this term, or none after it
		}
		next := gs[i+1]
		granted := next.Start
		if !next.Seen.IsZero() {
			granted = next.Seen
		}
		if granted.Before(e.At) && granted.Before(e.Horizon) {
			errs = append(errs, fmt.Errorf("I7: lease %q: term %d granted by %v, while the run of term %d on %s went on until %v, before the horizon it was promised (%v)",
				e.Name, next.Token, granted, e.Token, e.Node, e.At, e.Horizon))
		}
	}
	return errs
}

// TermView is what Observer needs of a term: the methods of *simba.Term it
// calls (this package does not import simba).
type TermView interface {
	Name() string
	Token() uint64
	Valid() bool
	Deadline() time.Time
	EnsureValid(step ...time.Duration) error
}

// Observer records what tasks are told about their terms, for [Observed]
// and [HandOffOrder]. Tasks ask through it instead of asking the term
// directly. Safe for concurrent use.
type Observer struct {
	// Now is the clock of the observations (time.Now when nil); it must
	// be the clock of the grants they are checked against.
	Now func() time.Time

	mu      sync.Mutex
	obs     []Observation
	exits   []Exit
	horizon map[runKey]time.Time
}

type runKey struct {
	name  string
	token uint64
	node  string
}

func (o *Observer) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Observer) add(node string, t TermView, what string, at, until time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.obs = append(o.obs, Observation{Name: t.Name(), Token: t.Token(), Node: node, What: what, At: at, Until: until})
	if o.horizon == nil {
		o.horizon = map[runKey]time.Time{}
	}
	k := runKey{t.Name(), t.Token(), node}
	if until.After(o.horizon[k]) {
		o.horizon[k] = until
	}
}

// Valid returns t.Valid() and, when it is true, records that and the
// horizon t.Deadline() promises.
func (o *Observer) Valid(node string, t TermView) bool {
	at := o.now()
	if !t.Valid() {
		return false
	}
	o.add(node, t, "Valid", at, at)
	if d := t.Deadline(); d.After(at) {
		o.add(node, t, "Deadline", at, d)
	}
	return true
}

// EnsureValid returns t.EnsureValid(step) and records the promise when it
// is nil.
func (o *Observer) EnsureValid(node string, t TermView, step time.Duration) error {
	at := o.now()
	err := t.EnsureValid(step)
	if err == nil {
		o.add(node, t, fmt.Sprintf("EnsureValid(%v)", step), at, at.Add(step))
	}
	return err
}

// Live reports whether the run's ctx is still live, and records that.
func (o *Observer) Live(node string, t TermView, ctx context.Context) bool {
	at := o.now()
	if ctx.Err() != nil {
		return false
	}
	o.add(node, t, "ctx", at, at)
	return true
}

// Exited records that the run of t on node has returned; call it (deferred)
// as the run's last act.
func (o *Observer) Exited(node string, t TermView) {
	at := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	k := runKey{t.Name(), t.Token(), node}
	o.exits = append(o.exits, Exit{Name: k.name, Token: k.token, Node: node, At: at, Horizon: o.horizon[k]})
}

// Observations returns every observation so far, in order of time.
func (o *Observer) Observations() []Observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := append([]Observation(nil), o.obs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// Exits returns every run's exit so far.
func (o *Observer) Exits() []Exit {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Exit(nil), o.exits...)
}
