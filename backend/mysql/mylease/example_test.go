package mylease_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/mysql"
	"github.com/simba-go/simba/backend/mysql/mylease"
	"github.com/simba-go/simba/fence"
)

// A leader elected on MySQL moves a cursor in the same database, each step
// in a transaction fenced by its term's lease row: a deposed leader's step
// is refused, whether or not a new leader has written yet. (It needs a
// server, so it is compiled and not run.)
func Example() {
	const dsn = "app:secret@tcp(db.example:3306)/app?tls=true"
	db, err := sql.Open("mysql", dsn) // the application's pool
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	b, err := mysql.New(dsn) // the backend's, of its own
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	client, err := simba.New(b)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	f := mylease.Fence{TablePrefix: b.TablePrefix()}
	step := func(ctx context.Context, term *simba.Term) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // a no-op after Commit
		if err := f.Check(ctx, tx, term.Name(), term.Token()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE cursor SET position = position + 1 WHERE name = 'ingest'"); err != nil {
			return err
		}
		return tx.Commit()
	}
	task, err := client.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		for ctx.Err() == nil {
			err := step(ctx, term)
			if errors.Is(err, fence.ErrStale) {
				return err // the term is over: stop, do not retry
			}
			if err != nil {
				log.Print(err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	defer task.Close()
	// ... run until shutdown.
}

// The check in a transaction of the caller's, with the term's lease name
// and token: first in the transaction, then the writes, then the commit.
func ExampleFence_Check() {
	save := func(ctx context.Context, db *sql.DB, f mylease.Fence, term *simba.Term, position int64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // a no-op after Commit; at once after a refused check, which locked rows too
		if err := f.Check(ctx, tx, term.Name(), term.Token()); err != nil {
			return err // errors.Is(err, fence.ErrStale): the term no longer holds its lease
		}
		if _, err := tx.ExecContext(ctx, "UPDATE cursor SET position = ? WHERE name = 'ingest'", position); err != nil {
			return err
		}
		return tx.Commit()
	}
	_ = save
}
