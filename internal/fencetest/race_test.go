package fencetest

import (
	"strings"
	"testing"
)

func TestInterleavings(t *testing.T) {
	all := Interleavings(3, 3)
	if len(all) != 20 {
		t.Fatalf("%d interleavings of 3+3, want 20", len(all))
	}
	seen := map[string]bool{}
	for _, o := range all {
		seen[strings.Join(o, ",")] = true
	}
	if len(seen) != 20 {
		t.Errorf("duplicate interleavings")
	}
}
