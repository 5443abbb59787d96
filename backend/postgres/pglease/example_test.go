package pglease_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/backend/postgres/pglease"
	"github.com/simba-go/simba/fence"
)

// A leader elected on PostgreSQL moves a cursor in the same database, each
// step in a transaction fenced by its term's lease row: a deposed leader's
// step is refused, whether or not a new leader has written yet. (It needs
// a server, so it is compiled and not run.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.example:5432/app?sslmode=verify-full")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	b, err := postgres.NewFromPool(pool) // the application's pool; Close leaves it open
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	client, err := simba.New(b)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	f := pglease.Fence{Schema: b.Schema()}
	task, err := client.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		for ctx.Err() == nil {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := f.CheckPgx(ctx, tx, term.Name(), term.Token()); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "UPDATE cursor SET position = position + 1 WHERE name = 'ingest'")
				return err
			})
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

// The same check in a database/sql transaction (the driver of
// github.com/jackc/pgx/v5/stdlib, say), with the term's lease name and
// token.
func ExampleFence_Check() {
	save := func(ctx context.Context, db *sql.DB, f pglease.Fence, term *simba.Term, position int64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // a no-op after Commit
		if err := f.Check(ctx, tx, term.Name(), term.Token()); err != nil {
			return err // errors.Is(err, fence.ErrStale): the term no longer holds its lease
		}
		if _, err := tx.ExecContext(ctx, "UPDATE cursor SET position = $1 WHERE name = 'ingest'", position); err != nil {
			return err
		}
		return tx.Commit()
	}
	_ = save
}
