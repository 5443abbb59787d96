package stream_test

import (
	"context"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/stream"
)

// A handler that checkpoints right after a message that ends a transaction,
// and hands its partition off when told to drain.
func ExampleCoordinator() {
	_ = stream.HandlerFunc(func(ctx context.Context, term *simba.Term, msg stream.Message) error {
		// ... apply msg, fenced by term.Token() ...
		switch string(msg.Key) {
		case "commit":
			stream.CoordinatorFrom(ctx).RequestCommit()
		case "drain":
			stream.CoordinatorFrom(ctx).RequestHandOff()
		}
		return nil
	})
}
