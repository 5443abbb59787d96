package simba_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/await"
)

// meterReader collects the client's instruments on demand.
type meterReader struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
}

func newMeterReader(t *testing.T) (*meterReader, simba.Option) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return &meterReader{t: t, reader: r}, simba.WithMeterProvider(mp)
}

// value returns the sum of a counter or up-down counter, the count of a
// histogram, or the value of a gauge, for the points whose attributes include
// attrs.
func (m *meterReader) value(name string, attrs ...string) float64 {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(m.t, m.reader.Collect(context.Background(), &rm))
	var total float64
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if md.Name != name {
				continue
			}
			has := func(get func(string) (string, bool)) bool {
				for i := 0; i+1 < len(attrs); i += 2 {
					if v, ok := get(attrs[i]); !ok || v != attrs[i+1] {
						return false
					}
				}
				return true
			}
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if has(func(k string) (string, bool) { v, ok := p.Attributes.Value(attrKey(k)); return v.AsString(), ok }) {
						total += float64(p.Value)
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if has(func(k string) (string, bool) { v, ok := p.Attributes.Value(attrKey(k)); return v.AsString(), ok }) {
						total += float64(p.Count)
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					total += p.Value
				}
			default:
				m.t.Fatalf("%s: unexpected data %T", name, md.Data)
			}
		}
	}
	return total
}

func TestMetricsFollowTheEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		m, opt := newMeterReader(t)
		a, _ := node(t, b, "a", h, opt)
		fail := make(chan struct{})
		task, err := a.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
			select {
			case <-fail:
				return errors.New("sink down")
			case <-ctx.Done():
				return nil
			}
		})
		require.NoError(t, err)
		synctest.Wait()
		e := []string{"simba.election", "ingest"}
		assert.Equal(t, 1.0, m.value("simba.election.leader", e...))
		assert.Equal(t, 1.0, m.value("simba.term.started", e...))
		assert.InDelta(t, 2.7, m.value("simba.session.deadline.headroom"), 0.001, "TTL 3s minus the 300ms margin")

		time.Sleep(2500 * time.Millisecond)
		assert.Equal(t, 2.0, m.value("simba.session.renewal.duration"), "renewals at 1s and 2s")
		assert.InDelta(t, 2.2, m.value("simba.session.deadline.headroom"), 0.001)

		close(fail)
		synctest.Wait()
		assert.Equal(t, 1.0, m.value("simba.run.completed", append(e, "simba.result", "failed")...))
		assert.Equal(t, 1.0, m.value("simba.run.duration", append(e, "simba.result", "failed")...))
		assert.Equal(t, 1.0, m.value("simba.election.leader", e...), "a failed run keeps the term")

		task.Stop()
		await.For(t, task.Done(), testTTL, "the task's Stop did not complete within the TTL")
		assert.Equal(t, 0.0, m.value("simba.election.leader", e...))
		assert.Equal(t, 1.0, m.value("simba.term.revoked", append(e, "simba.reason", "stopped")...))
		assert.Equal(t, 1.0, m.value("simba.handoff.duration", e...))

		// A renewal that fails, then a session lost at the deadline.
		_, err = a.Election("ingest").RunWhileLeader(holdUntilRevoked("a", h))
		require.NoError(t, err)
		synctest.Wait()
		n := b.Node("a")
		n.Partition()
		time.Sleep(testTTL)
		assert.GreaterOrEqual(t, m.value("simba.session.renewal.failures"), 1.0)
		assert.Equal(t, 1.0, m.value("simba.session.lost", "simba.reason", "deadline"))
		assert.Equal(t, 1.0, m.value("simba.term.revoked", append(e, "simba.reason", "deadline")...))
		assert.Equal(t, 0.0, m.value("simba.session.deadline.headroom"))
		n.Heal()
		closeAll(t, a)
	})
}

func TestMetricsOfGroupsAndSchedules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		h := newHistory()
		m, opt := newMeterReader(t)
		c, _ := node(t, b, "a", h, opt)
		_, err := c.Group(billing, 4).RunWhileLeader(func(ctx context.Context, term *simba.Term, p int) error {
			<-ctx.Done()
			return nil
		})
		require.NoError(t, err)
		first := true
		_, err = c.Election("report").Schedule(simba.FixedRate(time.Second), func(context.Context, *simba.Term) error {
			if first {
				first = false
				time.Sleep(3500 * time.Millisecond) // misses the starts at 1s, 2s and 3s
			}
			return nil
		})
		require.NoError(t, err)
		time.Sleep(5 * time.Second)
		assert.Equal(t, 4.0, m.value("simba.group.partitions.held", "simba.group", billing))
		assert.Equal(t, 3.0, m.value("simba.schedule.missed", "simba.election", "report"))
		closeAll(t, c)
		assert.Equal(t, 0.0, m.value("simba.group.partitions.held", "simba.group", billing))
	})
}

func attrKey(k string) attribute.Key { return attribute.Key(k) }
