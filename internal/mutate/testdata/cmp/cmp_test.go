package cmp

import "testing"

func TestLess(t *testing.T) {
	if !Less(1, 2) || Less(2, 2) {
		t.Fatal("Less is wrong")
	}
}
