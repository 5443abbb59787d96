package stream

import "context"

// Message is one message of a partition.
type Message struct {
	// Partition is the partition the message belongs to; the loop sets it.
	Partition int
	// Offset is the message's position in its partition. Offsets are
	// ordered: they strictly increase along the partition, with gaps
	// allowed, and lie in [0, math.MaxInt64).
	Offset int64
	// Key and Value are the message's contents, opaque to the loop.
	Key, Value []byte
}

// Source is where the messages of every partition come from: a log
// (Kafka-like), a table read by position, a queue that numbers its entries.
// Offsets are ordered int64 positions, so that "every message below this
// offset has been processed" is well defined: that is the checkpoint.
//
// A Source is used by every partition of a [Task] at once, from one goroutine
// per partition; it must be safe for concurrent use.
type Source interface {
	// Poll returns the next messages of partition at offsets at or above
	// from, in strictly increasing offset order. It may block until some
	// are available, and must return when ctx ends (its error is then
	// ignored). It may return fewer messages than are available, or none:
	// after an empty batch the loop polls again after [WithPollInterval].
	//
	// The returned slice, and the Key and Value of its messages, belong to
	// the loop from then on: the source must not change or reuse them (the
	// loop prefetches one batch while Process calls still read the last).
	//
	// An error fails the partition on this node (see [PartitionError]): a
	// source that wants to ride out transient errors retries inside Poll.
	Poll(ctx context.Context, partition int, from int64) ([]Message, error)
}

// SourceFunc adapts a function to [Source].
type SourceFunc func(ctx context.Context, partition int, from int64) ([]Message, error)

// Poll calls f.
func (f SourceFunc) Poll(ctx context.Context, partition int, from int64) ([]Message, error) {
	return f(ctx, partition, from)
}
