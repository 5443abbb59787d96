package mytest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The helpers open connections and wait on servers' processes: none of
// their goroutines may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
