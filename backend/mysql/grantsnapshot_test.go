package mysql_test

import (
	"testing"

	"github.com/simba-go/simba/backend/backendtest"
)

// TestGrantSnapshot: the queue read that grants a lease lists the
// records the session asked for, in its consistent read
// (backendtest.GrantSnapshot).
//
// Granting without it (patch: "_ = atGrant" for "w.AtGrant = atGrant" in
// Ahead) fails with "the waiter's lease lists no records at its grant".
func TestGrantSnapshot(t *testing.T) {
	backendtest.GrantSnapshot(t, newBackend(t))
}
