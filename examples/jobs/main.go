// Command jobs runs the declarative jobs of jobs.yaml, a scheduled report and
// a partitioned billing job, on two nodes of the in-memory backend. The
// second node joins a second after the first and takes over the billing
// partitions assigned to it. On SIGINT or SIGTERM (or when the -for time is
// up) each node stops its jobs, waits until every job has handed off, and
// only then closes its client: jobs first, then the session, so that the
// other node takes the jobs over at once instead of after a TTL.
//
//	go run ./examples/jobs              # until Ctrl-C
//	go run ./examples/jobs -for 5s      # five seconds
//	go run ./examples/jobs -config my.yaml
package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/examples/internal/storylog"
	"github.com/simba-go/simba/jobs"
)

// defaultConfig is jobs.yaml, built into the program.
//
//go:embed jobs.yaml
var defaultConfig []byte

// ttl is the session TTL of the nodes: 5s, so that they keep their
// sessions through the stalls of a loaded machine.
const ttl = 5 * time.Second

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain is the program: it parses args, runs until SIGINT, SIGTERM or the
// -for time, and returns the exit status.
func runMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runFor := fs.Duration("for", 0, "stop after this long (default: run until SIGINT or SIGTERM)")
	path := fs.String("config", "", "job configuration, .yaml or .json (default: the jobs.yaml built into the program)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		fmt.Fprintln(stderr, "jobs:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	if err := run(ctx, stdout, cfg); err != nil {
		fmt.Fprintln(stderr, "jobs:", err)
		return 1
	}
	return 0
}

func loadConfig(path string) (jobs.Config, error) {
	if path == "" {
		return jobs.Load(bytes.NewReader(defaultConfig), jobs.YAML)
	}
	return jobs.LoadFile(path)
}

// story prints what happens, one line at a time, with the time since the
// start.
type story struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (s *story) say(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "[%4.1fs] %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

// ledger counts the runs of each job, and the runs of one job on two nodes
// at once (there must be none).
type ledger struct {
	mu      sync.Mutex
	running map[string]string // lease → node running it
	runs    int
	overlap int
}

func (l *ledger) begin(lease, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if other, ok := l.running[lease]; ok && other != node {
		l.overlap++
	}
	l.running[lease] = node
	l.runs++
}

func (l *ledger) end(lease string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.running, lease)
}

// run runs two nodes with the jobs of cfg until ctx ends, and tells the story
// on w.
func run(ctx context.Context, w io.Writer, cfg jobs.Config) error {
	s := &story{w: w, start: time.Now()}
	server := memory.New()
	defer server.Close()
	book := &ledger{running: map[string]string{}}

	for _, j := range cfg.Scheduled {
		every := j.FixedDelay
		if every == 0 {
			every = j.FixedRate
		}
		s.say("job %s: one leader runs it every %v", j.Name, every)
	}
	for _, j := range cfg.Partitioned {
		s.say("job %s: %d partitions spread over the nodes, labelled %s", j.Group, j.Partitions, labels(j.Params))
	}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	startNode := func(name string) {
		wg.Go(func() {
			if err := node(ctx, s, server, name, cfg, book); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
			}
		})
	}
	s.say("starting node alpha on the in-memory backend (TTL %v)", ttl)
	startNode("alpha")
	select {
	case <-time.After(time.Second):
		s.say("starting node bravo: it joins the billing group and takes over the partitions assigned to it")
		startNode("bravo")
	case <-ctx.Done():
	}
	<-ctx.Done()
	reason := "signal received"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		reason = "time is up"
	}
	s.say("shutting down (%s): every node stops its jobs and waits for their hand-offs before closing its client", reason)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.say("done: %d runs; runs of one job on two nodes at once: %d", book.runs, book.overlap)
	return nil
}

// node runs one simulated process: a client, and the jobs on it until ctx
// ends; then the client closes, after the jobs.
func node(ctx context.Context, s *story, server *memory.Backend, name string, cfg jobs.Config, book *ledger) error {
	client, err := simba.New(server.Node(name), simba.WithTTL(ttl), simba.WithMemberID(name),
		simba.WithLogger(storylog.New(func(format string, args ...any) { s.say("%s: %s", name, fmt.Sprintf(format, args...)) }, slog.LevelWarn)))
	if err != nil {
		return err
	}
	reg := jobs.NewRegistry()
	reg.ScheduledTerm("report", func(ctx context.Context, term *simba.Term) error {
		book.begin(term.Name(), name)
		defer book.end(term.Name())
		s.say("%s: report runs with token %d", name, term.Token())
		work(ctx)
		return nil
	})
	reg.PartitionedWithParam("billing", func(ctx context.Context, term *simba.Term, p jobs.Partition) error {
		book.begin(term.Name(), name)
		defer book.end(term.Name())
		s.say("%s: billing partition %d (%s) runs with token %d", name, p.Index, p.Param, term.Token())
		work(ctx)
		return nil
	})
	// Run's own log lines (scheduling disabled, jobs started and stopped)
	// go into the story too.
	log := slog.New(storyHandler{s: s, prefix: name + ": "})

	err = jobs.Run(ctx, client, reg, cfg, jobs.WithLogger(log))
	if err == nil {
		s.say("%s: Run returned; leases %s holds now: %d; closing the client", name, name, held(server, name, cfg))
	}
	return errors.Join(err, client.Close())
}

// work stands for a run's work: 100ms, cut short when the term ends.
func work(ctx context.Context) {
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
	}
}

// held returns the number of the leases of cfg's jobs that node holds on the
// server.
func held(server *memory.Backend, node string, cfg jobs.Config) int {
	var leases []string
	for _, j := range cfg.Scheduled {
		leases = append(leases, j.Name)
	}
	for _, j := range cfg.Partitioned {
		for p := range j.Partitions {
			leases = append(leases, fmt.Sprintf("%s.%d", j.Group, p))
		}
	}
	n := 0
	for _, lease := range leases {
		if session, _, ok := server.Holder(lease); ok && strings.HasPrefix(session, node+"-") {
			n++ // memory session IDs are "<node>-<n>"
		}
	}
	return n
}

// storyHandler is a slog.Handler that tells Info records and above in the
// story: "alpha: jobs started (scheduled=1 partitioned=1)".
type storyHandler struct {
	s      *story
	prefix string
	attrs  []slog.Attr
}

func (h storyHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h storyHandler) Handle(_ context.Context, r slog.Record) error {
	var kv []string
	add := func(a slog.Attr) bool {
		kv = append(kv, a.String())
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	line := h.prefix + r.Message
	if len(kv) > 0 {
		line += " (" + strings.Join(kv, " ") + ")"
	}
	h.s.say("%s", line)
	return nil
}

func (h storyHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(slices.Clone(h.attrs), as...)
	return h
}

func (h storyHandler) WithGroup(string) slog.Handler { return h }

// labels formats sharding-item parameters as "0=Beijing 1=Shanghai".
func labels(params map[int]string) string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(params)) {
		out = append(out, fmt.Sprintf("%d=%s", p, params[p]))
	}
	return strings.Join(out, " ")
}
