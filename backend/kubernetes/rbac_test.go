package kubernetes_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/kubetest"
)

// appUser is the user the least-privilege tests run the backend as: one
// with no permission but those of the Role bound to it.
const appUser = "simba-app"

// role returns kubernetes.Role, parsed.
func role(t *testing.T) *rbacv1.Role {
	t.Helper()
	r, err := kubetest.ParseRole(kubernetes.Role)
	if err != nil {
		t.Fatalf("kubernetes.Role: %v", err)
	}
	return r
}

// boundBackend returns a backend in a fresh namespace, as appUser bound
// there to r and to nothing else, logging into log (nil: the test's
// output), closed at the end of the test.
func boundBackend(t *testing.T, srv *kubetest.Server, r *rbacv1.Role, log *await.Buffer) (*kubernetes.Backend, string) {
	t.Helper()
	ns := srv.Namespace(t)
	srv.Grant(t, ns, appUser, r)
	out := t.Output()
	if log != nil {
		out = log
	}
	lg := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := kubernetes.New(srv.User(t, appUser), kubernetes.WithNamespace(ns), kubernetes.WithLogger(lg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b, ns
}

// TestLeastPrivilege runs the backend as a user bound only to
// kubernetes.Role in its namespace: the conformance suite (it covers
// sessions, leases and their queues, Candidates, HeldLeases, group
// membership, records fenced and not, views and malformed objects), each
// case in a namespace of its own;
// then, with each verb of the Role removed in turn, what needs it fails
// saying which verb on leases in which namespace was refused.
func TestLeastPrivilege(t *testing.T) {
	srv := kubetest.Start(t)
	full := role(t)
	if len(full.Rules) != 1 || len(full.Rules[0].Resources) != 1 || full.Rules[0].Resources[0] != "leases" || full.Rules[0].APIGroups[0] != "coordination.k8s.io" {
		t.Fatalf("kubernetes.Role has rules %+v, want one on coordination.k8s.io leases", full.Rules)
	}
	t.Run("Conformance", func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T) backend.Backend {
			b, _ := boundBackend(t, srv, full, nil)
			return b
		}, backendtest.WithTTL(2*time.Second), backendtest.WithMalformed(malformer), backendtest.WithFingerprint(fingerprint))
	})
	t.Run("Verbs", func(t *testing.T) {
		verbs := full.Rules[0].Verbs
		if got := strings.Join(verbs, ","); got != "get,list,watch,create,update,delete" {
			t.Fatalf("kubernetes.Role grants %s; this test knows what needs get,list,watch,create,update,delete", got)
		}
		for _, verb := range verbs {
			t.Run(verb, func(t *testing.T) { testWithoutVerb(t, srv, full, verb) })
		}
	})
}

// testWithoutVerb runs the backend bound to r less verb, and checks that
// the operation needing verb fails naming it.
func testWithoutVerb(t *testing.T, srv *kubetest.Server, r *rbacv1.Role, verb string) {
	var log await.Buffer
	b, ns := boundBackend(t, srv, kubetest.WithoutVerb(r, verb), &log)
	if srv.Allowed(t, ns, appUser, verb, "coordination.k8s.io", "leases") {
		t.Fatalf("%s is still allowed without it in the Role", verb)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// refused checks that err is the refusal of verb, named as the API
	// server names it, with the namespace and a pointer to the Role.
	refused := func(what string, err error) {
		t.Helper()
		want := []string{
			fmt.Sprintf(`User %q cannot %s resource "leases" in API group "coordination.k8s.io" in the namespace %q`, appUser, verb, ns),
			"kubernetes.Role",
		}
		if err == nil {
			t.Fatalf("%s without %s: no error", what, verb)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%s without %s: %v\nwant an error saying %s", what, verb, err, w)
			}
		}
		t.Logf("%s without %s: %v", what, verb, err)
	}
	s, err := b.Open(ctx, backend.SessionOptions{TTL: 30 * time.Second})
	if verb == "create" {
		refused("Open", err)
		return
	}
	if err != nil {
		t.Fatalf("Open without %s: %v", verb, err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close(context.Background())
		}
	}()
	switch verb {
	case "update":
		_, err := s.KeepAlive(ctx)
		refused("KeepAlive", err)
	case "get":
		_, err := s.Acquire(ctx, "x")
		refused("Acquire", err)
	case "list":
		if _, err := s.Acquire(ctx, "x"); err != nil {
			t.Fatalf("Acquire without list: %v", err)
		}
		_, err := s.(backend.CandidateLister).Candidates(ctx, "x")
		refused("Candidates", err)
	case "delete":
		closed = true
		refused("Close", s.Close(ctx))
	case "watch":
		// Nothing fails: waits fall back to polling (a released lease is
		// handed on only when the waiter looks again, instead of at once;
		// see the package documentation). The backend says so.
		l, err := s.Acquire(ctx, "x")
		if err != nil {
			t.Fatalf("Acquire without watch: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release without watch: %v", err)
		}
		for n := 0; !strings.Contains(log.String(), "the backend's watch is refused"); n++ {
			select {
			case <-ctx.Done():
				t.Fatalf("no warning of the refused watch in the log:\n%s", log.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
		line := ""
		for l := range strings.Lines(log.String()) {
			if strings.Contains(l, "the backend's watch is refused") {
				line = strings.ReplaceAll(l, `\"`, `"`) // as slog's text quotes it
				break
			}
		}
		refused("the watch", errors.New(line))
	default:
		t.Fatalf("no check for verb %s", verb)
	}
}
