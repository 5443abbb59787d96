// Command ingest is the seed's leader task: one node at a time polls a source
// from a cursor and writes batches to a sink, passing its term's fencing
// token with every write. The sink checks the token. When the leader is
// paused (a long GC pause, a frozen VM) its term ends on its own clock and
// another node takes over; when the paused node wakes up and finishes the
// write it had begun, the sink rejects it as stale, so no record is written
// twice or out of order.
//
//	go run ./examples/ingest
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
)

const (
	ttl   = 2 * time.Second
	pause = 5 * time.Second // longer than the TTL
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ingest:", err)
		os.Exit(1)
	}
}

// errStale is the sink's answer to a write with an old token.
var errStale = errors.New("stale fencing token")

// sink stores records and the cursor after them, and rejects writes whose
// token is lower than the highest it has accepted.
type sink struct {
	mu      sync.Mutex
	highest uint64
	records []int
	writers []string
}

// write appends batch if token is current, and returns the new cursor.
func (s *sink) write(node string, batch []int, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return fmt.Errorf("%w: %d < %d", errStale, token, s.highest)
	}
	s.highest = token
	s.records = append(s.records, batch...)
	s.writers = append(s.writers, node)
	return nil
}

// cursor is the position after the last record written.
func (s *sink) cursor() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// poll returns the next batch of the source after cursor: records are
// numbered from 1.
func poll(cursor int) []int {
	return []int{cursor + 1, cursor + 2, cursor + 3}
}

func run(w io.Writer) error {
	start := time.Now()
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(w, "[%4.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	server := memory.New()
	defer server.Close()
	out := &sink{}
	paused := make(chan chan struct{}, 1) // a node that reads one sends itself to sleep
	terms := make(chan *simba.Term, 4)

	ingest := func(node string) func(context.Context, *simba.Term) error {
		return func(ctx context.Context, term *simba.Term) error {
			terms <- term
			say("%s leads ingest with token %d", node, term.Token())
			for term.Valid() {
				batch := poll(out.cursor())
				select {
				case resume := <-paused:
					say("%s read records %d-%d, then froze (a long GC pause)", node, batch[0], batch[len(batch)-1])
					<-resume
					say("%s woke up and writes records %d-%d with token %d", node, batch[0], batch[len(batch)-1], term.Token())
				default:
				}
				if err := out.write(node, batch, term.Token()); err != nil {
					say("%s: the sink refused the write: %v", node, err)
					return err
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(150 * time.Millisecond):
				}
			}
			return nil
		}
	}

	east := server.Node("east")
	eastClient, err := simba.New(east, simba.WithTTL(ttl))
	if err != nil {
		return err
	}
	defer eastClient.Close()
	if _, err := eastClient.Election("ingest").RunWhileLeader(ingest("east")); err != nil {
		return err
	}
	eastTerm := <-terms
	westClient, err := simba.New(server.Node("west"), simba.WithTTL(ttl))
	if err != nil {
		return err
	}
	defer westClient.Close()
	if _, err := westClient.Election("ingest").RunWhileLeader(ingest("west")); err != nil {
		return err
	}
	time.Sleep(time.Second)

	// Freeze east: its task stops mid-write, and its renewals stop too.
	resume := make(chan struct{})
	paused <- resume
	east.Partition()
	westTerm := <-terms
	say("east's own clock had ended its term %v before west's began (its deadline, from its last confirmed renewal, minus the margin)",
		westTerm.Start().Sub(eastTerm.Deadline()).Round(time.Millisecond))
	time.Sleep(pause - time.Since(westTerm.Start()) - ttl)
	east.Heal()
	close(resume)
	time.Sleep(time.Second)

	if err := eastClient.Close(); err != nil {
		return err
	}
	if err := westClient.Close(); err != nil {
		return err
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	for i, r := range out.records {
		if r != i+1 {
			return fmt.Errorf("record %d at position %d: the sink is corrupt", r, i+1)
		}
	}
	say("the sink holds records 1-%d, each once and in order, written by %d batches", len(out.records), len(out.writers))
	return nil
}
