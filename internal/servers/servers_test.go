package servers

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortBelowTheEphemeralRange checks that FreePort's ports are free
// and below the kernel's ephemeral range, where no connection's source
// port can take them.
func TestFreePortBelowTheEphemeralRange(t *testing.T) {
	hi := ephemeralLow()
	if hi-lowPort < 1000 {
		t.Skipf("the kernel's ephemeral range starts at %d: FreePort takes the kernel's ports", hi)
	}
	seen := map[int]bool{}
	for range 20 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < lowPort || p >= hi {
			t.Fatalf("FreePort returned %d, outside %d–%d (below the kernel's ephemeral range)", p, lowPort, hi-1)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d from FreePort is not free: %v", p, err)
		}
		l.Close()
	}
	if len(seen) < 10 {
		t.Fatalf("20 calls of FreePort returned only %d distinct ports: %v", len(seen), seen)
	}
}

// TestPickPortSkipsATakenPort checks that a port something listens on is
// never picked: in a range of two ports, one taken by the test.
func TestPickPortSkipsATakenPort(t *testing.T) {
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("port %d from FreePort is not free: %v", p, err)
	}
	defer l.Close()
	for range 20 {
		got, err := pickPort(p, p+2)
		if err != nil {
			t.Logf("pickPort(%d, %d): %v (port %d is taken by another process too)", p, p+2, err, p+1)
			continue
		}
		if got != p+1 {
			t.Fatalf("pickPort(%d, %d) = %d, which this test listens on", p, p+2, got)
		}
	}
	if _, err := pickPort(p, p+1); err == nil {
		t.Fatalf("pickPort(%d, %d) found a free port, but the only one is taken", p, p+1)
	}
	a, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if host, _, err := net.SplitHostPort(a); err != nil || host != "127.0.0.1" {
		t.Fatalf("FreeAddr returned %q", a)
	}
}
