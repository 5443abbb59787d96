package etcd_test

import (
	"context"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/etcdtest"
)

// exampleServer starts an etcd server of the example's own (a process, by
// internal/etcdtest), for the examples; a program passes its cluster's
// endpoints instead.
func exampleServer() (srv *etcdtest.Server, stop func(), err error) {
	dir, err := os.MkdirTemp("", "simba-etcd-example-")
	if err != nil {
		return nil, nil, err
	}
	srv, err = etcdtest.New(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return srv, func() { srv.Close(); os.RemoveAll(dir) }, nil
}

// A leader task on etcd: the election's term carries a fencing token, the
// create revision of the election's key.
func Example() {
	srv, stop, err := exampleServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	b, err := etcd.New(srv.Endpoints()) // e.g. []string{"etcd-1:2379", "etcd-2:2379"}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	client, err := simba.New(b, simba.WithTTL(2*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	tokens := make(chan uint64)
	task, err := client.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		tokens <- term.Token()
		<-ctx.Done() // work until the term ends
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	token := <-tokens
	fmt.Println("leading ingest, token above zero:", token > 0)

	task.Stop()
	<-task.Done() // hand-off: the task ends, then the key is deleted
	resp, err := b.Client().Get(context.Background(), "/simba/lease/ingest/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("lease keys after the hand-off:", resp.Count)
	// Output:
	// leading ingest, token above zero: true
	// lease keys after the hand-off: 0
}

// The backend on a client configured by the caller (TLS, authentication),
// used directly: etcd grants TTLs in whole seconds, and the token is the
// lease key's create revision.
func ExampleNewFromClient() {
	srv, stop, err := exampleServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close() // after the backend: it does not close a client it did not create

	b, err := etcd.NewFromClient(cli, etcd.WithPrefix("/jobs/"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	ctx := context.Background()
	s, err := b.Open(ctx, backend.SessionOptions{TTL: 1500 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	fmt.Println("requested 1.5s, granted", s.TTL())

	l, err := s.Acquire(ctx, "report")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := cli.Get(ctx, "/jobs/lease/report/"+s.ID())
	if err != nil {
		fmt.Println(err)
		return
	}
	kv := resp.Kvs[0]
	fmt.Println("value is the session ID:", string(kv.Value) == s.ID())
	fmt.Println("token is the create revision:", l.Token() == uint64(kv.CreateRevision))
	if err := l.Release(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("a second release:", l.Release(ctx))
	// Output:
	// requested 1.5s, granted 2s
	// value is the session ID: true
	// token is the create revision: true
	// a second release: simba/etcd: release "report" (token 3): simba/backend: lease not held
}
