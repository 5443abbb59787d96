package backend

import (
	"strconv"
	"strings"
	"testing"
)

func TestCheckRecord(t *testing.T) {
	for _, tc := range []struct {
		key   string
		value int
		want  string // "": valid
	}{
		{"a", 0, ""},
		{"status/e", MaxRecordValue, ""},
		{"ops/disabled/billing.3", 1, ""},
		{"", 0, `simba/backend: invalid record key "": want 1-512 characters`},
		{"a//b", 0, `simba/backend: invalid record key "a//b": want`},
		{"/a", 0, `invalid record key "/a"`},
		{strings.Repeat("k", 513), 0, "invalid record key"},
		{"big", MaxRecordValue + 1, `simba/backend: record "big": value of 65537 bytes exceeds 65536`},
		{"a b", MaxRecordValue + 1, `invalid record key "a b"`}, // the key first
	} {
		err := CheckRecord(tc.key, make([]byte, tc.value))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckRecord(%q, %d bytes): %v, want nil", tc.key, tc.value, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckRecord(%q, %d bytes): %v, want an error containing %q", tc.key, tc.value, err, tc.want)
		}
	}
	if err := CheckKey("a/b"); err != nil {
		t.Errorf("CheckKey(a/b): %v", err)
	}
	if err := CheckKey("a/"); err == nil || !strings.HasPrefix(err.Error(), "simba/backend: ") {
		t.Errorf("CheckKey(a/): %v, want an error with the package prefix", err)
	}
}

// FuzzCheckRecord: CheckRecord agrees with ValidKey and MaxRecordValue on
// any input, never panics, and its errors carry the package prefix and
// name the key.
func FuzzCheckRecord(f *testing.F) {
	for _, s := range []string{"a", "status/e", "", "/a", "a/", "a//b", "ä", "a\x00b", strings.Repeat("k", 513)} {
		f.Add(s, 0)
	}
	f.Add("big", MaxRecordValue+1)
	f.Fuzz(func(t *testing.T, key string, size int) {
		size = min(max(size, 0), 2*MaxRecordValue) // a size, not an allocation of any int
		err := CheckRecord(key, make([]byte, size))
		valid := ValidKey(key) && size <= MaxRecordValue
		if valid != (err == nil) {
			t.Fatalf("CheckRecord(%q, %d bytes) = %v; ValidKey %v", key, size, err, ValidKey(key))
		}
		if (CheckKey(key) == nil) != ValidKey(key) {
			t.Fatalf("CheckKey(%q) = %v; ValidKey %v", key, CheckKey(key), ValidKey(key))
		}
		if err != nil && (!strings.HasPrefix(err.Error(), "simba/backend: ") || !strings.Contains(err.Error(), strconv.Quote(key))) {
			t.Fatalf("CheckRecord(%q, %d bytes): %q lacks the prefix or the key", key, size, err)
		}
	})
}
