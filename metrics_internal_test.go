package simba

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func sdkMetrics(tb testing.TB) *metrics {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tb.Cleanup(func() { mp.Shutdown(context.Background()) })
	m, err := newMetrics(mp, func() float64 { return 1 })
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// BenchmarkMetricsPerRun is what one run adds to its term's work: its result
// counted and its duration recorded, with the OpenTelemetry SDK.
//
//	go test -run '^$' -bench Metrics -benchmem .
func BenchmarkMetricsPerRun(b *testing.B) {
	m := sdkMetrics(b)
	ref := TermRef{Election: "ingest", Partition: -1, Token: 7}
	m.ran(ref, ResultSucceeded, time.Millisecond) // builds the attribute sets once
	b.ReportAllocs()
	for b.Loop() {
		m.ran(ref, ResultSucceeded, time.Millisecond)
	}
}

func BenchmarkMetricsPerRenewal(b *testing.B) {
	m := sdkMetrics(b)
	b.ReportAllocs()
	for b.Loop() {
		m.renewed(time.Millisecond, nil)
	}
}

func TestMetricsDoNotAllocatePerRenewalOrRun(t *testing.T) {
	m := sdkMetrics(t)
	ref := TermRef{Election: "ingest", Partition: -1, Token: 7}
	m.ran(ref, ResultSucceeded, time.Millisecond)
	if a := testing.AllocsPerRun(100, func() { m.renewed(time.Millisecond, nil) }); a != 0 {
		t.Errorf("a renewal allocates %v times", a)
	}
	if a := testing.AllocsPerRun(100, func() { m.ran(ref, ResultSucceeded, time.Millisecond) }); a != 0 {
		t.Errorf("a run allocates %v times", a)
	}
}
