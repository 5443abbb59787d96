package postgres_test

import (
	"testing"

	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/postgres"
	"github.com/simba-go/simba/internal/pgtest"
)

// TestGrantSnapshot: the queue read that grants a lease lists the
// records the session asked for (backendtest.GrantSnapshot).
//
// Granting without it (patch: "_ = atGrant" for "w.AtGrant = atGrant" in
// Ahead) fails with "the waiter's lease lists no records at its grant".
func TestGrantSnapshot(t *testing.T) {
	b, err := postgres.New(pgtest.DSN(t), postgres.WithSchema(pgtest.Schema(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	backendtest.GrantSnapshot(t, b)
}
