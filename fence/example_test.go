package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	clientv3 "go.etcd.io/etcd/client/v3"
	_ "modernc.org/sqlite"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/internal/etcdtest"
)

// A leader stores its position in a SQLite database, fenced with its term's
// token (term.Token() in a simba task). A deposed leader that resumes after
// a pause writes with its old token, and its transaction is rolled back.
func ExampleSQL_Check() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// BEGIN IMMEDIATE and a busy timeout: see SQL.Check.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	f := fence.SQL{Dialect: fence.SQLite}
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

// A leader's data lives in etcd: the guard goes into the leader's own
// transaction, next to its own compares.
func ExampleEtcd_Guard() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := etcdtest.New(dir) // an embedded etcd server, for the example
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(srv.Config())
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()

	f := fence.Etcd{}
	// save writes the cursor if the token is not stale and the schema
	// version is still 1.
	save := func(token uint64, cursor string) error {
		cmps, ops := f.Guard("ingest", token)
		resp, err := cli.Txn(ctx).
			If(append(cmps, clientv3.Compare(clientv3.Value("/app/schema"), "=", "1"))...).
			Then(append(ops, clientv3.OpPut("/app/cursor", cursor))...).
			Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			if err := f.Stale(ctx, cli, "ingest", token); err != nil {
				return err // a later term has written
			}
			return errors.New("the schema changed") // our own compare failed
		}
		return nil
	}

	if _, err := cli.Put(ctx, "/app/schema", "1"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(save(12, "a"))
	fmt.Println(save(13, "b"))
	fmt.Println(save(12, "c"))
	if _, err := cli.Put(ctx, "/app/schema", "2"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(save(13, "d"))
	resp, err := cli.Get(ctx, "/app/cursor")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("cursor: %s\n", resp.Kvs[0].Value)
	// Output:
	// <nil>
	// <nil>
	// simba/fence: stale token 12 for resource "ingest": token 13 was recorded
	// the schema changed
	// cursor: b
}
