// Command postgres-outbox is a partitioned outbox relay on PostgreSQL
// alone: simba's PostgreSQL backend elects, for each of 8 partitions, the
// node that relays it, and each partition's term moves its unsent outbox
// rows to a sink table in transactions fenced with the term's lease
// (package pglease), marking them sent in the same transaction. So across
// hand-offs and crashes no row is lost or sent twice: a deposed term's
// transaction is refused, and its successor's first transaction begins
// only after the deposed one has ended, so it sees every row that one
// marked sent.
//
// The tables, created if missing (unqualified, so in the schema the DSN's
// search_path names; simba's own tables are in schema "simba"):
//
//	outbox (id bigserial PRIMARY KEY, partition int, payload text, sent bool)
//	sink   (outbox_id bigint, partition int, payload text, token bigint, node text)
//
// The sink has no unique key on purpose: the fence alone keeps a row from
// being sent twice, and the sink's rows say by which term and node. (With a
// sink outside the database, a broker say, the same relay delivers at
// least once: the mark and the send can no longer share a transaction.)
//
// Start two or three nodes, add rows, stop one and watch the others take
// its partitions over:
//
//	export SIMBA_PG_DSN=postgres://app@db:5432/app
//	go run ./examples/postgres-outbox -node a -insert 1000 &
//	go run ./examples/postgres-outbox -node b -for 1m &
//	go run ./examples/postgres-outbox -node c -for 20s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/backend/postgres/pglease"
	"github.com/simba-go/simba/examples/internal/storylog"
	"github.com/simba-go/simba/fence"
)

// partitions is the outbox's partition count; every node must use the same.
const partitions = 8

// config is what the flags set.
type config struct {
	dsn    string        // -postgres
	node   string        // -node: the member ID
	schema string        // -schema: simba's tables
	insert int           // -insert: rows this node adds to the outbox first
	runFor time.Duration // -for: 0 runs until interrupted
}

func main() {
	host, _ := os.Hostname()
	var c config
	flag.StringVar(&c.dsn, "postgres", os.Getenv("SIMBA_PG_DSN"), "PostgreSQL DSN (default $SIMBA_PG_DSN)")
	flag.StringVar(&c.node, "node", host, "this node's name")
	flag.StringVar(&c.schema, "schema", "simba", "schema of simba's tables")
	flag.IntVar(&c.insert, "insert", 0, "rows to add to the outbox at start")
	flag.DurationVar(&c.runFor, "for", 0, "stop after this long (default: until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.runFor)
		defer cancel()
	}
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "postgres-outbox:", err)
		os.Exit(1)
	}
}

// run relays this node's partitions until ctx ends, then hands them off.
func run(ctx context.Context, c config, w io.Writer) error {
	if c.dsn == "" {
		return errors.New("no database: give -postgres DSN or set SIMBA_PG_DSN")
	}
	pool, err := pgxpool.New(ctx, c.dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := createTables(ctx, pool); err != nil {
		return err
	}
	if err := insertRows(ctx, pool, c.insert); err != nil {
		return err
	}
	// What the client and the backend log, warnings and errors, as this
	// node's lines.
	log := storylog.New(func(format string, args ...any) { fmt.Fprintf(w, "%s: %s\n", c.node, fmt.Sprintf(format, args...)) }, slog.LevelWarn)
	b, err := postgres.NewFromPool(pool, postgres.WithSchema(c.schema), postgres.WithLogger(log))
	if err != nil {
		return err
	}
	defer b.Close() // after client.Close
	client, err := simba.New(b, simba.WithMemberID(c.node), simba.WithTTL(3*time.Second), simba.WithLogger(log))
	if err != nil {
		return err
	}
	defer client.Close() // a graceful hand-off of every partition

	f := pglease.Fence{Schema: b.Schema()}
	task, err := client.Group("outbox", partitions).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
		fmt.Fprintf(w, "%s: partition %d, term %d begins\n", c.node, p, term.Token())
		for {
			n, err := relay(ctx, pool, f, term, p, c.node)
			switch {
			case errors.Is(err, fence.ErrStale):
				return err // the term is over: stop, never retry
			case err != nil && ctx.Err() == nil:
				fmt.Fprintf(w, "%s: partition %d: %v\n", c.node, p, err)
			case n > 0:
				fmt.Fprintf(w, "%s: partition %d, term %d sent %d rows\n", c.node, p, term.Token(), n)
				continue // there may be more
			}
			select {
			case <-ctx.Done(): // the term ended or the node stops
				return nil
			case <-time.After(100 * time.Millisecond): // poll for new rows
			}
		}
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return task.Close()
}

// relay moves up to 100 unsent rows of partition p to the sink in one
// transaction that commits only while term holds the partition's lease.
func relay(ctx context.Context, pool *pgxpool.Pool, f pglease.Fence, term *simba.Term, p int, node string) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := f.CheckPgx(ctx, tx, term.Name(), term.Token()); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			WITH moved AS (
				UPDATE outbox SET sent = true
				WHERE id IN (SELECT id FROM outbox WHERE partition = $1 AND NOT sent ORDER BY id LIMIT 100)
				RETURNING id, partition, payload)
			INSERT INTO sink (outbox_id, partition, payload, token, node)
			SELECT id, partition, payload, $2, $3 FROM moved`,
			p, int64(term.Token()), node)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// createTables creates the outbox and the sink if they are missing, under
// an advisory lock: nodes starting together would otherwise race.
func createTables(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
			SELECT pg_advisory_xact_lock(hashtext('postgres-outbox'));
			CREATE TABLE IF NOT EXISTS outbox (
				id        bigserial PRIMARY KEY,
				partition int NOT NULL,
				payload   text NOT NULL,
				sent      bool NOT NULL DEFAULT false);
			CREATE INDEX IF NOT EXISTS outbox_unsent ON outbox (partition, id) WHERE NOT sent;
			CREATE TABLE IF NOT EXISTS sink (
				outbox_id bigint NOT NULL,
				partition int NOT NULL,
				payload   text NOT NULL,
				token     bigint NOT NULL,
				node      text NOT NULL)`)
		return err
	})
}

// insertRows adds n rows to the outbox, spread over the partitions.
func insertRows(ctx context.Context, pool *pgxpool.Pool, n int) error {
	_, err := pool.Exec(ctx, `
		INSERT INTO outbox (partition, payload)
		SELECT i % $2, 'event ' || i FROM generate_series(1, $1::int) AS i`, n, partitions)
	return err
}
