package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
)

func TestDurScale(t *testing.T) {
	for _, tc := range []struct {
		name   string
		durs   []int64
		log    bool
		lo, hi int64
		ticks  []int64
	}{
		{name: "alike", durs: []int64{120, 150, 180, 900}, ticks: []int64{0, 500, 1000}},
		{name: "all zero", durs: []int64{0, 0}, ticks: []int64{0, 0, 1}},
		{name: "two", durs: []int64{100, 1001}, log: true, lo: 10, hi: 10000, ticks: []int64{10, 100, 1000, 10000}},
		{name: "one long run", durs: []int64{120, 150, 35000, 180, 130}, log: true, lo: 10, hi: 100000, ticks: []int64{10, 100, 1000, 10000, 100000}},
		{name: "from zero", durs: []int64{0, 2, 3, 900}, log: true, lo: 1, hi: 1000, ticks: []int64{1, 10, 100, 1000}},
		{name: "many decades", durs: []int64{1, 1, 1, 1e9}, log: true, lo: 1, hi: 1e9, ticks: []int64{10, 1e3, 1e5, 1e7, 1e9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newDurScale(tc.durs)
			assert.Equal(t, tc.log, s.log)
			if tc.log {
				assert.Equal(t, tc.lo, s.lo, "the bottom")
				assert.Equal(t, tc.hi, s.hi, "the top")
			}
			assert.Equal(t, tc.ticks, s.ticks())
			for _, d := range tc.durs {
				f := s.frac(d)
				assert.True(t, f >= 0 && f <= 1, "%d ms at %v", d, f)
			}
		})
	}
}

// TestRunChartKeepsTypicalRunsVisible: one run of 35 s among runs of
// about 150 ms, drawn on a log scale, leaves the quick ones bars of their
// own; runs alike stay on a linear one.
func TestRunChartKeepsTypicalRunsVisible(t *testing.T) {
	var runs []admin.Run
	for i, ms := range []int64{140, 150, 35000, 160, 150, 145} {
		start := drawnAt.Add(time.Duration(i-10) * time.Minute)
		runs = append(runs, admin.Run{Seq: uint64(i + 1), Result: "succeeded", Source: "normal", Start: start, End: start.Add(time.Duration(ms) * time.Millisecond)})
	}
	c := newRunChart(runs, drawnAt, false)
	require.Len(t, c.Marks, len(runs))
	assert.True(t, c.Log)
	assert.Equal(t, "took (log scale)", c.Labels[2].Label)
	long := c.Marks[2]
	for _, m := range c.Marks {
		assert.LessOrEqual(t, m.H, long.H, "run %d no taller than the long one", m.Seq)
		if m.Seq != long.Seq {
			assert.Greater(t, m.H, long.H/4, "run %d of %d ms is a bar of its own", m.Seq, m.Ms)
		}
	}
	small := newRunChart(runs, drawnAt, true)
	assert.Greater(t, small.Marks[0].H, small.Marks[2].H/4, "the sparkline too")

	c = newRunChart(runs[:2], drawnAt, false)
	assert.False(t, c.Log, "runs alike")
	assert.Equal(t, "took", c.Labels[2].Label)
}
