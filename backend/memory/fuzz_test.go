package memory_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// leaseName is the rule for lease and group names, written independently of
// the backend's check.
var leaseName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// FuzzLeaseName checks that any string given to Acquire, Join or Members
// yields a lease (or nil error) for valid names and an error for the others,
// never a panic.
func FuzzLeaseName(f *testing.F) {
	for _, seed := range []string{
		"", "a", "x.y_z-0", ".a", "-a", "_a", "a/b", "a b", "é", "\x00", "a\n",
		strings.Repeat("a", 128), strings.Repeat("a", 129), "g.15", "0",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		srv := memory.New()
		defer srv.Close()
		s, err := srv.Open(t.Context(), backend.SessionOptions{TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		valid := leaseName.MatchString(name)
		l, err := s.Acquire(t.Context(), name)
		switch {
		case valid && err != nil:
			t.Fatalf("Acquire(%q): %v", name, err)
		case !valid && err == nil:
			t.Fatalf("Acquire(%q) accepted an invalid name", name)
		case valid:
			if l.Name() != name || l.Token() != 1 {
				t.Fatalf("Acquire(%q) = lease %q token %d", name, l.Name(), l.Token())
			}
			if holder, _, ok := srv.Holder(name); !ok || holder != s.ID() {
				t.Fatalf("Holder(%q) = %q, %v", name, holder, ok)
			}
		case l != nil:
			t.Fatalf("Acquire(%q) returned a lease and an error", name)
		}
		if err := s.Join(t.Context(), name, backend.Member{ID: name}); (err == nil) != valid {
			t.Fatalf("Join(%q): %v (valid: %v)", name, err, valid)
		}
		if _, err := s.Members(t.Context(), name); (err == nil) != valid {
			t.Fatalf("Members(%q): %v (valid: %v)", name, err, valid)
		}
	})
}
