package pgtest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The fault proxies of standbys and VIPs run goroutines, which their
// clean-ups must stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
