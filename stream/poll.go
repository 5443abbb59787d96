package stream

import (
	"context"
	"fmt"
	"math"

	"github.com/simba-go/simba/backend/kit/backoff"
)

// batch is what the poller hands over: messages or the error that ended it.
type batch struct {
	msgs []Message
	err  error
}

// poll fetches batches ahead of the loop until ctx ends or the source
// fails.
func (l *loop) poll(ctx context.Context, from int64) {
	for {
		msgs, err := l.t.src.Poll(ctx, l.partition, from)
		if ctx.Err() != nil {
			return
		}
		if err == nil && len(msgs) == 0 {
			if !backoff.Sleep(ctx, l.o.pollInterval) {
				return
			}
			continue
		}
		if err == nil {
			err = l.order(msgs, from)
		}
		if err == nil {
			from = msgs[len(msgs)-1].Offset + 1
		}
		select {
		case l.polled <- batch{msgs: msgs, err: err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// order checks a batch against the offset contract and sets the messages'
// partition.
func (l *loop) order(msgs []Message, from int64) error {
	prev := from - 1
	for i := range msgs {
		off := msgs[i].Offset
		if off <= prev || off == math.MaxInt64 {
			return fmt.Errorf("%w: offset %d after %d (polled from %d)", ErrOffsetOrder, off, prev, from)
		}
		prev = off
		msgs[i].Partition = l.partition
	}
	return nil
}
