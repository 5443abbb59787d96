package kubernetes_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/kubernetes"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/certs"
	"github.com/simba-go/simba/internal/kubetest"
)

// TestBadInput: bad configuration, a namespace the user may not write,
// lease name and session objects edited by hand into garbage, an API server
// that cannot be reached or trusted: clear errors, no panic, nothing else
// touched.
func TestBadInput(t *testing.T) {
	if _, err := kubernetes.New(nil); err == nil || !strings.Contains(err.Error(), "nil *rest.Config") {
		t.Errorf("New(nil): %v", err)
	}
	if _, err := kubernetes.NewFromClient(nil); err == nil {
		t.Errorf("NewFromClient(nil): no error")
	}
	srv := kubetest.Start(t)
	t.Run("Config", func(t *testing.T) { testBadConfig(t, srv) })
	t.Run("Forbidden", func(t *testing.T) { testForbidden(t, srv) })
	t.Run("CorruptLeaseObject", func(t *testing.T) { testCorruptLeaseObject(t, srv) })
	t.Run("SpoiltSessionTTL", func(t *testing.T) { testSpoiltSessionTTL(t, srv) })
	t.Run("Unreachable", func(t *testing.T) { testUnreachable(t, srv) })
}

// backendIn returns a backend of the administrator in namespace ns,
// logging into log (nil: the test's output), closed at the end of the
// test.
func backendIn(t *testing.T, srv *kubetest.Server, ns string, log *await.Buffer) *kubernetes.Backend {
	t.Helper()
	out := t.Output()
	if log != nil {
		out = log
	}
	lg := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := kubernetes.New(srv.Admin(), kubernetes.WithNamespace(ns), kubernetes.WithLogger(lg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func open(t *testing.T, b *kubernetes.Backend, ttl time.Duration) backend.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := b.Open(ctx, backend.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func randomID() string {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	return hex.EncodeToString(raw[:])
}

// testBadConfig: an invalid or missing namespace, a zero TTL.
func testBadConfig(t *testing.T, srv *kubetest.Server) {
	if _, err := kubernetes.New(srv.Admin(), kubernetes.WithNamespace("Not_A_Namespace")); err == nil || !strings.Contains(err.Error(), "not a valid namespace") {
		t.Errorf("invalid namespace: %v", err)
	}
	b, err := kubernetes.New(srv.Admin(), kubernetes.WithNamespace("no-such-namespace"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.Open(t.Context(), backend.SessionOptions{TTL: time.Second})
	if err == nil || !strings.Contains(err.Error(), `namespace "no-such-namespace" does not exist`) {
		t.Errorf("Open in a missing namespace: %v", err)
	}
	if _, err := newBackend(t, srv).Open(t.Context(), backend.SessionOptions{TTL: 0}); err == nil {
		t.Errorf("Open with TTL 0: no error")
	}
}

// testForbidden: a user bound to a read-only Role in the namespace, or to
// nothing, cannot Open there; the error names the user, the verb, leases,
// the namespace and kubernetes.Role, and nothing in the namespace changes.
func testForbidden(t *testing.T, srv *kubetest.Server) {
	readOnly := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "leases-read-only"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}}},
	}
	for _, c := range []struct {
		name string
		role *rbacv1.Role
	}{{"ReadOnly", readOnly}, {"Unbound", nil}} {
		t.Run(c.name, func(t *testing.T) {
			const user = "simba-reader"
			ns := srv.Namespace(t)
			if c.role != nil {
				srv.Grant(t, ns, user, c.role)
			}
			adm := backendIn(t, srv, ns, nil)
			s := open(t, adm, time.Minute)
			if _, err := s.Acquire(t.Context(), "x"); err != nil {
				t.Fatal(err)
			}
			before := fingerprint(t, adm)
			b, err := kubernetes.New(srv.User(t, user), kubernetes.WithNamespace(ns))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			_, err = b.Open(ctx, backend.SessionOptions{TTL: time.Second})
			want := []string{
				"simba/kubernetes: opening a session",
				fmt.Sprintf(`User %q cannot create resource "leases" in API group "coordination.k8s.io" in the namespace %q`, user, ns),
				"kubernetes.Role",
			}
			if err == nil {
				t.Fatalf("Open: no error")
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open: %v\nwant an error saying %s", err, w)
				}
			}
			t.Logf("Open: %v", err)
			b.Close()
			if after := fingerprint(t, adm); after != before {
				t.Errorf("the namespace changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// nameObjectOf returns the lease name object of name: "simba-l-" and
// the first 40 hex digits of the SHA-256 of the name.
func nameObjectOf(t *testing.T, b *kubernetes.Backend, name string) *coordv1.Lease {
	t.Helper()
	sum := sha256.Sum256([]byte(name))
	l, err := b.Client().CoordinationV1().Leases(b.Namespace()).Get(t.Context(), "simba-l-"+hex.EncodeToString(sum[:20]), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the lease name object of %q: %v", name, err)
	}
	return l
}

func queueJSON(t *testing.T, entries ...any) string {
	t.Helper()
	var q []map[string]any
	for i := 0; i < len(entries); i += 2 {
		q = append(q, map[string]any{"t": entries[i], "s": entries[i+1]})
	}
	raw, err := json.Marshal(q)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// testCorruptLeaseObject: a lease name object edited into garbage fails
// Acquire, Release and Candidates of its name with a
// *kubernetes.CorruptObjectError naming the object and the annotation, is
// not rewritten, and other names keep working; once repaired, the name
// works again.
func testCorruptLeaseObject(t *testing.T, srv *kubetest.Server) {
	ns := srv.Namespace(t)
	b := backendIn(t, srv, ns, nil)
	leases := b.Client().CoordinationV1().Leases(ns)
	holder := open(t, b, time.Minute)
	other := open(t, b, time.Minute)
	stranger := randomID()
	for _, c := range []struct {
		name  string
		field string
		spoil func(l *coordv1.Lease)
	}{
		{"QueueNotJSON", "simba.io/queue", func(l *coordv1.Lease) { l.Annotations["simba.io/queue"] = `[{"t":1,"s":` }},
		{"QueueMissing", "simba.io/queue", func(l *coordv1.Lease) { delete(l.Annotations, "simba.io/queue") }},
		{"CounterNotInt", "simba.io/last", func(l *coordv1.Lease) { l.Annotations["simba.io/last"] = "seven" }},
		{"CounterNegative", "simba.io/last", func(l *coordv1.Lease) { l.Annotations["simba.io/last"] = "-1" }},
		{"CounterBelowQueue", "simba.io/queue", func(l *coordv1.Lease) { l.Annotations["simba.io/last"] = "0" }},
		{"QueueOutOfOrder", "simba.io/queue", func(l *coordv1.Lease) {
			l.Annotations["simba.io/last"] = "3"
			l.Annotations["simba.io/queue"] = queueJSON(t, 3, holder.ID(), 2, stranger)
		}},
		{"QueueDuplicateToken", "simba.io/queue", func(l *coordv1.Lease) {
			l.Annotations["simba.io/queue"] = queueJSON(t, 1, holder.ID(), 1, stranger)
		}},
		{"QueueBadSession", "simba.io/queue", func(l *coordv1.Lease) {
			l.Annotations["simba.io/last"] = "2"
			l.Annotations["simba.io/queue"] = queueJSON(t, 1, holder.ID(), 2, "somebody")
		}},
		{"HolderDisagrees", "spec.holderIdentity", func(l *coordv1.Lease) { l.Spec.HolderIdentity = &stranger }},
		{"NameWrong", "simba.io/name", func(l *coordv1.Lease) { l.Annotations["simba.io/name"] = "another" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			name := "spoilt-" + c.name
			l, err := holder.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			good := nameObjectOf(t, b, name)
			bad := good.DeepCopy()
			c.spoil(bad)
			bad, err = leases.Update(ctx, bad, metav1.UpdateOptions{})
			if err != nil {
				t.Fatalf("spoiling the object: %v", err)
			}
			before := fingerprint(t, b)
			wantCorrupt := func(what string, err error) {
				t.Helper()
				var ce *kubernetes.CorruptObjectError
				if !errors.As(err, &ce) {
					t.Errorf("%s: %v, want a *kubernetes.CorruptObjectError", what, err)
					return
				}
				if ce.Object != good.Name || ce.Namespace != ns || ce.Name != name || ce.Field != c.field {
					t.Errorf("%s: %+v, want object %s/%s of %q, field %s", what, *ce, ns, good.Name, name, c.field)
				}
				for _, w := range []string{good.Name, c.field, "simba/kubernetes: "} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %v\nwant an error saying %s", what, err, w)
					}
				}
			}
			_, err = other.Acquire(ctx, name)
			wantCorrupt("Acquire", err)
			_, err = other.(backend.CandidateLister).Candidates(ctx, name)
			wantCorrupt("Candidates", err)
			err = l.Release(ctx)
			wantCorrupt("Release", err)
			t.Logf("Release: %v", err)
			if after := fingerprint(t, b); after != before {
				t.Errorf("the namespace changed:\nbefore %s\nafter  %s", before, after)
			}
			if got := nameObjectOf(t, b, name); got.ResourceVersion != bad.ResourceVersion {
				t.Errorf("the spoilt object was rewritten: %v", got.Annotations)
			}
			// Another name works.
			lo, err := other.Acquire(ctx, "fine-"+c.name)
			if err != nil {
				t.Fatalf("Acquire of another name: %v", err)
			}
			if err := lo.Release(ctx); err != nil {
				t.Fatalf("Release of another name: %v", err)
			}
			// Repaired, the name works again: the holding is released.
			fixed := good.DeepCopy()
			fixed.ResourceVersion = bad.ResourceVersion
			if _, err := leases.Update(ctx, fixed, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("repairing the object: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release after the repair: %v", err)
			}
			lo, err = other.Acquire(ctx, name)
			if err != nil {
				t.Fatalf("Acquire after the repair: %v", err)
			}
			if lo.Token() <= l.Token() {
				t.Errorf("token %d after the repair, want > %d", lo.Token(), l.Token())
			}
			if err := lo.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// testSpoiltSessionTTL: a crashed holder's session object whose TTL was
// edited into garbage (missing, not a number, lowered so that it disagrees
// with spec.leaseDurationSeconds) is not taken over after the TTL plus
// margin: a contender counts with the longest TTL a session may have
// (24h), and says so in its log; deleting the object by hand frees the
// lease. A live holder's renewal repairs its object.
func testSpoiltSessionTTL(t *testing.T, srv *kubetest.Server) {
	const ttl = 2 * time.Second
	ns := srv.Namespace(t)
	leases := backendIn(t, srv, ns, nil).Client().CoordinationV1().Leases(ns)
	spoil := func(t *testing.T, id string, f func(*coordv1.Lease)) {
		t.Helper()
		l, err := leases.Get(t.Context(), "simba-s-"+id, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f(l)
		if _, err := leases.Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("spoiling the session object: %v", err)
		}
	}
	for _, c := range []struct {
		name  string
		spoil func(*coordv1.Lease)
	}{
		{"Missing", func(l *coordv1.Lease) { delete(l.Annotations, "simba.io/ttl-ms") }},
		{"NotANumber", func(l *coordv1.Lease) { l.Annotations["simba.io/ttl-ms"] = "two seconds" }},
		{"Lowered", func(l *coordv1.Lease) { l.Annotations["simba.io/ttl-ms"] = "1" }},
		{"DurationMissing", func(l *coordv1.Lease) { l.Spec.LeaseDurationSeconds = nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			name := "held-" + strings.ToLower(c.name)
			crashed := backendIn(t, srv, ns, nil)
			ha := open(t, crashed, ttl)
			la, err := ha.Acquire(t.Context(), name)
			if err != nil {
				t.Fatal(err)
			}
			crashed.Close() // nothing renews or deletes ha's object
			spoil(t, ha.ID(), c.spoil)
			var log await.Buffer
			hb := open(t, backendIn(t, srv, ns, &log), time.Minute)
			wait := 2 * (ttl + ttl/10)
			ctx, cancel := context.WithTimeout(t.Context(), wait)
			defer cancel()
			if l, err := hb.Acquire(ctx, name); err == nil {
				t.Fatalf("took over (token %d) from a session whose TTL was spoilt, within %v", l.Token(), wait)
			} else if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire: %v, want it still waiting after %v", err, wait)
			}
			if _, err := leases.Get(t.Context(), "simba-s-"+ha.ID(), metav1.GetOptions{}); err != nil {
				t.Errorf("the spoilt session's object: %v, want it kept", err)
			}
			if !strings.Contains(log.String(), "a session object is not as this backend writes it") {
				t.Errorf("no warning of the spoilt session object in the log:\n%s", log.String())
			}
			// Deleted by hand (as the warning says), the lease is free.
			if err := leases.Delete(t.Context(), "simba-s-"+ha.ID(), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel = context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			lb, err := hb.Acquire(ctx, name)
			if err != nil {
				t.Fatalf("Acquire once the spoilt object is deleted: %v", err)
			}
			if lb.Token() <= la.Token() {
				t.Errorf("token %d, want > %d", lb.Token(), la.Token())
			}
		})
	}
	t.Run("LiveRepairs", func(t *testing.T) {
		t.Parallel()
		s := open(t, backendIn(t, srv, ns, nil), ttl)
		spoil(t, s.ID(), func(l *coordv1.Lease) { l.Annotations["simba.io/ttl-ms"] = "1" })
		if _, err := s.KeepAlive(t.Context()); err != nil {
			t.Fatalf("KeepAlive: %v", err)
		}
		l, err := leases.Get(t.Context(), "simba-s-"+s.ID(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Annotations["simba.io/ttl-ms"]; got != "2000" || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 2 {
			t.Errorf("after a renewal: ttl-ms %q, leaseDurationSeconds %v, want 2000 and 2", got, l.Spec.LeaseDurationSeconds)
		}
	})
}

// blackhole accepts connections and never answers; it closes them when
// the test ends.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// closedAddr returns an address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// testUnreachable: an API server refusing connections, one that never
// answers, one whose certificate is not trusted, a token it does not
// accept: Open fails within its context, saying so.
func testUnreachable(t *testing.T, srv *kubetest.Server) {
	other, err := certs.NewCA("not the API server's")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  func() *rest.Config
		want []string
		is   error
	}{
		{"Refused", func() *rest.Config { return srv.ConfigVia(closedAddr(t), srv.Admin()) }, []string{"connection refused"}, nil},
		{"NoAnswer", func() *rest.Config { return srv.ConfigVia(blackhole(t), srv.Admin()) }, []string{"no answer from the API server"}, context.DeadlineExceeded},
		{"WrongCA", func() *rest.Config {
			cfg := srv.Admin()
			cfg.CAData = other.CertPEM
			return cfg
		}, []string{"certificate signed by unknown authority"}, nil},
		{"BadToken", func() *rest.Config {
			cfg := srv.Admin()
			cfg.BearerToken = "not-a-token"
			return cfg
		}, []string{"did not accept the credentials"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := kubernetes.New(c.cfg(), kubernetes.WithNamespace("default"))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			const within = 3 * time.Second
			ctx, cancel := context.WithTimeout(t.Context(), within)
			defer cancel()
			err = await.For(t, await.Returned(func() error {
				s, err := b.Open(ctx, backend.SessionOptions{TTL: time.Second})
				if err == nil {
					s.Close(context.Background())
					return errors.New("no error")
				}
				return err
			}), within+30*time.Second, "Open to return after its context ended")
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("Open: %v, want %v", err, c.is)
			}
			for _, w := range append([]string{"simba/kubernetes: opening a session"}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open: %v\nwant an error saying %s", err, w)
				}
			}
			t.Logf("Open: %v", err)
		})
	}
}
