package zookeeper

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// wireVersion is the go-zookeeper version whose packets and behaviour
// wire.go and link.go were written against and verified with.
const wireVersion = "v1.0.4"

// wireAssumptions lists what wire.go and link.go rely on in go-zookeeper,
// to re-verify in its source before wireVersion is moved.
const wireAssumptions = `re-verify, in the new version's conn.go, what wire.go and link.go rely on:
  - each packet is written with one Write call, the connect request first
    (layout: length, protocol version, last zxid, timeout, session ID), from
    one goroutine at a time;
  - the connect response is read first, from one goroutine, and its timeout
    field sets recvTimeout and pingInterval (the wire sets it to MaxInt32 so
    that go-zookeeper neither pings nor times reads out);
  - pings are xid -2, op 11; close is op -11; setWatches is op 101 with its
    relative zxid at bytes 12..20; create is op 1 with its path right after
    the header;
  - the zxid of each reply is kept only for the connect request and the
    setWatches request (the wire zeroes it and puts the link's back), and
    is still written on the receiving goroutine and read on another one
    (the data race the wire avoids); if the new version fixed that, the
    rewriting can go;
  - the Dialer and HostProvider options are called as link.dial and hosts
    expect (Next's retryStart pauses about a second; link.dial replaces
    the timeout go-zookeeper gives a dial with its own);
  - Conn.Close waits at most 2 × connectTimeout to queue the close request
    and a second for its reply (session.go's shutdownSlack counts on it),
    and the events channel closes once the connection loop has exited;
  - after a reconnection the client re-sends its watches with setWatches,
    and the event callback sees StateHasSession on each connection
    (reconnect.go's re-checks count on that event).
Then change wireVersion.`

// TestGoZookeeperVersion pins the go-zookeeper version the packet rewriting
// in wire.go was verified with: a change of version fails here until the
// assumptions listed in wireAssumptions have been checked again. It reads
// the requirement in go.mod and, when the go command is at hand, the
// version the build selects (a go.work or a replace may differ from go.mod;
// test binaries carry no dependency versions for debug.ReadBuildInfo).
func TestGoZookeeperVersion(t *testing.T) {
	const path = "github.com/go-zookeeper/zk"
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatalf("read go.mod to check the %s version: %v", path, err)
	}
	required := ""
	for line := range strings.Lines(string(mod)) {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == path {
			required = f[1]
		}
		if len(f) >= 1 && f[0] == "replace" && strings.Contains(line, path) {
			t.Fatalf("go.mod replaces %s: wire.go was verified with %s %s only; %s", path, path, wireVersion, wireAssumptions)
		}
	}
	if required != wireVersion {
		t.Fatalf("go.mod requires %s %q, but wire.go rewrites the packets of %s as verified with %s; %s",
			path, required, path, wireVersion, wireAssumptions)
	}

	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Logf("no go command (%v): checked go.mod only", err)
		return
	}
	out, err := exec.CommandContext(t.Context(), gocmd, "list", "-m", "-f", "{{.Version}}{{with .Replace}} => {{.Path}} {{.Version}}{{end}}", path).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", path, err)
	}
	if selected := strings.TrimSpace(string(out)); selected != wireVersion {
		t.Fatalf("the build selects %s %s, but wire.go rewrites the packets of %s as verified with %s; %s",
			path, selected, path, wireVersion, wireAssumptions)
	}
}
