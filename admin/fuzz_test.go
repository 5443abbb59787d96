package admin

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/records"
)

// FuzzParseAudit checks that any key and value read under audit/ gives an
// entry or a bounded problem, never a panic, and that an entry accepted is
// of this version with a known operation and a time, and comes back the
// same from its own encoding.
func FuzzParseAudit(f *testing.F) {
	at := time.Date(2025, 3, 4, 16, 2, 0, 0, time.UTC)
	good := records.Encode(AuditEntry{V: 1, At: at, By: "alice@h1", Reason: "maintenance", Op: "disable", Target: "report", Changed: true, Change: "disabled; was enabled"})
	for _, seed := range []struct{ key, value string }{
		{records.AuditKey(at, "0123abcd"), string(good)},
		{records.AuditKey(at, "x"), `{"v":1,"op":"resign","token":7,"at":"2025-01-01T00:00:00Z"}`},
		{"audit/20250304T160200.000000000Z-", string(good)},
		{"audit/20251304T160200.000000000Z-ab", string(good)},
		{"audit/garbage", `{}`},
		{"audit/x-y", ""},
		{records.AuditKey(at, "ab"), `{"v":2,"op":"disable","at":"2025-01-01T00:00:00Z"}`},
		{records.AuditKey(at, "ab"), `{"v":1,"op":"` + strings.Repeat("x", 500) + `","at":"2025-01-01T00:00:00Z"}`},
		{records.AuditKey(at, "ab"), "\xff\xfe"},
		{records.AuditKey(at, "ab"), `{"v":1e400}`},
	} {
		f.Add(seed.key, []byte(seed.value))
	}
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		e, p := parseAudit(backend.Record{Key: key, Value: value})
		if p != nil {
			if len(p.Key) > maxProblemKey || len(p.Reason) > maxProblemReason || !utf8.ValidString(p.Key) || !utf8.ValidString(p.Reason) {
				t.Fatalf("problem out of bounds or not UTF-8: %q", p)
			}
			return
		}
		if e.V != records.AuditVersion || e.At.IsZero() || !validAuditOp(e.Op) {
			t.Fatalf("accepted %+v of %q", e, value)
		}
		again, p := parseAudit(backend.Record{Key: key, Value: records.Encode(e)})
		if p != nil || again.V != e.V || !again.At.Equal(e.At) || again.Op != e.Op || again.By != e.By || again.Target != e.Target ||
			again.Reason != e.Reason || again.Change != e.Change || again.Changed != e.Changed || again.Token != e.Token {
			t.Fatalf("round trip of %+v: %+v, %v", e, again, p)
		}
	})
}

func validAuditOp(op string) bool {
	for _, o := range records.AuditOps {
		if o == op {
			return true
		}
	}
	return false
}
