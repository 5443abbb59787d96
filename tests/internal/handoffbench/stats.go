package handoffbench

import (
	"fmt"
	"slices"
	"time"
)

// Quantile returns the p-quantile (0 ≤ p ≤ 1) of ds by the nearest rank
// (the element at index ⌊p·n⌋, the largest for p = 1), sorting a copy; it
// returns 0 for no durations.
func Quantile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// Ms formats d in milliseconds with two decimals ("3.42 ms").
func Ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// Summary formats p50, p90, p99 and max of ds as Markdown table cells:
// "p50 | p90 | p99 | max".
func Summary(ds []time.Duration) string {
	return fmt.Sprintf("%s | %s | %s | %s", Ms(Quantile(ds, 0.5)), Ms(Quantile(ds, 0.9)), Ms(Quantile(ds, 0.99)), Ms(Quantile(ds, 1)))
}
