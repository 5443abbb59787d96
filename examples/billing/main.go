// Command billing runs a partition group: 12 billing partitions spread over
// the nodes of a cluster by rendezvous hashing, each partition run by one node
// at a time on a schedule. A node joins, another leaves, and the printout
// shows which partitions moved and that no partition ever ran on two nodes at
// once.
//
//	go run ./examples/billing
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/examples/internal/storylog"
)

const partitions = 12

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "billing:", err)
		os.Exit(1)
	}
}

// ledger records billing runs per partition and checks that the runs of a
// partition never overlap and never go back to an older token.
type ledger struct {
	mu       sync.Mutex
	running  [partitions]int
	highest  [partitions]uint64
	runs     [partitions]int
	overlaps int
	stale    int
}

func (l *ledger) bill(ctx context.Context, p int, token uint64) {
	l.mu.Lock()
	l.running[p]++
	if l.running[p] > 1 {
		l.overlaps++
	}
	if token < l.highest[p] {
		l.stale++
	}
	l.highest[p] = max(l.highest[p], token)
	l.runs[p]++
	l.mu.Unlock()

	select { // the work of one billing run
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
	}

	l.mu.Lock()
	l.running[p]--
	l.mu.Unlock()
}

func run(w io.Writer) error {
	start := time.Now()
	var sayMu sync.Mutex // the clients' warnings are said from their goroutines
	say := func(format string, args ...any) {
		sayMu.Lock()
		defer sayMu.Unlock()
		fmt.Fprintf(w, "[%4.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	server := memory.New()
	defer server.Close()
	book := &ledger{}
	tasks := map[string]*simba.GroupTask{}
	clients := map[string]*simba.Client{}

	join := func(name string) error {
		c, err := simba.New(server.Node(name), simba.WithTTL(5*time.Second), // a TTL that holds on a loaded machine
			simba.WithMemberID(name), simba.WithLogger(storylog.New(say, slog.LevelWarn)))
		if err != nil {
			return err
		}
		clients[name] = c
		tasks[name], err = c.Group("billing", partitions).Schedule(simba.FixedDelay(100*time.Millisecond),
			func(ctx context.Context, term *simba.Term, p int) error {
				book.bill(ctx, p, term.Token())
				return nil
			})
		return err
	}
	owners := func() map[int]string {
		out := map[int]string{}
		for name, t := range tasks {
			for _, p := range t.Partitions() {
				out[p] = name
			}
		}
		return out
	}
	show := func() {
		names := make([]string, 0, len(tasks))
		for n := range tasks {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			say("  %s runs partitions %v", n, tasks[n].Partitions())
		}
	}
	moved := func(before, after map[int]string) string {
		var out []string
		for p := range partitions {
			if before[p] != after[p] {
				out = append(out, fmt.Sprintf("%d (%s→%s)", p, before[p], after[p]))
			}
		}
		return strings.Join(out, ", ")
	}

	for _, n := range []string{"a", "b", "c"} {
		if err := join(n); err != nil {
			return err
		}
	}
	time.Sleep(time.Second)
	say("three nodes share %d billing partitions:", partitions)
	show()

	before := owners()
	if err := join("d"); err != nil {
		return err
	}
	time.Sleep(time.Second)
	say("node d joined; only the partitions d gains moved: %s", moved(before, owners()))
	show()

	before = owners()
	say("node b leaves (its partitions are handed off: task first, then lease)")
	if err := clients["b"].Close(); err != nil {
		return err
	}
	delete(tasks, "b")
	time.Sleep(time.Second)
	say("only b's partitions moved: %s", moved(before, owners()))
	show()

	for _, c := range clients {
		if err := c.Close(); err != nil {
			return err
		}
	}
	total := 0
	for _, r := range book.runs {
		total += r
	}
	say("%d billing runs; runs of one partition on two nodes at once: %d; runs with an older token: %d",
		total, book.overlaps, book.stale)
	return nil
}
