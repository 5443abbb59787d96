// Command stream shows package stream on the in-memory backend: three nodes
// process a source of numbered messages in 8 partitions, one message at a
// time per partition, with checkpoints fenced by each partition's term. One
// node crashes mid-stream; the others take its partitions over from their
// last checkpoints. The printout shows every message processed at least
// once, in order per partition, and no checkpoint ever moving backwards.
//
//	go run ./examples/stream
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/examples/internal/storylog"
	"github.com/simba-go/simba/stream"
)

const (
	partitions = 8
	messages   = 150                   // per partition
	cost       = 10 * time.Millisecond // to process one message
	ttl        = time.Second           // a crashed node's partitions move about this long after its last renewal
	commit     = 250 * time.Millisecond
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "stream:", err)
		os.Exit(1)
	}
}

// source serves messages 0..messages-1 of every partition, ten at a time;
// past the end it waits.
type source struct{}

func (source) Poll(ctx context.Context, partition int, from int64) ([]stream.Message, error) {
	if from >= messages {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	var out []stream.Message
	for off := from; off < min(from+10, messages); off++ {
		out = append(out, stream.Message{Offset: off, Value: fmt.Appendf(nil, "message %d of partition %d", off, partition)})
	}
	return out, nil
}

// ledger is what every node saw, kept to check the story at the end.
type ledger struct {
	mu          sync.Mutex
	processed   [partitions][]int64 // offsets, in processing order
	byTerm      map[uint64][]int64  // offsets processed per term (token)
	checkpoints [partitions][]int64 // accepted, in order
	tokens      [partitions][]uint64
	backwards   int // accepted checkpoints below the previous one
	refused     int // checkpoint writes refused by the fence
	takeovers   []string
}

func (l *ledger) done() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := range partitions {
		seen := map[int64]bool{}
		for _, off := range l.processed[p] {
			seen[off] = true
		}
		if len(seen) < messages {
			return false
		}
	}
	return true
}

// fenced is the checkpoint store of a node: the default RecordStore, with
// the ledger told of every write.
type fenced struct {
	stream.RecordStore
	node    string
	l       *ledger
	crashed func() bool
	say     func(string, ...any)
}

func (s fenced) Load(ctx context.Context, term *simba.Term, p int) (int64, bool, error) {
	off, found, err := s.RecordStore.Load(ctx, term, p)
	if err == nil && s.crashed() {
		s.l.mu.Lock()
		s.l.takeovers = append(s.l.takeovers, fmt.Sprintf("%s took partition %d over at checkpoint %d with token %d", s.node, p, off, term.Token()))
		s.l.mu.Unlock()
		s.say("%s takes partition %d over at checkpoint %d (token %d)", s.node, p, off, term.Token())
	}
	return off, found, err
}

func (s fenced) Save(ctx context.Context, term *simba.Term, p int, off int64) error {
	err := s.RecordStore.Save(ctx, term, p, off)
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	switch {
	case err == nil:
		if cps := s.l.checkpoints[p]; len(cps) > 0 && off < cps[len(cps)-1] {
			s.l.backwards++
		}
		s.l.checkpoints[p] = append(s.l.checkpoints[p], off)
		s.l.tokens[p] = append(s.l.tokens[p], term.Token())
	case errors.Is(err, stream.ErrFenced):
		s.l.refused++
	}
	return err
}

// handler processes one partition in one term.
type handler struct {
	l *ledger
}

func (h handler) Process(ctx context.Context, term *simba.Term, msg stream.Message) error {
	t := time.NewTimer(cost) // the work
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	h.l.processed[msg.Partition] = append(h.l.processed[msg.Partition], msg.Offset)
	h.l.byTerm[term.Token()] = append(h.l.byTerm[term.Token()], msg.Offset)
	return nil
}

// node is one simulated process.
type node struct {
	name   string
	conn   *memory.Node
	client *simba.Client
	task   *stream.Task
}

func run(w io.Writer) error {
	start := time.Now()
	var sayMu sync.Mutex // say is called from the nodes' loops too
	say := func(format string, args ...any) {
		sayMu.Lock()
		defer sayMu.Unlock()
		fmt.Fprintf(w, "[%4.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	server := memory.New()
	defer server.Close()
	l := &ledger{byTerm: map[uint64][]int64{}}
	var crashMu sync.Mutex
	crashed := false
	hasCrashed := func() bool { crashMu.Lock(); defer crashMu.Unlock(); return crashed }

	say("three nodes process %d partitions of %d numbered messages, one at a time per partition (TTL %v, checkpoints every %v)",
		partitions, messages, ttl, commit)
	var nodes []*node
	for _, name := range []string{"alpha", "bravo", "charlie"} {
		n := &node{name: name, conn: server.Node(name)}
		c, err := simba.New(n.conn, simba.WithTTL(ttl), simba.WithMemberID(name), simba.WithLogger(storylog.New(say, slog.LevelWarn)))
		if err != nil {
			return err
		}
		n.client = c
		store := fenced{node: name, l: l, crashed: hasCrashed, say: say}
		n.task, err = stream.Start(c.Group("numbers", partitions), source{},
			func(int) stream.Handler { return handler{l} },
			stream.WithCheckpointStore(store), stream.WithCommitInterval(commit))
		if err != nil {
			c.Close()
			return err
		}
		defer n.stop()
		nodes = append(nodes, n)
	}
	time.Sleep(600 * time.Millisecond)
	for _, n := range nodes {
		say("%-7s holds partitions %v", n.name, n.task.Partitions())
	}

	// The node with the most partitions dies without a word.
	victim := nodes[0]
	for _, n := range nodes {
		if len(n.task.Partitions()) > len(victim.task.Partitions()) {
			victim = n
		}
	}
	lost := victim.task.Partitions()
	crashMu.Lock()
	crashed = true
	crashMu.Unlock()
	say("%s crashes holding partitions %v: no hand-off, no final checkpoint", victim.name, lost)
	victim.conn.Crash()
	gone := make(chan struct{})
	go func() { // the process is gone: stop its goroutines
		defer close(gone)
		victim.stop()
	}()

	for !l.done() {
		time.Sleep(50 * time.Millisecond)
	}
	say("every message of every partition has been processed")
	<-gone
	for _, n := range nodes {
		n.stop()
	}
	say("all nodes stopped")
	return l.report(w, lost)
}

func (n *node) stop() {
	n.task.Close()
	n.client.Close()
}

// report prints the story's numbers and checks its claims.
func (l *ledger) report(w io.Writer, lost []int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "partition  processed  again  checkpoints (accepted, in order)")
	var failures []string
	again := 0
	for p := range partitions {
		seen := map[int64]bool{}
		dup := 0
		for _, off := range l.processed[p] {
			if seen[off] {
				dup++
			}
			seen[off] = true
		}
		again += dup
		if len(seen) != messages {
			failures = append(failures, fmt.Sprintf("partition %d: %d of %d messages processed", p, len(seen), messages))
		}
		mark := ""
		if slices.Contains(lost, p) {
			mark = " (moved at the crash)"
		}
		fmt.Fprintf(w, "%9d  %9d  %5d  %s%s\n", p, len(l.processed[p]), dup, compact(l.checkpoints[p]), mark)
	}
	// In order: within each term, offsets strictly increase by one.
	tokens := make([]uint64, 0, len(l.byTerm))
	for tok := range l.byTerm {
		tokens = append(tokens, tok)
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
	for _, tok := range tokens {
		offs := l.byTerm[tok]
		for i := 1; i < len(offs); i++ {
			if offs[i] != offs[i-1]+1 {
				failures = append(failures, fmt.Sprintf("term %d processed %d after %d", tok, offs[i], offs[i-1]))
			}
		}
	}
	for p := range partitions {
		if !slices.IsSorted(l.tokens[p]) {
			failures = append(failures, fmt.Sprintf("partition %d: a checkpoint of an older term accepted after a newer one", p))
		}
	}
	if l.backwards > 0 {
		failures = append(failures, fmt.Sprintf("%d checkpoints moved backwards", l.backwards))
	}
	fmt.Fprintln(w)
	for _, t := range l.takeovers {
		fmt.Fprintln(w, t)
	}
	fmt.Fprintf(w, "every message processed at least once: %v (%d processed again: at least once, not exactly once)\n",
		!hasPrefix(failures, "partition"), again)
	fmt.Fprintf(w, "in order per partition, within every one of %d terms: %v\n", len(tokens), !hasPrefix(failures, "term"))
	fmt.Fprintf(w, "checkpoints never moved backwards: %v (%d writes of ended terms refused by the fence)\n", l.backwards == 0, l.refused)
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "; "))
	}
	return nil
}

func hasPrefix(ss []string, prefix string) bool {
	return slices.ContainsFunc(ss, func(s string) bool { return strings.HasPrefix(s, prefix) })
}

// compact writes checkpoints as "0 → 25 → 50 … 150", the first three and
// the last.
func compact(cps []int64) string {
	if len(cps) == 0 {
		return "none"
	}
	var parts []string
	for i, c := range cps {
		if i < 3 || i == len(cps)-1 {
			parts = append(parts, fmt.Sprint(c))
		} else if i == 3 {
			parts = append(parts, "…")
		}
	}
	return strings.Join(parts, " → ")
}
