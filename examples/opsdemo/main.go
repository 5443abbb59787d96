// Command opsdemo is one node of a small cluster to operate with the simba
// command, on etcd, ZooKeeper or PostgreSQL. Every node runs
//
//   - ingest: an election whose leader works while it leads (RunWhileLeader);
//   - report: a scheduled job, run by one node at a time at a fixed rate;
//   - billing: a group of 8 partitions spread over the nodes, each partition
//     run at a fixed rate by the node it is assigned to.
//
// It prints what this node starts, runs and hands off. Start two or three of
// them, with different -member names, against the same backend:
//
//	simba dev                                  # terminal 1: a local etcd
//	export SIMBA_ETCD=127.0.0.1:2379           # terminals 2, 3, 4
//	go run ./examples/opsdemo -member a        # terminal 2
//	go run ./examples/opsdemo -member b        # terminal 3
//	simba status                               # terminal 4
//
// On PostgreSQL, give every node and the simba command the same DSN
// (-postgres, or $SIMBA_POSTGRES); -prefix then names the schema, as the
// simba command's --prefix does (default simba):
//
//	export SIMBA_POSTGRES='postgres://app@db:5432/app?sslmode=verify-full'
//	go run ./examples/opsdemo -member a
//	simba status
//
// It waits -start-timeout (15s) for its first session, printing the
// client's warnings meanwhile, and exits if the backend does not answer.
// SIGINT or SIGTERM stops the node gracefully: it hands everything off,
// then closes its session. SIGKILL is a crash: its leases pass to the other
// nodes when its session expires, one TTL (5s) later.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/examples/internal/storylog"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is a node's configuration, from its flags.
type config struct {
	etcd, zk, pg    string
	prefix          string
	member          string
	ttl             time.Duration
	startTimeout    time.Duration // the wait for the first session
	report, billing time.Duration // the fixed rates
	partitions      int
	work            time.Duration // how long each run works
	verbose         bool          // print every billing run
}

// runMain parses args, runs the node until ctx ends, and returns the exit
// status.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	host, _ := os.Hostname()
	cfg := config{}
	fs := flag.NewFlagSet("opsdemo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.etcd, "etcd", os.Getenv("SIMBA_ETCD"), "etcd `endpoints`, comma-separated (default $SIMBA_ETCD)")
	fs.StringVar(&cfg.zk, "zk", os.Getenv("SIMBA_ZK"), "ZooKeeper `servers`, comma-separated (default $SIMBA_ZK)")
	fs.StringVar(&cfg.pg, "postgres", os.Getenv("SIMBA_POSTGRES"), "PostgreSQL `DSN` (default $SIMBA_POSTGRES)")
	fs.StringVar(&cfg.prefix, "prefix", os.Getenv("SIMBA_PREFIX"), "etcd key `prefix`, ZooKeeper root or PostgreSQL schema (its slashes trimmed) (default $SIMBA_PREFIX, else the backend's default)")
	fs.StringVar(&cfg.member, "member", fmt.Sprintf("%s-%d", host, os.Getpid()), "this node's member `id`")
	// 5s, not less: a node must keep its session through the stalls of a
	// loaded laptop (a renewal every third of the TTL, each late by the
	// length of a stall), and a crashed one's leases still move in
	// seconds.
	fs.DurationVar(&cfg.ttl, "ttl", 5*time.Second, "session TTL")
	fs.DurationVar(&cfg.startTimeout, "start-timeout", 15*time.Second, "give up when the backend gives no session within this long")
	fs.DurationVar(&cfg.report, "report", 2*time.Second, "fixed rate of the report job")
	fs.DurationVar(&cfg.billing, "billing", time.Second, "fixed rate of each billing partition")
	fs.IntVar(&cfg.partitions, "partitions", 8, "billing partitions")
	fs.DurationVar(&cfg.work, "work", 200*time.Millisecond, "how long each run works")
	fs.BoolVar(&cfg.verbose, "v", false, "print every billing run, not only the partitions taken and handed off")
	runFor := fs.Duration("for", 0, "stop after this long (default: until SIGINT or SIGTERM)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "opsdemo: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	if err := run(ctx, cfg, stdout); err != nil {
		fmt.Fprintln(stderr, "opsdemo:", err)
		return 1
	}
	return 0
}

// openBackend opens the backend the flags name, which logs to log.
func openBackend(cfg config, log *slog.Logger) (backend.Backend, string, error) {
	given := 0
	for _, v := range []string{cfg.etcd, cfg.zk, cfg.pg} {
		if v != "" {
			given++
		}
	}
	switch {
	case given > 1:
		return nil, "", errors.New("give one of -etcd, -zk and -postgres")
	case cfg.etcd != "":
		opts := []etcd.Option{etcd.WithLogger(log)}
		if cfg.prefix != "" {
			opts = append(opts, etcd.WithPrefix(cfg.prefix))
		}
		b, err := etcd.New(strings.Split(cfg.etcd, ","), opts...)
		return b, "etcd at " + cfg.etcd, err
	case cfg.zk != "":
		opts := []zookeeper.Option{zookeeper.WithLogger(log)}
		if cfg.prefix != "" {
			opts = append(opts, zookeeper.WithRoot(cfg.prefix))
		}
		b, err := zookeeper.New(strings.Split(cfg.zk, ","), opts...)
		return b, "ZooKeeper at " + cfg.zk, err
	case cfg.pg != "":
		return openPostgres(cfg, log)
	}
	return nil, "", errors.New("no backend: give -etcd, -zk or -postgres, or set SIMBA_ETCD (simba dev runs a local etcd)")
}

// openPostgres opens the PostgreSQL backend of cfg.pg, in the schema
// cfg.prefix names (without its slashes, as the simba command reads
// --prefix). The description names the server and the schema, never the
// DSN, whose password it may hold.
func openPostgres(cfg config, log *slog.Logger) (backend.Backend, string, error) {
	pc, err := pgconn.ParseConfig(cfg.pg)
	if err != nil {
		// pgconn's message quotes the DSN with its password masked.
		return nil, "", fmt.Errorf("-postgres: %w", err)
	}
	opts := []postgres.Option{postgres.WithLogger(log)}
	if schema := strings.Trim(cfg.prefix, "/"); schema != "" {
		opts = append(opts, postgres.WithSchema(schema))
	}
	b, err := postgres.New(cfg.pg, opts...)
	if err != nil {
		return nil, "", fmt.Errorf("-postgres: %w", err)
	}
	where := fmt.Sprintf("PostgreSQL at %s/%s (schema %s)", net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))), pc.Database, b.Schema())
	return b, where, nil
}

// printer prints timestamped lines, one at a time.
type printer struct {
	mu     sync.Mutex
	w      io.Writer
	member string
}

func (p *printer) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%s %s: %s\n", time.Now().Format("15:04:05.000"), p.member, fmt.Sprintf(format, args...))
}

// event prints what happens to this node's terms and session.
func (p *printer) event(e simba.Event) {
	switch e := e.(type) {
	case simba.Elected:
		p.say("took %s with token %d", e.Election, e.Token)
	case simba.Revoked:
		p.say("handed off %s (token %d): %v", e.Election, e.Token, e.Reason)
	case simba.SessionStarted:
		p.say("session started")
	case simba.SessionLost:
		p.say("session lost: every term ended")
	}
}

// work stands for the work of one run.
func work(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// run runs the node until ctx ends, then hands everything off and closes.
func run(ctx context.Context, cfg config, w io.Writer) error {
	p := &printer{w: w, member: cfg.member}
	log := storylog.New(p.say, slog.LevelWarn) // the client's and the backend's, as the node's lines
	b, where, err := openBackend(cfg, log)
	if err != nil {
		return err
	}
	defer b.Close()
	client, err := simba.New(b, simba.WithMemberID(cfg.member), simba.WithTTL(cfg.ttl), simba.WithEventHandler(p.event), simba.WithLogger(log))
	if err != nil {
		return err
	}
	p.say("running ingest, report (every %v) and billing (%d partitions, every %v) on %s", cfg.report, cfg.partitions, cfg.billing, where)
	rctx, cancel := context.WithTimeout(ctx, cfg.startTimeout)
	err = client.Ready(rctx)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return client.Close() // interrupted while waiting
	case err != nil:
		return errors.Join(fmt.Errorf("no session on %s within %v (-start-timeout): is it running, and is the address right?", where, cfg.startTimeout), client.Close())
	}

	ingest, err := client.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		<-ctx.Done() // ingests while it leads
		return nil
	})
	if err != nil {
		return errors.Join(err, client.Close())
	}
	report, err := client.Election("report").Schedule(simba.FixedRate(cfg.report), func(ctx context.Context, term *simba.Term) error {
		p.say("report runs with token %d", term.Token())
		work(ctx, cfg.work)
		return nil
	})
	if err != nil {
		return errors.Join(err, client.Close())
	}
	billing, err := client.Group("billing", cfg.partitions).Schedule(simba.FixedRate(cfg.billing), func(ctx context.Context, term *simba.Term, partition int) error {
		if cfg.verbose {
			p.say("billing partition %d runs with token %d", partition, term.Token())
		}
		work(ctx, cfg.work)
		return nil
	})
	if err != nil {
		return errors.Join(err, client.Close())
	}
	<-ctx.Done()
	p.say("stopping: handing everything off")
	ingest.Stop()
	report.Stop()
	billing.Stop()
	for _, done := range []<-chan struct{}{ingest.Done(), report.Done(), billing.Done()} {
		<-done
	}
	if err := client.Close(); err != nil {
		return err
	}
	p.say("stopped")
	return nil
}
