// Package consoletest holds what the console's tests share, those in
// package console and those that need a browser or a real server and so
// live in the tests module (tests/console): a fleet of simba nodes whose
// own events say who holds what and what ran (Fleet), readers of the
// pages' HTML (ParseGrid, ElectionRows), bad records as a foreign writer
// leaves them (Garbage, PlantRecords, RequireNotice), and snapshots of big
// groups (BigGroup). Only tests import this package.
package consoletest

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
)

// Fleet runs simba nodes for the console's tests. Each node runs
//
//   - ingest: an election held while leading (RunWhileLeader);
//   - report: a job whose schedule never comes due within a test, so that
//     it runs only when triggered;
//   - digest: a job run every 2s;
//   - billing: a group of Partitions partitions, each run every 2s.
//
// It records, from the nodes' own events, who holds each lease now, and
// every run.
type Fleet struct {
	// Partitions is the number of partitions of the group billing.
	Partitions int

	t                         testing.TB
	digestEvery, billingEvery time.Duration

	mu      sync.Mutex
	holders map[string]Holding // by lease, from Elected and Revoked
	// latest is the largest token each lease was won with: the clients
	// publish their events each on a goroutine of its own, so a term's
	// Elected may come after its successor's, and must not replace it.
	latest map[string]uint64
	terms  []Term // every term won, in order, from Elected and Revoked
	runs   []Run
	nodes  map[string]*simba.Client
}

// Holding is a term a node holds.
type Holding struct {
	Member string
	Token  uint64
}

// Term is a term a node won, and how it ended, by its own events.
type Term struct {
	Lease, Member string
	Token         uint64
	Revoked       string // the Revoked event's reason; "" while it holds
}

// Run is one run started by a node.
type Run struct {
	Member, Lease string
	Token         uint64
	At            time.Time
}

// NewFleet returns a fleet of no nodes yet, for the test t.
func NewFleet(t testing.TB) *Fleet {
	return &Fleet{
		t: t, Partitions: 8, digestEvery: 2 * time.Second, billingEvery: 2 * time.Second,
		holders: map[string]Holding{}, latest: map[string]uint64{}, nodes: map[string]*simba.Client{},
	}
}

// Start starts node id on b with the TTL given.
func (f *Fleet) Start(b backend.Backend, id string, ttl time.Duration) {
	f.t.Helper()
	c, err := simba.New(b, simba.WithMemberID(id), simba.WithTTL(ttl), simba.WithEventHandler(func(e simba.Event) { f.event(id, e) }))
	if err != nil {
		f.t.Fatalf("simba.New: %v", err)
	}
	f.mu.Lock()
	f.nodes[id] = c
	f.mu.Unlock()
	run := func(ctx context.Context, term *simba.Term) error {
		f.ran(id, term)
		return nil
	}
	if _, err := c.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		<-ctx.Done()
		return nil
	}); err != nil {
		f.t.Fatalf("ingest: %v", err)
	}
	if _, err := c.Election("report").Schedule(simba.FixedRate(24*time.Hour).WithInitialDelay(24*time.Hour), run); err != nil {
		f.t.Fatalf("report: %v", err)
	}
	if _, err := c.Election("digest").Schedule(simba.FixedRate(f.digestEvery), run); err != nil {
		f.t.Fatalf("digest: %v", err)
	}
	if _, err := c.Group("billing", f.Partitions).Schedule(simba.FixedRate(f.billingEvery), func(ctx context.Context, term *simba.Term, _ int) error {
		return run(ctx, term)
	}); err != nil {
		f.t.Fatalf("billing: %v", err)
	}
}

// Stop closes node id: it hands everything off, then ends its session.
func (f *Fleet) Stop(id string) {
	f.mu.Lock()
	c := f.nodes[id]
	delete(f.nodes, id)
	f.mu.Unlock()
	if c != nil {
		if err := c.Close(); err != nil {
			f.t.Errorf("closing node %s: %v", id, err)
		}
	}
}

// StopAll closes every node.
func (f *Fleet) StopAll() {
	f.mu.Lock()
	var ids []string
	for id := range f.nodes {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() { f.Stop(id) })
	}
	wg.Wait()
}

func (f *Fleet) event(member string, e simba.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch e := e.(type) {
	case simba.Elected:
		if e.Token > f.latest[e.Election] {
			f.latest[e.Election] = e.Token
			f.holders[e.Election] = Holding{Member: member, Token: e.Token}
		}
		f.terms = append(f.terms, Term{Lease: e.Election, Member: member, Token: e.Token})
	case simba.Revoked:
		if f.holders[e.Election].Token == e.Token {
			delete(f.holders, e.Election)
		}
		for i := range f.terms {
			if t := &f.terms[i]; t.Lease == e.Election && t.Token == e.Token {
				t.Revoked = e.Reason.String()
			}
		}
	}
}

func (f *Fleet) ran(member string, term *simba.Term) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs = append(f.runs, Run{Member: member, Lease: term.Name(), Token: term.Token(), At: time.Now()})
}

// Holder returns the holder of lease now, by the nodes' own account.
func (f *Fleet) Holder(lease string) (Holding, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.holders[lease]
	return h, ok
}

// PartitionHolders returns the holder of each billing partition (a zero
// Holding when none holds it).
func (f *Fleet) PartitionHolders() []Holding {
	out := make([]Holding, f.Partitions)
	for p := range out {
		out[p], _ = f.Holder("billing." + strconv.Itoa(p))
	}
	return out
}

// RunsOf returns the runs of lease.
func (f *Fleet) RunsOf(lease string) []Run {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Run
	for _, r := range f.runs {
		if r.Lease == lease {
			out = append(out, r)
		}
	}
	return out
}

// TermsOf returns the terms of lease the nodes won, in order.
func (f *Fleet) TermsOf(lease string) []Term {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(f.terms), func(t Term) bool { return t.Lease != lease })
}
