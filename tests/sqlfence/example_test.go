package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/fence/sqlfence"
)

// A leader stores its position in a SQLite database, fenced with its term's
// token (term.Token() in a simba task). A deposed leader that resumes after
// a pause writes with its old token, and its transaction is rolled back.
func ExampleFence_Check() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// BEGIN IMMEDIATE and a busy timeout: see Fence.Check.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	f := sqlfence.Fence{Dialect: sqlfence.SQLite}
	if err := f.CreateTable(ctx, db); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE cursor (name TEXT PRIMARY KEY, position INTEGER NOT NULL)"); err != nil {
		log.Fatal(err)
	}

	// save stores the position of the "ingest" task in a transaction
	// fenced with token.
	save := func(token uint64, position int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // a no-op after Commit
		if err := f.Check(ctx, tx, "ingest", token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx,
			"INSERT INTO cursor (name, position) VALUES ('ingest', ?) ON CONFLICT (name) DO UPDATE SET position = excluded.position",
			position); err != nil {
			return err
		}
		return tx.Commit()
	}

	fmt.Println(save(7, 100)) // the leader of the term with token 7
	fmt.Println(save(8, 200)) // the next leader
	err = save(7, 150)        // the first leader, resumed after a pause
	fmt.Println(errors.Is(err, fence.ErrStale), err)

	var position int
	if err := db.QueryRowContext(ctx, "SELECT position FROM cursor WHERE name = 'ingest'").Scan(&position); err != nil {
		log.Fatal(err)
	}
	fmt.Println("position:", position)
	// Output:
	// <nil>
	// <nil>
	// true simba/fence: stale token 7 for resource "ingest": token 8 was recorded
	// position: 200
}
