package postgres

import (
	"strings"
	"testing"
)

// A timeline below the highest seen is refused, and the highest is kept.
func TestTimelinesRefuseALowerOne(t *testing.T) {
	var tls timelines
	for _, tl := range []int64{1, 1, 2, 3} {
		if err := tls.note("op", tl); err != nil {
			t.Fatalf("timeline %d after the ones before: %v", tl, err)
		}
	}
	err := tls.note("keep-alive", 2)
	if err == nil || !strings.Contains(err.Error(), "simba/postgres: keep-alive: the server is on timeline 2, below timeline 3 seen before") {
		t.Fatalf("timeline 2 after 3: %v, want a refusal", err)
	}
	if err := tls.note("op", 3); err != nil {
		t.Fatalf("timeline 3 again: %v", err)
	}
}

// Tokens below 2³² are of timeline 1; each later timeline's range starts
// at (timeline − 1) << 32.
func TestTimelineOfToken(t *testing.T) {
	for token, want := range map[int64]int64{0: 1, 1: 1, 1<<32 - 1: 1, 1 << 32: 2, 1<<32 + 7: 2, 2 << 32: 3} {
		if got := timelineOfToken(token); got != want {
			t.Errorf("timelineOfToken(%d) = %d, want %d", token, got, want)
		}
	}
}

// A counter is settled on its own timeline once its settled bit is set:
// never on an older or a later one.
func TestSettled(t *testing.T) {
	base2 := int64(1) << 32
	for _, c := range []struct {
		last, tl int64
		want     bool
	}{
		{7, 2, false},                        // last granted on timeline 1
		{base2, 2, false},                    // registered on timeline 2, none granted
		{base2 + 5, 2, false},                // five more, none granted
		{base2 | settledBit, 2, true},        // the first grant's mark
		{base2 | settledBit + 3, 2, true},    // and later registrations
		{base2 | settledBit, 3, false},       // settled on timeline 2, not 3
		{settledBit + 1, 1, true},            // timeline 1 (never held back anyway)
		{2*base2 | settledBit + 1, 2, false}, // a later timeline's (refused anyway)
	} {
		if got := settled(c.last, c.tl); got != c.want {
			t.Errorf("settled(%#x, %d) = %v, want %v", c.last, c.tl, got, c.want)
		}
	}
}
