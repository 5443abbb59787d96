// Command ingest is the seed's leader task: one node at a time polls a source
// from a cursor and writes batches to a sink, passing its term's fencing
// token with every write. The sink is a SQLite database (pure Go, nothing to
// install) whose transactions are guarded by package sqlfence: the records, the
// cursor and the token check commit together. When the leader is paused (a
// long GC pause, a frozen VM) its term ends on its own clock and another node
// takes over; when the paused node wakes up and finishes the write it had
// begun, the fence rejects it as stale, so no record is written twice or out
// of order.
//
//	go run ./examples/ingest
package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/examples/internal/storylog"
	"github.com/simba-go/simba/fence/sqlfence"
)

const (
	ttl   = 5 * time.Second     // west's session must hold on a loaded machine
	pause = ttl + 3*time.Second // longer than the TTL
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ingest:", err)
		os.Exit(1)
	}
}

// sink is a SQLite database holding the records and the cursor after them,
// with the fence table that guards every write.
type sink struct {
	db    *sql.DB
	fence sqlfence.Fence
}

func openSink(ctx context.Context, path string) (*sink, error) {
	// BEGIN IMMEDIATE and a busy timeout, as sqlfence.Fence.Check advises.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	s := &sink{db: db, fence: sqlfence.Fence{Dialect: sqlfence.SQLite}}
	if err := s.fence.CreateTable(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE records (n INTEGER PRIMARY KEY, writer TEXT NOT NULL, token INTEGER NOT NULL)"); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// write appends batch in one transaction fenced with token: a stale token
// rolls it back and returns an error matching fence.ErrStale.
func (s *sink) write(ctx context.Context, node string, batch []int, token uint64) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit
	if err := s.fence.Check(ctx, tx, "ingest", token); err != nil {
		return err
	}
	for _, n := range batch {
		if _, err := tx.ExecContext(ctx, "INSERT INTO records (n, writer, token) VALUES (?, ?, ?)", n, node, int64(token)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// cursor is the position after the last record written.
func (s *sink) cursor(ctx context.Context) (int, error) {
	var n sql.NullInt64
	err := s.db.QueryRowContext(ctx, "SELECT MAX(n) FROM records").Scan(&n)
	return int(n.Int64), err
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
	dir, err := os.MkdirTemp("", "simba-ingest")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out, err := openSink(context.Background(), filepath.Join(dir, "sink.db"))
	if err != nil {
		return err
	}
	defer out.db.Close()
	paused := make(chan chan struct{}, 1) // a node that reads one sends itself to sleep
	terms := make(chan *simba.Term, 4)

	ingest := func(node string) func(context.Context, *simba.Term) error {
		return func(ctx context.Context, term *simba.Term) error {
			terms <- term
			say("%s leads ingest with token %d", node, term.Token())
			for term.Valid() {
				cursor, err := out.cursor(ctx)
				if err != nil {
					return err
				}
				batch := poll(cursor)
				select {
				case resume := <-paused:
					say("%s read records %d-%d, then froze (a long GC pause)", node, batch[0], batch[len(batch)-1])
					<-resume
					say("%s woke up and writes records %d-%d with token %d", node, batch[0], batch[len(batch)-1], term.Token())
				default:
				}
				if err := out.write(context.WithoutCancel(ctx), node, batch, term.Token()); err != nil {
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

	// Each term claims the sink before it reads the cursor: a write of an
	// earlier leader still in flight lands before the claim, or is refused.
	claim := simba.WithClaim(func(ctx context.Context, term *simba.Term) error {
		return out.fence.Claim(ctx, out.db, "ingest", term.Token())
	})

	east := server.Node("east")
	eastClient, err := simba.New(east, simba.WithTTL(ttl), simba.WithLogger(storylog.New(say, slog.LevelWarn)))
	if err != nil {
		return err
	}
	defer eastClient.Close()
	if _, err := eastClient.Election("ingest").RunWhileLeader(ingest("east"), claim); err != nil {
		return err
	}
	eastTerm := <-terms
	westClient, err := simba.New(server.Node("west"), simba.WithTTL(ttl), simba.WithLogger(storylog.New(say, slog.LevelWarn)))
	if err != nil {
		return err
	}
	defer westClient.Close()
	if _, err := westClient.Election("ingest").RunWhileLeader(ingest("west"), claim); err != nil {
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
	var count, last, batches int
	if err := out.db.QueryRow("SELECT COUNT(*), COALESCE(MAX(n), 0), COUNT(DISTINCT token || writer) FROM records").Scan(&count, &last, &batches); err != nil {
		return err
	}
	if count != last {
		return fmt.Errorf("%d records but the last is %d: the sink is corrupt", count, last)
	}
	highest, _, err := out.fence.Highest(context.Background(), out.db, "ingest")
	if err != nil {
		return err
	}
	say("the sink holds records 1-%d, each once and in order; the fence's highest token is %d", count, highest)
	return nil
}
