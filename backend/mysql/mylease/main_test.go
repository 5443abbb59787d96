package mylease_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
