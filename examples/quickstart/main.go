// Command quickstart shows simba's main job on the in-memory backend: three
// nodes in one process contend for one election; the leader's task runs with
// its fencing token; a graceful hand-off; a crash and the fail-over after the
// TTL. It ends by itself and prints what happened in plain words.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
)

// ttl is the session TTL: a crashed leader is replaced about this long after
// its last renewal.
const ttl = 2 * time.Second

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// sink is a shared resource that checks fencing tokens: it accepts a write
// only with a token at least as high as every token it has seen.
type sink struct {
	mu       sync.Mutex
	highest  uint64
	accepted int
	rejected int
}

func (s *sink) write(token uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		s.rejected++
		return false
	}
	s.highest = token
	s.accepted++
	return true
}

// count returns the writes accepted so far.
func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// node is one simulated process.
type node struct {
	name   string
	conn   *memory.Node
	client *simba.Client
	task   *simba.LeaderTask
}

func run(w io.Writer) error {
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(w, "[%4.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	server := memory.New()
	defer server.Close()
	shared := &sink{}

	// leaders receives the name and token of every new term.
	type leader struct {
		name string
		term *simba.Term
		at   time.Time
	}
	leaders := make(chan leader, 16)

	startNode := func(name string) (*node, error) {
		n := &node{name: name, conn: server.Node(name)}
		client, err := simba.New(n.conn, simba.WithTTL(ttl))
		if err != nil {
			return nil, err
		}
		n.client = client
		n.task, err = client.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			leaders <- leader{name, term, time.Now()}
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for term.Valid() {
				shared.write(term.Token()) // every write carries the token
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
			}
			return nil
		})
		return n, err
	}

	say("starting three nodes on the in-memory backend (TTL %v)", ttl)
	nodes := map[string]*node{}
	for _, name := range []string{"alpha", "bravo", "charlie"} {
		n, err := startNode(name)
		if err != nil {
			return err
		}
		defer n.client.Close()
		nodes[name] = n
		if name == "alpha" {
			l := <-leaders
			say("%s won the election %q: its task runs with fencing token %d", l.name, "ingest", l.term.Token())
		}
	}
	time.Sleep(time.Second)
	say("the shared sink has accepted %d writes so far, all from one leader at a time", shared.count())

	// A graceful hand-off: the leader stops its task.
	current := nodes["alpha"]
	stopped := time.Now()
	say("%s stops its task (graceful hand-off: first the task, then the lease)", current.name)
	current.task.Stop()
	<-current.task.Done()
	l := <-leaders
	say("%s took over %v after the stop, with token %d", l.name, l.at.Sub(stopped).Round(10*time.Microsecond), l.term.Token())
	time.Sleep(time.Second)

	// A crash: the leader's process dies without releasing anything.
	current = nodes[l.name]
	crashed := time.Now()
	say("%s crashes: no release, no goodbye; the others wait for its session to expire", current.name)
	current.conn.Crash()
	go current.client.Close() // the simulated process is gone: stop its goroutines
	l = <-leaders
	say("%s took over %v after the crash, when the server expired %s's session (TTL %v after its last renewal), with token %d",
		l.name, l.at.Sub(crashed).Round(100*time.Millisecond), current.name, ttl, l.term.Token())
	time.Sleep(time.Second)

	for _, n := range nodes {
		if err := n.client.Close(); err != nil {
			return err
		}
	}
	say("all nodes closed; the sink accepted %d writes and rejected %d stale ones; tokens only went up (last %d): one leader at a time",
		shared.accepted, shared.rejected, shared.highest)
	return nil
}
