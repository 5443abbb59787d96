package kubetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/simba-go/simba/backend/kit/backoff"
)

// grantTimeout bounds the wait for the authorizer to follow a new binding.
const grantTimeout = 30 * time.Second

// ParseRole decodes a manifest of one rbac.authorization.k8s.io/v1 Role
// (YAML or JSON), such as the constant kubernetes.Role.
func ParseRole(manifest string) (*rbacv1.Role, error) {
	obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(manifest), nil, nil)
	if err != nil {
		return nil, fmt.Errorf("kubetest: decoding the Role: %w", err)
	}
	role, ok := obj.(*rbacv1.Role)
	if !ok {
		return nil, fmt.Errorf("kubetest: the manifest is a %v, want a rbac.authorization.k8s.io/v1 Role", gvk)
	}
	return role, nil
}

// WithoutVerb returns a copy of role with verb removed from every rule
// (and the rules left with no verb dropped).
func WithoutVerb(role *rbacv1.Role, verb string) *rbacv1.Role {
	r := role.DeepCopy()
	r.Rules = r.Rules[:0]
	for _, rule := range role.DeepCopy().Rules {
		rule.Verbs = slices.DeleteFunc(rule.Verbs, func(v string) bool { return v == verb })
		if len(rule.Verbs) > 0 {
			r.Rules = append(r.Rules, rule)
		}
	}
	return r
}

// Grant creates, as the administrator, role (its namespace set to ns, its
// name kept) and a RoleBinding of it to the user of [Server.User] named
// user, and waits until the server's authorizer allows the user every verb
// of every rule (RBAC follows new bindings through a watch, a moment
// later). It fails the test when any of that fails. The objects go with
// the namespace.
func (s *Server) Grant(t testing.TB, ns, user string, role *rbacv1.Role) {
	t.Helper()
	c, done, err := s.adminClient()
	if err != nil {
		t.Fatalf("kubetest: Grant: %v", err)
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), grantTimeout)
	defer cancel()
	r := role.DeepCopy()
	r.Namespace, r.ResourceVersion, r.UID = ns, "", ""
	if r.Name == "" {
		t.Fatalf("kubetest: Grant: the Role has no name")
	}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kubetest: Grant: creating Role %s/%s: %v", ns, r.Name, err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name + "-" + bindingSuffix(user), Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kubetest: Grant: creating RoleBinding %s/%s: %v", ns, binding.Name, err)
	}
	for _, rule := range r.Rules {
		for _, group := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, verb := range rule.Verbs {
					attrs := authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: res}
					if err := awaitAllowed(ctx, c, user, attrs); err != nil {
						t.Fatalf("kubetest: Grant: %v", err)
					}
				}
			}
		}
	}
}

// Allowed asks the server, as the administrator, whether user may do
// verb on resource of API group in namespace ns (a SubjectAccessReview).
func (s *Server) Allowed(t testing.TB, ns, user, verb, group, resource string) bool {
	t.Helper()
	c, done, err := s.adminClient()
	if err != nil {
		t.Fatalf("kubetest: Allowed: %v", err)
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	ok, err := allowed(ctx, c, user, authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource})
	if err != nil {
		t.Fatalf("kubetest: Allowed: %v", err)
	}
	return ok
}

func allowed(ctx context.Context, c k8s.Interface, user string, attrs authzv1.ResourceAttributes) (bool, error) {
	rev, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("asking whether %s may %s %s: %w", user, attrs.Verb, attrs.Resource, err)
	}
	return rev.Status.Allowed, nil
}

// awaitAllowed waits, within ctx, until the authorizer allows user attrs.
func awaitAllowed(ctx context.Context, c k8s.Interface, user string, attrs authzv1.ResourceAttributes) error {
	for n := 0; ; n++ {
		ok, err := allowed(ctx, c, user, attrs)
		if ok {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("not allowed yet")
		}
		if !backoff.Sleep(ctx, backoff.Step(n, 20*time.Millisecond, 250*time.Millisecond)) {
			return fmt.Errorf("user %s may still not %s %s.%s in namespace %s after %v: %v", user, attrs.Verb, attrs.Resource, attrs.Group, attrs.Namespace, grantTimeout, err)
		}
	}
}

// bindingSuffix makes a user name (which may hold ':') part of an object
// name.
func bindingSuffix(user string) string {
	return strings.Trim(notLabel.ReplaceAllString(strings.ToLower(user), "-"), "-")
}

// adminClient returns a clientset of the administrator and a function
// closing its connections.
func (s *Server) adminClient() (k8s.Interface, func(), error) {
	cfg := s.Admin()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	c, err := k8s.NewForConfigAndClient(cfg, hc)
	if err != nil {
		hc.CloseIdleConnections()
		return nil, nil, err
	}
	return c, hc.CloseIdleConnections, nil
}
