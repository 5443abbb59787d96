package admin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
)

// TestOpenRefusesBadOptions: an option given a value it cannot take, or a
// nil option, makes Open fail with a message of the package, before it
// opens anything.
func TestOpenRefusesBadOptions(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{nil, "simba/admin: nil Option"},
		{WithTTL(0), "simba/admin: WithTTL(0s): the TTL must be positive"},
		{WithTTL(-time.Second), "simba/admin: WithTTL(-1s): the TTL must be positive"},
		{WithOperator(""), `simba/admin: WithOperator(""): the operator needs a name`},
		{WithOperator(" \t"), `simba/admin: WithOperator(" \t"): the operator needs a name`},
	} {
		a, err := Open(t.Context(), b.Node("admin"), WithOperator("alice"), tc.opt)
		if err == nil {
			a.Close()
			t.Errorf("Open with a bad option: no error, want %q", tc.want)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("Open with a bad option: %q, want %q", err, tc.want)
		}
	}
	a, err := Open(t.Context(), b.Node("admin"), WithTTL(time.Minute), WithOperator("alice"))
	if err != nil {
		t.Fatalf("Open with good options: %v", err)
	}
	a.Close()
}

// recordless is a backend whose sessions keep no records, and that has no
// View.
type recordless struct{ b backend.Backend }

func (r recordless) Open(ctx context.Context, o backend.SessionOptions) (backend.Session, error) {
	s, err := r.b.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return struct{ backend.Session }{s}, nil // hides backend.Records
}

func (r recordless) Close() error { return nil }

// TestOpenWithoutRecords: Open on a backend without records returns an
// error of the package matching backend.ErrRecordsUnsupported.
func TestOpenWithoutRecords(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	a, err := Open(t.Context(), recordless{b.Node("admin")})
	if err == nil {
		a.Close()
		t.Fatal("Open of a backend without records: no error")
	}
	if !errors.Is(err, backend.ErrRecordsUnsupported) || !strings.HasPrefix(err.Error(), "simba/admin: ") {
		t.Errorf("Open of a backend without records: %v, want a simba/admin error matching backend.ErrRecordsUnsupported", err)
	}
}
