// Package servers holds what the test-server helpers of every module share
// (internal/etcdtest, internal/pgtest, internal/zktest, internal/kubetest,
// internal/fencetest): whether a missing server skips a test or fails it,
// and names of a test's own. It imports nothing but the standard library,
// so that each helper module, and the root module, can use it without
// requiring another's server client.
package servers

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
)

// EnvRequire names the variable that, set to 1, turns a missing server into
// a test failure instead of a skip (.ci/run sets it).
const EnvRequire = "SIMBA_REQUIRE_SERVERS"

// Required reports whether tests must fail, rather than skip, without a
// server.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Unavailable skips t, or fails it under SIMBA_REQUIRE_SERVERS=1, for want
// of server, whose address env would hold.
func Unavailable(t testing.TB, server, env string) {
	t.Helper()
	if Required() {
		t.Fatalf("no %s server: %s is not set (%s=1: a missing server is a failure)", server, env, EnvRequire)
	}
	t.Skipf("no %s server: %s is not set; run the tests through make test (which starts the servers) or set it", server, env)
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// UniqueName returns a name for the test's own table, schema or keys:
// lower-case letters, digits and underscores, at most 50 characters.
func UniqueName(t testing.TB) string {
	n := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return fmt.Sprintf("t_%s_%08x", strings.Trim(n, "_"), rand.Uint32())
}
