package stream_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/stream"
)

// logRecords keeps the messages logged at Warn and above.
type logRecords struct {
	mu   sync.Mutex
	warn []string
	errs []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case r.Level >= slog.LevelError:
		l.errs = append(l.errs, r.Message)
	case r.Level >= slog.LevelWarn:
		l.warn = append(l.warn, r.Message)
	}
	return nil
}

func (l *logRecords) get() (warn, errs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.warn...), append([]string(nil), l.errs...)
}

// runsCounted returns the count of simba.run.completed for the group with
// the result.
func runsCounted(t *testing.T, r *sdkmetric.ManualReader, result string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collecting metrics: %v", err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			sum, ok := md.Data.(metricdata.Sum[int64])
			if md.Name != "simba.run.completed" || !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				if p.Attributes.Equals(ptr(attribute.NewSet(attribute.String("simba.group", group), attribute.String("simba.result", result)))) {
					n += p.Value
				}
			}
		}
	}
	return n
}

func ptr[T any](v T) *T { return &v }

// TestPartitionFailureIsVisible: a partition that fails (here a Process
// error) yields its lease and is published as a failed run, not a
// succeeded one: WorkCompleted with result Failed and the PartitionError,
// a warning on the client's logger (not an error: the partition is taken
// over), the run counted with simba.result "failed", and a failed run in
// the partition's status record, which `simba status` and the console read.
// A plain yield of a run function stays a success (see the root package's
// tests).
func TestPartitionFailureIsVisible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		logs := &logRecords{}
		var mu sync.Mutex
		var done []simba.WorkCompleted
		c, err := simba.New(b.Node("a"), simba.WithTTL(testTTL), simba.WithMemberID("a"),
			simba.WithLogger(slog.New(logs)), simba.WithMeterProvider(mp),
			simba.WithEventHandler(func(e simba.Event) {
				if w, ok := e.(simba.WorkCompleted); ok {
					mu.Lock()
					done = append(done, w)
					mu.Unlock()
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		boom := errors.New("boom")
		var fail once
		var processed sync.Map
		h := stream.HandlerFunc(func(_ context.Context, _ *simba.Term, msg stream.Message) error {
			if msg.Offset == 3 && fail.first(nil) {
				return boom
			}
			processed.Store(msg.Offset, true)
			return nil
		})
		task, err := stream.Start(c.Group(group, 1), newNumbered(10, 5), func(int) stream.Handler { return h },
			stream.WithCommitInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		defer task.Close()
		waitFor(t, time.Minute, "every message processed after the failure", func() bool {
			_, ok := processed.Load(int64(9))
			return ok
		})

		mu.Lock()
		var failed []simba.WorkCompleted
		for _, w := range done {
			if w.Result != simba.ResultSucceeded {
				failed = append(failed, w)
			}
		}
		mu.Unlock()
		var pe *stream.PartitionError
		if len(failed) != 1 || failed[0].Result != simba.ResultFailed || !errors.As(failed[0].Err, &pe) ||
			pe.Offset != 3 || !errors.Is(pe, boom) || failed[0].Partition != 0 {
			t.Errorf("runs not succeeded: %+v, want one Failed with the partition error at offset 3", failed)
		}
		warn, errs := logs.get()
		if !contains(warn, "run failed: giving the lease up") || contains(errs, "run failed") {
			t.Errorf("client's log: warnings %q, errors %q; want the failed run as a warning", warn, errs)
		}
		if n := runsCounted(t, reader, "failed"); n != 1 {
			t.Errorf("%d runs counted as failed, want 1", n)
		}

		a, err := admin.Open(t.Context(), b.Node("admin"))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		var st admin.Status
		waitFor(t, time.Minute, "the failed run in the status record", func() bool {
			st, err = a.Status(t.Context(), group+".0")
			return err == nil && st.Failed == 1
		})
		runs, err := a.History(t.Context(), group+".0")
		if err != nil {
			t.Fatal(err)
		}
		var results []string
		for _, r := range runs {
			results = append(results, r.Result)
		}
		if len(runs) == 0 || runs[0].Result != simba.ResultFailed.String() {
			t.Errorf("history results %q, want the first run failed", results)
		}
	})
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
