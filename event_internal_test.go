package simba

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/simba-go/simba/internal/await"
)

// linesWith returns the lines of b that contain s.
func linesWith(b *await.Buffer, s string) []string {
	var out []string
	for line := range strings.Lines(b.String()) {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// Past maxQueuedEvents undelivered events the oldest are dropped: every
// drop is counted, the first is logged at Warn, later ones at Debug.
func TestEventDropsAreCountedAndTheFirstLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs await.Buffer
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		var dropped atomic.Int64
		gate := make(chan struct{})
		var delivered atomic.Int64
		blockAt := []int64{1, maxQueuedEvents + 2} // the handler blocks on these events
		h := func(Event) {
			n := delivered.Add(1)
			for _, at := range blockAt {
				if n == at {
					<-gate
				}
			}
		}
		b := newEventBus(log, []func(Event){h}, func(n int) { dropped.Add(int64(n)) })
		round := func(extra int) {
			b.publish(Misfired{}) // the handler blocks on this one
			synctest.Wait()
			for range maxQueuedEvents + extra {
				b.publish(Misfired{})
			}
			gate <- struct{}{}
			synctest.Wait()
		}
		round(10)
		if got := dropped.Load(); got != 10 {
			t.Fatalf("first round: %d dropped counted, want 10", got)
		}
		round(5)
		if got := dropped.Load(); got != 15 {
			t.Fatalf("second round: %d dropped counted in all, want 15", got)
		}
		if got, want := delivered.Load(), int64(2*(1+maxQueuedEvents)); got != want {
			t.Errorf("%d events delivered, want %d (the queue kept full each round)", got, want)
		}
		warn, debug := linesWith(&logs, "level=WARN"), linesWith(&logs, "level=DEBUG")
		if len(warn) != 1 || !strings.Contains(warn[0], "dropped=10") || !strings.Contains(warn[0], "simba.events.dropped") {
			t.Errorf("Warn lines %q, want one for the first drop (dropped=10) naming the metric", warn)
		}
		if len(debug) != 1 || !strings.Contains(debug[0], "dropped=5") {
			t.Errorf("Debug lines %q, want one for the later drop (dropped=5)", debug)
		}
		b.close(handlerWait)
	})
}

// The drops are the counter simba.events.dropped.
func TestEventDropsMetric(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	m, err := newMetrics(mp, func() float64 { return 1 })
	if err != nil {
		t.Fatal(err)
	}
	m.eventsDropped(3)
	m.eventsDropped(4)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != metricEventsDropped {
				continue
			}
			sum, ok := mt.Data.(metricdata.Sum[int64])
			if !ok || len(sum.DataPoints) != 1 || sum.DataPoints[0].Value != 7 || !sum.IsMonotonic {
				t.Fatalf("%s = %+v, want a monotonic sum of 7", mt.Name, mt.Data)
			}
			return
		}
	}
	t.Fatalf("no instrument %s among %+v", metricEventsDropped, rm.ScopeMetrics)
}
