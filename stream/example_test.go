package stream_test

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/stream"
)

// A stream of two partitions on one node: each partition's messages are
// processed in order, and the final checkpoints are written when the task
// stops.
func Example() {
	server := memory.New()
	defer server.Close()
	client, err := simba.New(server.Node("a"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	// Three messages per partition; past the end, Poll waits.
	logs := [][]string{{"a0", "a1", "a2"}, {"b0", "b1", "b2"}}
	source := stream.SourceFunc(func(ctx context.Context, partition int, from int64) ([]stream.Message, error) {
		var out []stream.Message
		for off := from; off < int64(len(logs[partition])); off++ {
			out = append(out, stream.Message{Offset: off, Value: []byte(logs[partition][off])})
		}
		if len(out) == 0 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return out, nil
	})

	var mu sync.Mutex
	seen := map[int][]string{}
	processed := make(chan struct{}, 6)
	task, err := stream.Start(client.Group("orders", 2), source, func(partition int) stream.Handler {
		return stream.HandlerFunc(func(ctx context.Context, term *simba.Term, msg stream.Message) error {
			// Write msg to a sink with term.Token() here.
			mu.Lock()
			seen[partition] = append(seen[partition], string(msg.Value))
			mu.Unlock()
			processed <- struct{}{}
			return nil
		})
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 6 {
		<-processed
	}
	task.Close() // every partition hands off with a final checkpoint

	for p := range 2 {
		fmt.Printf("partition %d: %s\n", p, strings.Join(seen[p], " "))
	}
	// Output:
	// partition 0: a0 a1 a2
	// partition 1: b0 b1 b2
}

// OnError turns a failure into a skip: the message counts as processed, and
// the partition goes on.
func ExampleOnError() {
	deadLetters := stream.OnError(func(ctx context.Context, term *simba.Term, msg stream.Message, err error) error {
		fmt.Printf("offset %d to the dead-letter queue: %v\n", msg.Offset, err)
		return nil
	})
	h := stream.Chain(stream.HandlerFunc(func(ctx context.Context, term *simba.Term, msg stream.Message) error {
		if len(msg.Value) == 0 {
			return fmt.Errorf("empty message")
		}
		return nil
	}), deadLetters)
	fmt.Println(h.Process(context.Background(), nil, stream.Message{Offset: 7}))
	// Output:
	// offset 7 to the dead-letter queue: empty message
	// <nil>
}
