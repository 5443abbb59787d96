package redisfence_test

import (
	"context"
	"errors"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/fence/redisfence"
)

// A leader stores its cursor in Redis, fenced with its term's token
// (term.Token() in a simba task). The example needs a Redis server, so it
// is compiled but not run; the tests run the same on a real server.
func ExampleFence_Set() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()

	f := redisfence.Fence{Client: rdb} // token keys under "simba:fence:"
	var token uint64 = 7               // term.Token()
	err := f.Set(ctx, "ingest", token, "ingest:cursor", "1200", 0)
	if errors.Is(err, fence.ErrStale) {
		return // a later term has written: this term is over
	}
	if err != nil {
		log.Fatal(err)
	}
}
