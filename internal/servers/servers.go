// Package servers holds what the test-server helpers of every module share
// (internal/etcdtest, internal/pgtest, internal/zktest, internal/kubetest,
// internal/fencetest): whether a missing server skips a test or fails it,
// and names of a test's own. It imports nothing but the standard library,
// so that each helper module, and the root module, can use it without
// requiring another's server client.
package servers

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"strconv"
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

// Ports below lowPort are left to services; FreePort picks from lowPort up
// to the kernel's ephemeral range.
const lowPort = 10000

// FreePort returns a port of 127.0.0.1 on which nothing listened a moment
// ago, below the range from which the kernel picks the source ports of
// connections and the ports of listeners on port 0
// (net.ipv4.ip_local_port_range, 32768–60999 by default). A test server
// that is stopped and started again on its port, which its clients dial,
// would otherwise find the port taken meanwhile by any connection's source
// port or any test's listener on port 0, and fail to start. (Another
// process picking the same port here at the same moment remains possible,
// one chance in twenty thousand or so.) When the kernel's range leaves
// too few ports below it, FreePort takes one from the kernel.
func FreePort() (int, error) {
	hi := ephemeralLow()
	if hi-lowPort < 1000 {
		return kernelPort()
	}
	return pickPort(lowPort, hi)
}

// pickPort returns a port from lo to hi-1 on which nothing listened a
// moment ago, trying 100 at random.
func pickPort(lo, hi int) (int, error) {
	var last error
	for range 100 {
		p := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			last = err
			continue
		}
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("servers: closing the listener on a free port: %w", err)
		}
		return p, nil
	}
	return 0, fmt.Errorf("servers: no free port in %d–%d after 100 tries: %w", lo, hi-1, last)
}

// FreeAddr returns "127.0.0.1:port" for a port of FreePort.
func FreeAddr() (string, error) {
	p, err := FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// ephemeralLow returns the first port of the kernel's ephemeral range,
// 32768 (Linux's default) when it cannot be read.
func ephemeralLow() int {
	const def = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return def
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return def
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 0 || lo > 65535 {
		return def
	}
	return lo
}

// kernelPort returns a port the kernel picks for a listener on port 0.
func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("servers: finding a free port: %w", err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	return p, errors.Join(l.Close())
}
