package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/pgtest"
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

// TestEveryRowOnce runs three nodes, adds rows while they relay, stops one
// node mid-way and checks that every row reached the sink exactly once, in
// order within its partition, with tokens that never go back.
func TestEveryRowOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of real time")
	}
	app := pgtest.Schema(t) // the outbox and sink, through the DSN's search_path
	pgtest.Exec(t, "CREATE SCHEMA "+pgx.Identifier{app}.Sanitize())
	dsn := pgtest.DSN(t) + "&search_path=" + app
	if !strings.Contains(pgtest.DSN(t), "?") {
		dsn = pgtest.DSN(t) + "?search_path=" + app
	}
	simbaSchema := pgtest.Schema(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := createTables(ctx, pool); err != nil {
		t.Fatal(err)
	}

	log := &syncWriter{}
	defer func() { t.Log("\n" + log.b.String()) }()
	stops := map[string]context.CancelFunc{}
	done := map[string]<-chan error{}
	for _, n := range []string{"a", "b", "c"} {
		nctx, stop := context.WithCancel(ctx)
		stops[n] = stop
		done[n] = await.Returned(func() error { return run(nctx, config{dsn: dsn, node: n, schema: simbaSchema}, log) })
	}
	defer func() { // a failure below still stops every node
		for n, stop := range stops {
			stop()
			await.Cleanup(t, done[n], time.Minute, "node %s to stop", n)
		}
	}()

	count := func(query string) (n int, err error) {
		err = pool.QueryRow(ctx, query).Scan(&n)
		return n, err
	}
	// feed adds rows in batches of 20 until the query counts at least want.
	inserted := 0
	feed := func(query string, want int, what string) {
		t.Helper()
		ch := await.Returned(func() error {
			for {
				if n, err := count(query); err != nil || n >= want {
					return err
				}
				if err := insertRows(ctx, pool, 20); err != nil {
					return err
				}
				inserted += 20
				time.Sleep(50 * time.Millisecond)
			}
		})
		if err := await.For(t, ch, time.Minute, "%s", what); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	feed("SELECT count(DISTINCT node) FROM sink", 3, "every node to relay some rows")
	if err := insertRows(ctx, pool, 300); err != nil { // b stops with rows of its own pending
		t.Fatal(err)
	}
	inserted += 300
	stops["b"]()
	if err := await.For(t, done["b"], time.Minute, "node b to stop"); err != nil {
		t.Fatalf("node b: %v", err)
	}
	delete(stops, "b")
	fmt.Fprintln(log, "test: node b stopped")
	for range 10 { // and a few batches more for a and c alone
		if err := insertRows(ctx, pool, 20); err != nil {
			t.Fatal(err)
		}
		inserted += 20
	}
	ch := await.Returned(func() error {
		for {
			if n, err := count("SELECT count(*) FROM outbox WHERE NOT sent"); err != nil || n == 0 {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	if err := await.For(t, ch, time.Minute, "every row to be sent"); err != nil {
		t.Fatalf("counting the unsent rows: %v", err)
	}

	// Every row once; per partition in id order, with tokens that never go back.
	rows, err := pool.Query(ctx, `
		SELECT o.id, o.partition, count(s.outbox_id), coalesce(max(s.token), 0)
		FROM outbox o LEFT JOIN sink s ON s.outbox_id = o.id
		GROUP BY o.id ORDER BY o.id`)
	if err != nil {
		t.Fatal(err)
	}
	lastToken := map[int]int64{}
	total := 0
	for rows.Next() {
		var id, token int64
		var p, copies int
		if err := rows.Scan(&id, &p, &copies, &token); err != nil {
			t.Fatal(err)
		}
		total++
		if copies != 1 {
			t.Errorf("outbox row %d (partition %d) is in the sink %d times, want once", id, p, copies)
		}
		if token < lastToken[p] {
			t.Errorf("outbox row %d of partition %d was sent with token %d after a later row with token %d", id, p, token, lastToken[p])
		}
		lastToken[p] = max(lastToken[p], token)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if total != inserted {
		t.Errorf("outbox has %d rows, want %d", total, inserted)
	}
	var byB int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM sink WHERE node = 'b'").Scan(&byB); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows sent, %d of them by node b before it stopped", total, byB)
}
