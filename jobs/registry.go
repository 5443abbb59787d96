package jobs

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/simba-go/simba"
)

// Partition is what a partitioned job's handler registered with
// [Registry.PartitionedWithParam] learns about the partition it runs.
type Partition struct {
	// Index is the partition number, in [0, partitions).
	Index int
	// Param is the partition's sharding-item parameter (the label given to
	// it by the job's shardingItemParameters, such as "Beijing"), or "" when
	// it has none.
	Param string
}

// Registry holds the job handlers of an application by name, each with the
// shape its kind of job calls; a configuration ([Config]) then says when each
// runs. The shapes are checked by the compiler: there is no reflection.
//
// A handler's name is the name of the jobs that use it unless a job names
// another handler (the handler key), so that one handler may serve several
// jobs.
//
// Registering never fails on the spot: a name registered twice, an empty name
// or a nil function is reported, with every other problem, by [Validate] and
// [Run]. The zero Registry is empty and ready to use. A Registry is safe for
// concurrent use; [Run] uses the handlers registered when it starts.
type Registry struct {
	mu       sync.Mutex
	handlers map[string]handler
	order    []string // names in registration order
	errs     problems
}

// handler is one registered function, in the shape the core calls.
type handler struct {
	scheduled   func(ctx context.Context, term *simba.Term) error
	partitioned func(ctx context.Context, term *simba.Term, p Partition) error
}

func (h handler) kind() string {
	if h.scheduled != nil {
		return "scheduled"
	}
	return "partitioned"
}

// NewRegistry returns an empty registry (the same as new(Registry)).
func NewRegistry() *Registry { return new(Registry) }

// Scheduled registers fn as the handler called name for scheduled jobs, for
// work that needs no term: it runs once per planned run while this node
// leads, and its ctx is cancelled when the term ends. A panic is recovered
// and recorded as a failed run.
func (r *Registry) Scheduled(name string, fn func(ctx context.Context)) {
	var h handler
	if fn != nil {
		h.scheduled = func(ctx context.Context, _ *simba.Term) error {
			fn(ctx)
			return nil
		}
	}
	r.add(name, h, fn == nil)
}

// ScheduledTerm registers fn as the handler called name for scheduled jobs:
// it runs once per planned run with the term it runs in, whose token fences
// the run's writes (see [simba.Election.Schedule]). An error or a panic is
// logged and published as a failed run; an error wrapping [simba.ErrYield]
// gives the lease up.
func (r *Registry) ScheduledTerm(name string, fn func(ctx context.Context, term *simba.Term) error) {
	r.add(name, handler{scheduled: fn}, fn == nil)
}

// Partitioned registers fn as the handler called name for partitioned jobs:
// it runs once per planned run of every partition this node holds, with the
// partition's term and number (see [simba.Group.Schedule]).
func (r *Registry) Partitioned(name string, fn func(ctx context.Context, term *simba.Term, partition int) error) {
	var h handler
	if fn != nil {
		h.partitioned = func(ctx context.Context, term *simba.Term, p Partition) error {
			return fn(ctx, term, p.Index)
		}
	}
	r.add(name, h, fn == nil)
}

// PartitionedWithParam registers fn as the handler called name for
// partitioned jobs, as [Registry.Partitioned] does, for a handler that wants
// the partition's sharding-item parameter as well as its number.
func (r *Registry) PartitionedWithParam(name string, fn func(ctx context.Context, term *simba.Term, p Partition) error) {
	r.add(name, handler{partitioned: fn}, fn == nil)
}

func (r *Registry) add(name string, h handler, nilFn bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case name == "":
		r.errs.add(position{}, "handler", "", "", fmt.Errorf("%w: empty handler name", ErrInvalidValue))
		return
	case nilFn:
		r.errs.add(position{}, "handler", name, "", fmt.Errorf("%w: nil function", ErrInvalidValue))
		return
	}
	if old, ok := r.handlers[name]; ok {
		r.errs.add(position{}, "handler", name, "", fmt.Errorf("%w: registered twice (first for %s jobs)", ErrDuplicateName, old.kind()))
		return
	}
	if r.handlers == nil {
		r.handlers = map[string]handler{}
	}
	r.handlers[name] = h
	r.order = append(r.order, name)
}

// handlers is a snapshot of a registry.
type handlers struct {
	byName map[string]handler
	order  []string // names in registration order
	errs   []error  // problems of registration
}

// snapshot returns the registry's handlers and problems as they are now.
func (r *Registry) snapshot() handlers {
	r.mu.Lock()
	defer r.mu.Unlock()
	return handlers{byName: maps.Clone(r.handlers), order: slices.Clone(r.order), errs: slices.Clone(r.errs.errs)}
}
