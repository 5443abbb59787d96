package main

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
)

// recorder records what the nodes of a test do: their events and the
// starts of their runs.
type recorder struct {
	mu     sync.Mutex
	events []simba.Event
	runs   []runRecord
}

// runRecord is one run started by a node.
type runRecord struct {
	member string
	lease  string
	token  uint64
	at     time.Time
}

func (r *recorder) event(e simba.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) ran(member string, term *simba.Term) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, runRecord{member: member, lease: term.Name(), token: term.Token(), at: time.Now()})
}

// runsOf returns the runs of lease started at or after since.
func (r *recorder) runsOf(lease string, since time.Time) []runRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []runRecord
	for _, run := range r.runs {
		if run.lease == lease && !run.at.Before(since) {
			out = append(out, run)
		}
	}
	return out
}

// elected returns the terms of lease begun, in order.
func (r *recorder) elected(lease string) []simba.Elected {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []simba.Elected
	for _, e := range r.events {
		if el, ok := e.(simba.Elected); ok && el.Election == lease {
			out = append(out, el)
		}
	}
	return out
}

// testNode is one simba client of a test, with a member id.
type testNode struct {
	id     string
	client *simba.Client
	rec    *recorder
}

// startNode starts a client on b, closed when the test ends (if the test
// has not closed it).
func startNode(t testing.TB, b backend.Backend, id string, ttl time.Duration, rec *recorder) *testNode {
	t.Helper()
	c, err := simba.New(b, simba.WithMemberID(id), simba.WithTTL(ttl), simba.WithEventHandler(rec.event))
	if err != nil {
		t.Fatalf("simba.New: %v", err)
	}
	t.Cleanup(func() {
		mem, inBubble := b.(*memory.Node) // memory nodes run in synctest bubbles
		if !inBubble {
			if _, err := await.Within(await.Returned(c.Close), time.Minute, "%s: Close of client %s did not return", t.Name(), id); err != nil {
				t.Error(err) // its goroutines are left to goleak
			}
			return
		}
		// If the test failed early: heal the node first. A client that
		// cannot close even so (a crashed node whose deadline never passes)
		// keeps its goroutines, and the test's synctest bubble, alive for
		// ever: end the binary with a panic that says so rather than hang.
		mem.Heal()
		await.Cleanup(t, await.Returned(c.Close), 24*time.Hour, "Close of client %s did not return", id)
	})
	return &testNode{id: id, client: c, rec: rec}
}

// schedule runs a job on s, recording its runs.
func (n *testNode) schedule(t testing.TB, name string, s simba.Schedule) *simba.LeaderTask {
	t.Helper()
	task, err := n.client.Election(name).Schedule(s, func(ctx context.Context, term *simba.Term) error {
		n.rec.ran(n.id, term)
		return nil
	})
	if err != nil {
		t.Fatalf("Schedule: %v", err)
	}
	return task
}

// whileLeader holds an election until its term ends.
func (n *testNode) whileLeader(t testing.TB, name string) *simba.LeaderTask {
	t.Helper()
	task, err := n.client.Election(name).RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		n.rec.ran(n.id, term)
		<-ctx.Done()
		return nil
	})
	if err != nil {
		t.Fatalf("RunWhileLeader: %v", err)
	}
	return task
}

// group joins a group of the given partitions, holding each partition it
// gets until its term ends.
func (n *testNode) group(t testing.TB, name string, partitions int) *simba.GroupTask {
	t.Helper()
	task, err := n.client.Group(name, partitions).RunWhileLeader(func(ctx context.Context, term *simba.Term, _ int) error {
		n.rec.ran(n.id, term)
		<-ctx.Done()
		return nil
	})
	if err != nil {
		t.Fatalf("Group: %v", err)
	}
	return task
}

// decode unmarshals a command's JSON output.
func decode[T any](t testing.TB, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("decoding %q: %v", out, err)
	}
	return v
}
