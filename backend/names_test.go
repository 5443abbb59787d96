package backend

import (
	"errors"
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

// TestCheckNameAgreesWithValidName: one rule, two forms; the error says what
// is wrong and matches ErrInvalidName.
func TestCheckNameAgreesWithValidName(t *testing.T) {
	for _, tc := range []struct{ name, says string }{
		{"a", ""}, {"billing.15", ""}, {strings.Repeat("x", 128), ""},
		{"", `invalid name "": empty`}, {".a", `invalid name ".a": character '.' at byte 0`}, {"a b", `character ' ' at byte 1`},
		{"ä", `character 'ä' at byte 0`}, {"a\xff", "invalid UTF-8 at byte 1"},
		{strings.Repeat("x", 129), "129 bytes long, at most 128"},
	} {
		err := CheckName(tc.name)
		if (err == nil) != ValidName(tc.name) {
			t.Errorf("%q: CheckName %v, ValidName %v", tc.name, err, ValidName(tc.name))
		}
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("%q: %v, want nil", tc.name, err)
		case tc.says != "" && (!errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("%q: %v, want an ErrInvalidName saying %q", tc.name, err, tc.says)
		}
	}
}

func TestCheckNameReportsRunes(t *testing.T) {
	for name, want := range map[string]string{
		"café":                        `character 'é' at byte 3`,
		"日本":                          `character '日' at byte 0`,
		"a\x00":                       `character '\x00' at byte 1`,
		strings.Repeat("é", 100):      "200 bytes long",
		strings.Repeat("x", 129):      "129 bytes long",
		"ok" + strings.Repeat("é", 1): `character 'é' at byte 2`,
		"a\xff":                       `"a\xff": invalid UTF-8 at byte 1`,
	} {
		err := CheckName(name)
		if errors.Is(err, ErrInvalidName) {
			if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "Ã") {
				t.Errorf("%q: %v, want it to say %s, and no byte of a rune shown as a character", name, err, want)
			}
		} else {
			t.Errorf("%q: %v, want an ErrInvalidName", name, err)
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
