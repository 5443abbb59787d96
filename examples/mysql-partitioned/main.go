// Command mysql-partitioned is a partitioned job on MySQL alone: simba's
// MySQL backend elects, for each of 8 partitions, the node that runs it,
// and each partition's term appends numbered entries to the partition's
// ledger, a table of the application's in the same database, each in a
// transaction fenced with the term's lease (package mylease): it checks
// the term first, reads the partition's position, appends the next entry
// and moves the position, and commits only while the term holds the
// partition. So across hand-offs and crashes each partition's entries are
// numbered 1, 2, 3, ... with no number twice and none skipped: a deposed
// term's transaction is refused, and its successor's first transaction
// begins only after the deposed one has ended, so it reads the position
// that one left.
//
// The tables, created if missing in the DSN's database (simba's own
// tables are there too, with the prefix -prefix):
//
//	ledger_position (part int PRIMARY KEY, position bigint)
//	ledger          (part int, position bigint, token bigint, node varchar(64))
//
// The ledger has no unique key on purpose: the fence alone keeps a number
// from being appended twice, and the ledger's rows say by which term and
// node.
//
// Start two or three nodes, stop one and watch the others take its
// partitions over:
//
//	export SIMBA_MYSQL_DSN='app:secret@tcp(db:3306)/app'
//	go run ./examples/mysql-partitioned -node a -for 1m &
//	go run ./examples/mysql-partitioned -node b -for 40s &
//	go run ./examples/mysql-partitioned -node c -for 20s
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver of database/sql

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/backend/mysql/mylease"
	"github.com/simba-go/simba/examples/internal/storylog"
	"github.com/simba-go/simba/fence"
)

// partitions is the ledger's partition count; every node must use the same.
const partitions = 8

// config is what the flags set.
type config struct {
	dsn    string        // -mysql
	node   string        // -node: the member ID
	prefix string        // -prefix: of simba's tables
	every  time.Duration // -every: how often a term appends an entry
	runFor time.Duration // -for: 0 runs until interrupted
}

func main() {
	host, _ := os.Hostname()
	var c config
	flag.StringVar(&c.dsn, "mysql", os.Getenv("SIMBA_MYSQL_DSN"), "MySQL or MariaDB DSN, go-sql-driver/mysql's format (default $SIMBA_MYSQL_DSN)")
	flag.StringVar(&c.node, "node", host, "this node's name")
	flag.StringVar(&c.prefix, "prefix", "simba_", "prefix of simba's tables")
	flag.DurationVar(&c.every, "every", 100*time.Millisecond, "how often each partition's term appends an entry")
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
		fmt.Fprintln(os.Stderr, "mysql-partitioned:", err)
		os.Exit(1)
	}
}

// run runs this node's partitions until ctx ends, then hands them off.
func run(ctx context.Context, c config, w io.Writer) error {
	if c.dsn == "" {
		return errors.New("no database: give -mysql DSN or set SIMBA_MYSQL_DSN")
	}
	if c.every <= 0 {
		c.every = 100 * time.Millisecond
	}
	db, err := sql.Open("mysql", c.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := createTables(ctx, db); err != nil {
		return err
	}
	// What the client and the backend log, warnings and errors, as this
	// node's lines.
	log := storylog.New(func(format string, args ...any) { fmt.Fprintf(w, "%s: %s\n", c.node, fmt.Sprintf(format, args...)) }, slog.LevelWarn)
	// The backend on a pool of its own (mysql.New): its renewals never
	// wait behind the application's queries, and its connections run a
	// transaction in one round trip (multiStatements), which the
	// application's need not.
	b, err := mysql.New(c.dsn, mysql.WithTablePrefix(c.prefix), mysql.WithLogger(log))
	if err != nil {
		return err
	}
	defer b.Close() // after client.Close
	client, err := simba.New(b, simba.WithMemberID(c.node), simba.WithTTL(3*time.Second), simba.WithLogger(log))
	if err != nil {
		return err
	}
	defer client.Close() // a graceful hand-off of every partition

	f := mylease.Fence{TablePrefix: b.TablePrefix()}
	task, err := client.Group("ledger", partitions).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
		fmt.Fprintf(w, "%s: partition %d, term %d begins\n", c.node, p, term.Token())
		var n, last int64
		defer func() {
			fmt.Fprintf(w, "%s: partition %d, term %d ends; it appended %d entries, the last #%d\n", c.node, p, term.Token(), n, last)
		}()
		for {
			pos, err := appendEntry(ctx, db, f, term.Name(), term.Token(), p, c.node)
			switch {
			case errors.Is(err, fence.ErrStale):
				fmt.Fprintf(w, "%s: partition %d, term %d refused: %v\n", c.node, p, term.Token(), err)
				return err // the term is over: stop, never retry
			case err != nil && ctx.Err() == nil:
				fmt.Fprintf(w, "%s: partition %d: %v\n", c.node, p, err)
			case err == nil:
				n, last = n+1, pos
			}
			select {
			case <-ctx.Done(): // the term ended or the node stops
				return nil
			case <-time.After(c.every):
			}
		}
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return task.Close()
}

// appendEntry appends the next entry of partition p's ledger in one
// transaction that commits only while the term of lease (the partition's,
// "ledger.{p}") and token holds it, and returns its position. The check
// comes first: at REPEATABLE READ (InnoDB's default) the transaction's
// snapshot is then the check's own; the position is read with a lock
// (FOR UPDATE), as last committed.
func appendEntry(ctx context.Context, db *sql.DB, f mylease.Fence, lease string, token uint64, p int, node string) (int64, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() // a no-op after Commit; at once after a refused check
	if err := f.Check(ctx, tx, lease, token); err != nil {
		return 0, err
	}
	var pos int64
	if err := tx.QueryRowContext(ctx, "SELECT position FROM ledger_position WHERE part = ? FOR UPDATE", p).Scan(&pos); err != nil {
		return 0, err
	}
	pos++
	if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (part, position, token, node) VALUES (?, ?, ?, ?)", p, pos, int64(token), node); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE ledger_position SET position = ? WHERE part = ?", pos, p); err != nil {
		return 0, err
	}
	return pos, tx.Commit()
}

// createTables creates the ledger and its positions if they are missing,
// under a named lock: nodes starting together would otherwise race.
func createTables(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK('mysql-partitioned', 30)").Scan(&got); err != nil {
		return err
	}
	if got.Int64 != 1 {
		return errors.New("another node held the named lock mysql-partitioned for 30s while creating the tables")
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK('mysql-partitioned')")
	values := make([]string, partitions)
	for p := range values {
		values[p] = fmt.Sprintf("(%d, 0)", p)
	}
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS ledger_position (
			part     int NOT NULL PRIMARY KEY,
			position bigint NOT NULL) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS ledger (
			part     int NOT NULL,
			position bigint NOT NULL,
			token    bigint NOT NULL,
			node     varchar(64) NOT NULL,
			KEY part_position (part, position)) ENGINE=InnoDB`,
		"INSERT IGNORE INTO ledger_position (part, position) VALUES " + strings.Join(values, ", "),
	} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}
