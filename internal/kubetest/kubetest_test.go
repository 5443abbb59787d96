package kubetest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/simba-go/simba/backend/kit/backoff"
	"github.com/simba-go/simba/internal/faultproxy"
	"github.com/simba-go/simba/internal/kubetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clientset returns a client of cfg whose connections are closed when the
// test ends.
func clientset(t *testing.T, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatalf("http client: %v", err)
	}
	t.Cleanup(hc.CloseIdleConnections)
	c, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	return c
}

func lease(name, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](10),
		},
	}
}

// within retries f, with backoff, until it returns nil or d passes, and
// returns its last error.
func within(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for n := 0; ; n++ {
		err := f(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (retried for %v)", err, d)
		case <-time.After(backoff.Step(n, 20*time.Millisecond, 500*time.Millisecond)):
		}
	}
}

// TestLeasesRBACAndRestart: the administrator creates, updates and deletes
// a Lease; a user without a role is refused (403), and may once a
// RoleBinding binds it a Role with verbs on leases in the namespace (and
// still not in another, nor on other resources); so may a user named as a
// service account once the Role is bound to that ServiceAccount; a Lease
// and the binding survive a restart of the apiserver.
func TestLeasesRBACAndRestart(t *testing.T) {
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	other := srv.Namespace(t)
	admin := clientset(t, srv.Admin())
	ctx := t.Context()

	// The administrator: create, update, delete.
	leases := admin.CoordinationV1().Leases(ns)
	created, err := leases.Create(ctx, lease("a", "node-1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("admin creating lease a: %v", err)
	}
	created.Spec.HolderIdentity = ptr.To("node-2")
	updated, err := leases.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("admin updating lease a: %v", err)
	}
	if updated.ResourceVersion == created.ResourceVersion {
		t.Fatalf("updating lease a kept its resourceVersion %s", created.ResourceVersion)
	}
	// An update with the old resourceVersion is a conflict: the
	// compare-and-swap the backend relies on.
	if _, err := leases.Update(ctx, created, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("an update of lease a with a stale resourceVersion: want a conflict (409), got %v", err)
	}
	if err := leases.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("admin deleting lease a: %v", err)
	}
	if _, err := leases.Get(ctx, "a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("lease a after its deletion: want not found, got %v", err)
	}

	// A user without a role is refused.
	const user = "simba-elector"
	alice := clientset(t, srv.User(t, user))
	_, err = alice.CoordinationV1().Leases(ns).Create(ctx, lease("b", user), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a user with no role creating a lease: want forbidden (403), got %v", err)
	}
	t.Logf("refused as wanted: %v", err)

	// Bound to a Role with verbs on leases, it may, in that namespace only.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "simba-leases"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"coordination.k8s.io"},
			Resources: []string{"leases"},
			Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		}},
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the role: %v", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "simba-leases"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the role binding: %v", err)
	}
	// The authorizer reads roles from a watch cache: the binding counts a
	// moment after it is stored.
	err = within(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := alice.CoordinationV1().Leases(ns).Create(ctx, lease("b", user), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("the bound user creating a lease: %v", err)
	}
	b, err := alice.CoordinationV1().Leases(ns).Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the bound user reading its lease: %v", err)
	}
	b.Spec.LeaseTransitions = ptr.To[int32](1)
	if _, err := alice.CoordinationV1().Leases(ns).Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the bound user updating its lease: %v", err)
	}
	if _, err := alice.CoordinationV1().Leases(other).Create(ctx, lease("b", user), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the user bound in %s creating a lease in %s: want forbidden (403), got %v", ns, other, err)
	}
	if _, err := alice.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the user bound to leases listing config maps: want forbidden (403), got %v", err)
	}

	// A user named as a service account is bound by a RoleBinding to that
	// ServiceAccount, as a pod's would be.
	sa := clientset(t, srv.User(t, "system:serviceaccount:"+ns+":elector"))
	if _, err := sa.CoordinationV1().Leases(ns).Get(ctx, "b", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the service account with no role reading a lease: want forbidden (403), got %v", err)
	}
	saBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "simba-leases-elector"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "elector", Namespace: ns}},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, saBinding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the service account's role binding: %v", err)
	}
	err = within(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := sa.CoordinationV1().Leases(ns).Get(ctx, "b", metav1.GetOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("the bound service account reading a lease: %v", err)
	}

	// Stop and start: the data are in etcd, which kept running.
	srv.Stop()
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = admin.CoordinationV1().Leases(ns).Get(short, "b", metav1.GetOptions{})
	cancel()
	if err == nil {
		t.Fatal("a request to the stopped apiserver succeeded")
	}
	srv.Start()
	err = within(ctx, 30*time.Second, func(ctx context.Context) error {
		got, err := alice.CoordinationV1().Leases(ns).Get(ctx, "b", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h := ptr.Deref(got.Spec.HolderIdentity, ""); h != user || ptr.Deref(got.Spec.LeaseTransitions, 0) != 1 {
			return fmt.Errorf("lease b after the restart: holder %q, transitions %d", h, ptr.Deref(got.Spec.LeaseTransitions, 0))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the bound user reading its lease after the restart: %v", err)
	}
}

// TestPauseAndProxy: a paused apiserver answers nothing until it resumes;
// a configuration from ConfigVia reaches it through a fault proxy, with
// the same trust and credentials, and a blackholed proxy cuts it off.
func TestPauseAndProxy(t *testing.T) {
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	ctx := t.Context()

	proxy, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	via := clientset(t, srv.ConfigVia(proxy.Addr(), srv.Admin()))
	if _, err := via.CoordinationV1().Leases(ns).Create(ctx, lease("a", "node-1"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a lease through the proxy: %v", err)
	}

	get := func(c *kubernetes.Clientset, d time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		_, err := c.CoordinationV1().Leases(ns).Get(ctx, "a", metav1.GetOptions{})
		return err
	}
	proxy.Blackhole()
	if err := get(via, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request through the blackholed proxy: want the deadline exceeded, got %v", err)
	}
	proxy.Heal()
	if err := within(ctx, 30*time.Second, func(context.Context) error { return get(via, 5*time.Second) }); err != nil {
		t.Fatalf("a request through the healed proxy: %v", err)
	}

	direct := clientset(t, srv.Admin())
	srv.Pause()
	if err := get(direct, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		srv.Resume()
		t.Fatalf("a request to the paused apiserver: want the deadline exceeded, got %v", err)
	}
	srv.Resume()
	if err := within(ctx, 30*time.Second, func(context.Context) error { return get(direct, 5*time.Second) }); err != nil {
		t.Fatalf("a request to the resumed apiserver: %v", err)
	}
}

// TestUnauthenticated: a client that presents no credentials is refused,
// and one that does not trust the server's certificate does not connect.
func TestUnauthenticated(t *testing.T) {
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	anon := rest.CopyConfig(srv.Admin())
	anon.BearerToken = ""
	_, err := clientset(t, anon).CoordinationV1().Leases(ns).List(t.Context(), metav1.ListOptions{})
	var status apierrors.APIStatus
	if !errors.As(err, &status) || (status.Status().Code != http.StatusUnauthorized && status.Status().Code != http.StatusForbidden) {
		t.Fatalf("listing leases with no credentials: want 401 or 403, got %v", err)
	}
	untrusting := rest.CopyConfig(srv.Admin())
	untrusting.TLSClientConfig.CAData = nil
	if _, err := clientset(t, untrusting).CoordinationV1().Leases(ns).List(t.Context(), metav1.ListOptions{}); err == nil {
		t.Fatal("a client that does not trust the server's certificate was served")
	}
}
