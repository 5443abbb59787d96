package etcdfence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/simba-go/simba/fence/etcdfence"
	"github.com/simba-go/simba/internal/etcdtest"
)

// A leader's data lives in etcd: the guard goes into the leader's own
// transaction, next to its own compares.
func ExampleFence_Guard() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := etcdtest.New(dir) // an etcd server of the example's own (a process)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()

	f := etcdfence.Fence{}
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
