package console

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
)

// fleet runs simba nodes for the console's tests. Each node runs
//
//   - ingest: an election held while leading (RunWhileLeader);
//   - report: a job whose schedule never comes due within a test, so that
//     it runs only when triggered;
//   - digest: a job run every digestEvery;
//   - billing: a group of partitions, each run every billingEvery.
//
// It records, from the nodes' own events, who holds each lease now, and
// every run.
type fleet struct {
	t                         testing.TB
	partitions                int
	digestEvery, billingEvery time.Duration

	mu      sync.Mutex
	holders map[string]holding // by lease, from Elected and Revoked
	terms   []seenTerm         // every term won, in order, from Elected and Revoked
	runs    []ran
	nodes   map[string]*simba.Client
}

// holding is a term a node holds.
type holding struct {
	member string
	token  uint64
}

// seenTerm is a term a node won, and how it ended, by its own events.
type seenTerm struct {
	lease, member string
	token         uint64
	revoked       string // the Revoked event's reason; "" while it holds
}

// ran is one run started by a node.
type ran struct {
	member, lease string
	token         uint64
	at            time.Time
}

func newFleet(t testing.TB) *fleet {
	return &fleet{
		t: t, partitions: 8, digestEvery: 2 * time.Second, billingEvery: 2 * time.Second,
		holders: map[string]holding{}, nodes: map[string]*simba.Client{},
	}
}

// start starts node id on b with the TTL given.
func (f *fleet) start(b backend.Backend, id string, ttl time.Duration) {
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
	if _, err := c.Group("billing", f.partitions).Schedule(simba.FixedRate(f.billingEvery), func(ctx context.Context, term *simba.Term, _ int) error {
		return run(ctx, term)
	}); err != nil {
		f.t.Fatalf("billing: %v", err)
	}
}

// stop closes node id: it hands everything off, then ends its session.
func (f *fleet) stop(id string) {
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

// stopAll closes every node.
func (f *fleet) stopAll() {
	f.mu.Lock()
	var ids []string
	for id := range f.nodes {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() { f.stop(id) })
	}
	wg.Wait()
}

func (f *fleet) event(member string, e simba.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch e := e.(type) {
	case simba.Elected:
		f.holders[e.Election] = holding{member: member, token: e.Token}
		f.terms = append(f.terms, seenTerm{lease: e.Election, member: member, token: e.Token})
	case simba.Revoked:
		if f.holders[e.Election].token == e.Token {
			delete(f.holders, e.Election)
		}
		for i := range f.terms {
			if t := &f.terms[i]; t.lease == e.Election && t.token == e.Token {
				t.revoked = e.Reason.String()
			}
		}
	}
}

func (f *fleet) ran(member string, term *simba.Term) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs = append(f.runs, ran{member: member, lease: term.Name(), token: term.Token(), at: time.Now()})
}

// holder returns the holder of lease now, by the nodes' own account.
func (f *fleet) holder(lease string) (holding, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.holders[lease]
	return h, ok
}

// partitionHolders returns the holder of each billing partition ("" when
// none holds it).
func (f *fleet) partitionHolders() []holding {
	out := make([]holding, f.partitions)
	for p := range out {
		out[p], _ = f.holder("billing." + strconv.Itoa(p))
	}
	return out
}

// runsOf returns the runs of lease.
func (f *fleet) runsOf(lease string) []ran {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ran
	for _, r := range f.runs {
		if r.lease == lease {
			out = append(out, r)
		}
	}
	return out
}

// gridCell is one partition as a page shows it.
type gridCell struct {
	partition     int
	owner, holder string
	token         uint64
	state         string
}

var cellPattern = regexp.MustCompile(`<li class="cell [a-z]+(?: c[0-9])?" data-partition="([0-9]+)" data-owner="([^"]*)" data-holder="([^"]*)" data-token="([0-9]*)" data-state="([a-z]+)">`)

// parseGrid returns the partitions of the grids in a page.
func parseGrid(html string) []gridCell {
	var out []gridCell
	for _, m := range cellPattern.FindAllStringSubmatch(html, -1) {
		p, _ := strconv.Atoi(m[1])
		tok, _ := strconv.ParseUint(m[4], 10, 64)
		out = append(out, gridCell{partition: p, owner: m[2], holder: m[3], token: tok, state: m[5]})
	}
	return out
}

// gridMatches reports whether the grid shows every partition held by its
// true holder with its token, and owned by it; or says what differs.
func (f *fleet) gridMatches(cells []gridCell) error {
	if len(cells) != f.partitions {
		return fmt.Errorf("the grid shows %d partitions, want %d", len(cells), f.partitions)
	}
	for p, h := range f.partitionHolders() {
		c := cells[p]
		switch {
		case c.partition != p:
			return fmt.Errorf("cell %d shows partition %d", p, c.partition)
		case h.member == "":
			return fmt.Errorf("partition %d: no node holds it", p)
		case c.holder != h.member || c.token != h.token:
			return fmt.Errorf("partition %d: the grid shows holder %q token %d, the nodes say %q token %d", p, c.holder, c.token, h.member, h.token)
		case c.owner != h.member || c.state != "held":
			return fmt.Errorf("partition %d: owner %q, state %q, held by %q", p, c.owner, c.state, h.member)
		}
	}
	return nil
}

// termsOf returns the terms of lease the nodes won, in order.
func (f *fleet) termsOf(lease string) []seenTerm {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(f.terms), func(t seenTerm) bool { return t.lease != lease })
}
