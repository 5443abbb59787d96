package postgres_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend/postgres"
)

// TestOptionsRefuseBadValues: each option refuses a bad value, and New
// returns its error instead of correcting it (it never connects).
func TestOptionsRefuseBadValues(t *testing.T) {
	const dsn = "postgres://simba@127.0.0.1:1/none?sslmode=disable" // never connected to
	for _, tc := range []struct {
		opt  postgres.Option
		want string
	}{
		{postgres.WithSchema(""), `simba/postgres: schema name ""`},
		{postgres.WithSchema("Has-Dash"), `simba/postgres: schema name "Has-Dash"`},
		{postgres.WithSchema(strings.Repeat("s", 58)), "want 1-57 characters"},
		{postgres.WithLogger(nil), "simba/postgres: WithLogger: nil logger"},
		{postgres.WithoutListen(-time.Second), "simba/postgres: WithoutListen: negative interval"},
		{postgres.WithMaxRequests(0), "simba/postgres: max requests must be positive"},
		{nil, "simba/postgres: nil option"},
	} {
		b, err := postgres.New(dsn, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with a bad option: %v, want an error containing %q", err, tc.want)
		}
		if b != nil {
			b.Close()
		}
	}
	b, err := postgres.New(dsn, postgres.WithSchema("s_1"), postgres.WithLogger(slog.New(slog.DiscardHandler)), postgres.WithoutListen(0), postgres.WithMaxRequests(1))
	if err != nil {
		t.Fatalf("New with good options: %v", err)
	}
	defer b.Close()
	if b.Schema() != "s_1" || b.MaxRequests() != 1 {
		t.Errorf("schema %q, max requests %d: the options were not applied", b.Schema(), b.MaxRequests())
	}
}
