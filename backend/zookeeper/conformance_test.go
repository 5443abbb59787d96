package zookeeper_test

import (
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
)

// TestConformance runs the backend conformance suite on the shared server,
// each case under a root of its own. The test server grants session
// timeouts from 400ms to 4s; the suite asks for 1s.
func TestConformance(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return newBackend(t)
	}, backendtest.WithTTL(time.Second))
}
