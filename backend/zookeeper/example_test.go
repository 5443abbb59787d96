package zookeeper_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/zookeeper"
)

// A leader task on a ZooKeeper ensemble: the term's fencing token is the
// czxid of the election's ephemeral znode, under the backend's root. (This
// example needs a server, so it is compiled but not run; the package's tests
// run the same calls on a real one.)
func Example() {
	b, err := zookeeper.New([]string{"zk-1:2181", "zk-2:2181", "zk-3:2181"},
		zookeeper.WithRoot("/myapp/simba"))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close() // after the client
	// The session timeout is negotiated: the server clamps the TTL between
	// its minSessionTimeout and maxSessionTimeout.
	client, err := simba.New(b, simba.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	task, err := client.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		log.Printf("leading %s with token %d", term.Name(), term.Token())
		<-ctx.Done() // work until the term ends, passing term.Token() with every write
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-ctx.Done() // until Ctrl-C
	task.Stop()
	<-task.Done() // hand-off: the task ends, then the znode is deleted
}
