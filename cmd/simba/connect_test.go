package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/await"
)

// closedAddr returns an address on 127.0.0.1 where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestEtcdRefusedFailsAtOnce: an etcd that refuses the connection fails
// the command at once, as ZooKeeper and PostgreSQL do, with the same
// message, rather than after --timeout: etcd's client retries a refused
// connection until its deadline. (A bound of 30s of a 60s --timeout: far
// beyond a loaded machine's delays, far below the timeout.)
func TestEtcdRefusedFailsAtOnce(t *testing.T) {
	closed, other := closedAddr(t), closedAddr(t)
	for _, tc := range []struct {
		name  string
		args  []string
		where string
	}{
		{"status", []string{"status", "--etcd", closed}, "etcd at " + closed},
		{"two endpoints", []string{"jobs", "--etcd", closed + "," + other}, "etcd at " + closed + "," + other},
		{"TLS", []string{"status", "--etcd", "https://" + closed, "--insecure-skip-tls-verify"}, "etcd at https://" + closed},
		{"run", []string{"run", "--etcd", closed, "--election", "x", "--", "true"}, "etcd at " + closed},
		{"console", []string{"console", "--etcd", closed, "--listen", "127.0.0.1:0", "--read-only"}, "etcd at " + closed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			var out, errb await.Buffer
			start := time.Now()
			code := realCLI(nil).runContext(ctx, &out, &errb, append(tc.args, "--timeout", "60s")...)
			took := time.Since(start)
			want := "simba: " + tc.where + ": failed while opening a session: no server of ["
			if code != exitUnreachable || !strings.HasPrefix(errb.String(), want) || !strings.HasSuffix(errb.String(), ": connect: connection refused\n") {
				t.Errorf("exit %d, want %d and one line %q...%q\nstderr:\n%s", code, exitUnreachable, want, "connect: connection refused", errb.String())
			}
			if took > 30*time.Second {
				t.Errorf("a refused connection failed only after %v of the 60s --timeout: not at once", took.Round(time.Millisecond))
			}
		})
	}
}
