package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/backend/mysql/mylease"
	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/mytest"
)

// TestMain checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncWriter lets the nodes print to one log.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestEveryNumberOnce runs three nodes on the test server, in a database
// of the test's own, stops one mid-way (its partitions are handed off)
// and checks that every partition's ledger is numbered 1, 2, 3, ... with
// no number twice and none skipped, with tokens that never go back, and
// that the partitions moved on after the stop.
func TestEveryNumberOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of real time")
	}
	dsn := mytest.DatabaseDSN(t) // simba's tables and the ledger

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := createTables(ctx, db); err != nil {
		t.Fatal(err)
	}

	log := &syncWriter{}
	defer func() { t.Log("\n" + log.b.String()) }()
	stops := map[string]context.CancelFunc{}
	done := map[string]<-chan error{}
	for _, n := range []string{"a", "b", "c"} {
		nctx, stop := context.WithCancel(ctx)
		stops[n] = stop
		done[n] = await.Returned(func() error {
			return run(nctx, config{dsn: dsn, node: n, prefix: "simba_", every: 20 * time.Millisecond}, log)
		})
	}
	defer func() { // a failure below still stops every node
		for n, stop := range stops {
			stop()
			await.Cleanup(t, done[n], time.Minute, "node %s to stop", n)
		}
	}()

	count := func(query string) (n int, err error) {
		err = db.QueryRowContext(ctx, query).Scan(&n)
		return n, err
	}
	// until waits until the query counts at least want.
	until := func(query string, want int, what string) {
		t.Helper()
		ch := await.Returned(func() error {
			for {
				if n, err := count(query); err != nil || n >= want {
					return err
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
		if err := await.For(t, ch, time.Minute, "%s", what); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	until("SELECT COUNT(*) FROM (SELECT node FROM ledger GROUP BY node HAVING COUNT(*) >= 10) n", 3, "every node to append 10 entries")
	until("SELECT COUNT(DISTINCT part) FROM ledger", partitions, "every partition to have entries")
	stops["b"]()
	if err := await.For(t, done["b"], time.Minute, "node b to stop"); err != nil {
		t.Fatalf("node b: %v", err)
	}
	delete(stops, "b")
	fmt.Fprintln(log, "test: node b stopped")
	// Every partition, b's former ones among them, moves on by a few
	// entries under a and c.
	at, err := positions(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	moved := await.Returned(func() error {
		for {
			now, err := positions(ctx, db)
			if err != nil {
				return err
			}
			behind := 0
			for p := range partitions {
				if now[p] < at[p]+5 {
					behind++
				}
			}
			if behind == 0 {
				return nil
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	if err := await.For(t, moved, time.Minute, "every partition to move on after node b stopped"); err != nil {
		t.Fatal(err)
	}
	// A late write of one of b's terms, as a paused node's would come:
	// refused, and nothing appended.
	var p int
	var token int64
	if err := db.QueryRowContext(ctx, "SELECT part, MAX(token) FROM ledger WHERE node = 'b' GROUP BY part ORDER BY part LIMIT 1").Scan(&p, &token); err != nil {
		t.Fatalf("reading a partition and token of node b's: %v", err)
	}
	pos, err := appendEntry(ctx, db, mylease.Fence{TablePrefix: "simba_"}, fmt.Sprintf("ledger.%d", p), uint64(token), p, "b-late")
	if !errors.Is(err, fence.ErrStale) {
		t.Errorf("a late write of node b's term %d of partition %d: got entry #%d, %v; want it refused as stale", token, p, pos, err)
	}
	fmt.Fprintf(log, "test: a late write of b's term %d of partition %d: %v\n", token, p, err)
	for n, stop := range stops {
		stop()
		if err := await.For(t, done[n], time.Minute, "node %s to stop", n); err != nil {
			t.Fatalf("node %s: %v", n, err)
		}
		delete(stops, n)
	}

	// Every partition's entries: 1, 2, 3, ... up to its position, each
	// once, with tokens that never go back.
	rows, err := db.QueryContext(ctx, "SELECT part, position, token FROM ledger ORDER BY part, position, token")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	next := map[int]int64{}
	lastToken := map[int]int64{}
	total := 0
	for rows.Next() {
		var p int
		var pos, token int64
		if err := rows.Scan(&p, &pos, &token); err != nil {
			t.Fatal(err)
		}
		total++
		switch {
		case pos == next[p]:
			t.Errorf("partition %d: entry #%d appended twice (the second with token %d)", p, pos, token)
		case pos != next[p]+1:
			t.Errorf("partition %d: entry #%d follows #%d: entries skipped", p, pos, next[p])
		}
		if token < lastToken[p] {
			t.Errorf("partition %d: entry #%d appended with token %d after an entry with token %d", p, pos, token, lastToken[p])
		}
		next[p], lastToken[p] = pos, max(lastToken[p], token)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	final, err := positions(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for p, pos := range final {
		if pos != next[p] {
			t.Errorf("partition %d: position %d, but the ledger's last entry is #%d", p, pos, next[p])
		}
	}
	var byB int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ledger WHERE node = 'b'").Scan(&byB); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries in %d partitions, %d of them by node b before it stopped", total, partitions, byB)
}

// positions reads every partition's position.
func positions(ctx context.Context, db *sql.DB) ([partitions]int64, error) {
	var out [partitions]int64
	rows, err := db.QueryContext(ctx, "SELECT part, position FROM ledger_position")
	if err != nil {
		return out, err
	}
	defer rows.Close()
	for rows.Next() {
		var p int
		var pos int64
		if err := rows.Scan(&p, &pos); err != nil {
			return out, err
		}
		if p < 0 || p >= partitions {
			return out, fmt.Errorf("ledger_position has partition %d", p)
		}
		out[p] = pos
	}
	return out, rows.Err()
}
