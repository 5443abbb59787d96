package stream_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/stream"
)

// benchSource serves n messages of partition 0 in batches of benchBatch
// from a few rotating buffers (no allocation per message), after go is
// closed.
type benchSource struct {
	n    int64
	bufs [4][]stream.Message
	next int
	gate chan struct{}
}

const benchBatch = 256

func newBenchSource(n int) *benchSource {
	s := &benchSource{n: int64(n), gate: make(chan struct{})}
	for i := range s.bufs {
		s.bufs[i] = make([]stream.Message, benchBatch)
	}
	return s
}

func (s *benchSource) Poll(ctx context.Context, _ int, from int64) ([]stream.Message, error) {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if from >= s.n {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	buf := s.bufs[s.next%len(s.bufs)][:0]
	s.next++
	for off := from; off < min(from+benchBatch, s.n); off++ {
		buf = append(buf, stream.Message{Offset: off})
	}
	return buf, nil
}

// counter is the handler: it counts, and signals the last message.
type counter struct {
	n, want int64
	done    chan struct{}
}

func (c *counter) Process(ctx context.Context, term *simba.Term, msg stream.Message) error {
	if atomic.AddInt64(&c.n, 1) == c.want {
		close(c.done)
	}
	return nil
}

// benchClient starts a client on the memory backend, without status
// records.
func benchClient(b *testing.B) (*memory.Backend, *simba.Client) {
	b.Helper()
	srv := memory.New()
	c, err := simba.New(srv.Node("bench"), simba.WithTTL(10*time.Second), simba.WithStatus(false))
	if err != nil {
		b.Fatal(err)
	}
	return srv, c
}

// BenchmarkLoop measures the cost per message of the stream's event loop
// (one op is one message) against a hand-written loop that polls the same
// source and calls the same handler inline, in the same term.
func BenchmarkLoop(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []stream.Option
	}{
		{"stream/concurrency=1", []stream.Option{stream.WithMaxConcurrency(1)}},
		{"stream/concurrency=16", []stream.Option{stream.WithMaxConcurrency(16)}},
		{"stream/concurrency=1/timeout", []stream.Option{stream.WithMaxConcurrency(1), stream.WithCallTimeout(time.Minute)}},
		{"stream/concurrency=16/timeout", []stream.Option{stream.WithMaxConcurrency(16), stream.WithCallTimeout(time.Minute)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv, c := benchClient(b)
			defer srv.Close()
			defer c.Close()
			src := newBenchSource(b.N)
			h := &counter{want: int64(b.N), done: make(chan struct{})}
			polled := make(chan struct{})
			var once atomic.Bool
			watch := stream.SourceFunc(func(ctx context.Context, p int, from int64) ([]stream.Message, error) {
				if once.CompareAndSwap(false, true) {
					close(polled)
				}
				return src.Poll(ctx, p, from)
			})
			opts := append([]stream.Option{stream.WithCheckpointStore(nopStore{})}, bc.opts...)
			task, err := stream.Start(c.Group("bench", 1), watch, func(int) stream.Handler { return h }, opts...)
			if err != nil {
				b.Fatal(err)
			}
			<-polled
			b.ReportAllocs()
			b.ResetTimer()
			close(src.gate)
			<-h.done
			b.StopTimer()
			task.Close()
		})
	}
	b.Run("handwritten", func(b *testing.B) {
		srv, c := benchClient(b)
		defer srv.Close()
		defer c.Close()
		src := newBenchSource(b.N)
		h := &counter{want: int64(b.N), done: make(chan struct{})}
		held := make(chan struct{})
		task, err := c.Group("bench", 1).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
			close(held)
			for from := int64(0); from < int64(b.N); {
				msgs, err := src.Poll(ctx, p, from)
				if err != nil {
					return err
				}
				for _, m := range msgs {
					if err := h.Process(ctx, term, m); err != nil {
						return err
					}
				}
				from = msgs[len(msgs)-1].Offset + 1
			}
			<-ctx.Done()
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		<-held
		b.ReportAllocs()
		b.ResetTimer()
		close(src.gate)
		<-h.done
		b.StopTimer()
		task.Close()
	})
}

// nopStore keeps no checkpoints: the benchmark measures the loop.
type nopStore struct{}

func (nopStore) Load(context.Context, *simba.Term, int) (int64, bool, error) { return 0, false, nil }
func (nopStore) Save(context.Context, *simba.Term, int, int64) error         { return nil }
