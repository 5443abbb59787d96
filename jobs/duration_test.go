package jobs_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/simba-go/simba/jobs"
)

func TestParseDuration(t *testing.T) {
	const day = 24 * time.Hour
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		// Go's syntax.
		{"1m30s", 90 * time.Second},
		{"1.5h", 90 * time.Minute},
		{"300ms", 300 * time.Millisecond},
		{"2h45m", 2*time.Hour + 45*time.Minute},
		{"1µs", time.Microsecond},
		{"1μs", time.Microsecond},
		{"1us", time.Microsecond},
		{"7ns", 7},
		{".5s", 500 * time.Millisecond},
		{"1.s", time.Second},
		{"0", 0},
		{"0s", 0},
		{"-1.5s", -1500 * time.Millisecond},
		{"+2m", 2 * time.Minute},
		{"1.000000001s", time.Second + 1},
		{"1.0000000019s", time.Second + 1}, // below a nanosecond: cut
		{"2562047h47m16.854775807s", math.MaxInt64},
		{"-2562047h47m16.854775808s", math.MinInt64},
		// Spring Boot's simple style, and days.
		{"10s", 10 * time.Second},
		{"500ms", 500 * time.Millisecond},
		{"1d", day},
		{"2h", 2 * time.Hour},
		{"1d12h", day + 12*time.Hour},
		{"10S", 10 * time.Second},
		{"5MS", 5 * time.Millisecond},
		{"  10s\t", 10 * time.Second},
		// Plain integers: milliseconds.
		{"5000", 5 * time.Second},
		{"1", time.Millisecond},
		{"-250", -250 * time.Millisecond},
		// ISO-8601.
		{"PT1M", time.Minute},
		{"PT0.5S", 500 * time.Millisecond},
		{"PT0,5S", 500 * time.Millisecond},
		{"P1D", day},
		{"P1DT2H", day + 2*time.Hour},
		{"P2DT3H4M5.000000006S", 2*day + 3*time.Hour + 4*time.Minute + 5*time.Second + 6},
		{"pt15m", 15 * time.Minute},
		{"PT-6H3M", -6*time.Hour + 3*time.Minute},
		{"-PT6H3M", -6*time.Hour - 3*time.Minute},
		{"PT36H", 36 * time.Hour},
		{"PT1H30S", time.Hour + 30*time.Second},
		{"PT0S", 0},
	} {
		got, err := jobs.ParseDuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseDurationRefuses(t *testing.T) {
	for _, in := range []string{
		"", " ", "-", "+", "s", "ms",
		"1x", "10 s", "1.5", "1e3s", "1h-5m", "..5s", "1..5s", "1m 30s",
		"106752d", "9223372036854775808", "2562047h47m16.854775808s",
		"P", "PT", "P1", "PT1", "P1Y", "P1M", "P1W", "P1H", "PT1D", "PT1S1M", "PT1M1H",
		"P1.5D", "PT1.5H", "PT0.1234567891S", "P1DT", "PT1H1H", "PTS", "P-D",
		"P106752D", "1h\x00", "１s",
	} {
		d, err := jobs.ParseDuration(in)
		if err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, d)
			continue
		}
		if !errors.Is(err, jobs.ErrDuration) {
			t.Errorf("ParseDuration(%q): %v does not match ErrDuration", in, err)
		}
	}
}

// Every duration's String form reads back as itself.
func TestParseDurationReadsString(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 999, time.Microsecond + 1, time.Second, -time.Minute, 26*time.Hour + 3*time.Nanosecond, math.MaxInt64, math.MinInt64} {
		got, err := jobs.ParseDuration(d.String())
		if err != nil || got != d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", d.String(), got, err, d)
		}
	}
}
