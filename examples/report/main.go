// Command report runs a scheduled leader job: two nodes share the election
// "report", and only the leader generates the report, once a second, after
// an initial delay counted from the start of its term. When the leader shuts
// down, the other node takes over and starts its own schedule.
//
//	go run ./examples/report
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/examples/internal/storylog"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	start := time.Now()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "[%4.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	server := memory.New()
	defer server.Close()

	schedule := simba.FixedRate(time.Second).WithInitialDelay(500 * time.Millisecond)
	reports := make(chan string, 16)
	var count int
	generate := func(node string) func(context.Context, *simba.Term) error {
		return func(ctx context.Context, term *simba.Term) error {
			mu.Lock()
			count++
			n := count
			mu.Unlock()
			say("%s generated report #%d with token %d, %v into its term",
				node, n, term.Token(), time.Since(term.Start()).Round(100*time.Millisecond))
			reports <- node
			return nil
		}
	}

	say("two nodes schedule %q: %s", "report", schedule)
	var clients []*simba.Client
	for _, node := range []string{"first", "second"} {
		c, err := simba.New(server.Node(node), simba.WithTTL(5*time.Second), // one that holds on a loaded machine
			simba.WithLogger(storylog.New(say, slog.LevelWarn)))
		if err != nil {
			return err
		}
		defer c.Close()
		clients = append(clients, c)
		if _, err := c.Election("report").Schedule(schedule, generate(node)); err != nil {
			return err
		}
		if node == "first" {
			<-reports // first leads
		}
	}
	for range 2 {
		<-reports
	}
	say("first shuts down: its schedule stops and it hands the election over")
	if err := clients[0].Close(); err != nil {
		return err
	}
	for range 3 {
		<-reports
	}
	if err := clients[1].Close(); err != nil {
		return err
	}
	say("done: %d reports, never two at once", count)
	return nil
}
