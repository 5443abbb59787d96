package backend

import (
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	for _, s := range []string{"a", "0", "billing.15", "A_b-c.9", strings.Repeat("x", 128)} {
		if !ValidName(s) {
			t.Errorf("%q: invalid, want valid", s)
		}
	}
	for _, s := range []string{"", ".a", "-a", "_a", "a b", "a/b", "ä", strings.Repeat("x", 129)} {
		if ValidName(s) {
			t.Errorf("%q: valid, want invalid", s)
		}
	}
}

func TestValidKey(t *testing.T) {
	for _, s := range []string{"a", "status/e", "history/e/00000000000000000001", "ops/disabled/billing.3"} {
		if !ValidKey(s) {
			t.Errorf("%q: invalid, want valid", s)
		}
	}
	for _, s := range []string{"", "/a", "a/", "a//b", "a b", "ä", strings.Repeat("k", 513)} {
		if ValidKey(s) {
			t.Errorf("%q: valid, want invalid", s)
		}
	}
}
