package kubetest

import (
	"context"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
)

// tokenTimeout bounds the TokenRequest of ServiceAccount.
const tokenTimeout = 30 * time.Second

// ServiceAccount returns the configuration of the service account name of
// namespace ns, which must exist (created by the test, from a manifest
// say): a bearer token the server issues for it through the TokenRequest
// API (CoreV1().ServiceAccounts(ns).CreateToken, as the kubelet does for a
// pod's projected token), valid for an hour, through [Server.Addr],
// trusting the server's certificate. Unlike [Server.User] it authenticates
// exactly as a pod of that service account: user
// "system:serviceaccount:NS:NAME" in the groups system:serviceaccounts and
// system:serviceaccounts:NS, checked against the account's object on every
// request, so it stops working once the account is deleted. The account
// may do only what its RoleBindings grant.
func (s *Server) ServiceAccount(t testing.TB, ns, name string) *rest.Config {
	t.Helper()
	if ns == "" || name == "" {
		t.Fatalf("kubetest: ServiceAccount: empty namespace (%q) or name (%q)", ns, name)
	}
	cfg := s.Admin()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatalf("kubetest: ServiceAccount: %v", err)
	}
	defer hc.CloseIdleConnections()
	c, err := typedcorev1.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatalf("kubetest: ServiceAccount: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), tokenTimeout)
	defer cancel()
	seconds := int64(time.Hour / time.Second)
	tr, err := c.ServiceAccounts(ns).CreateToken(ctx, name, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: a token for service account %s/%s: %v", ns, name, err)
	}
	if tr.Status.Token == "" {
		t.Fatalf("kubetest: the TokenRequest for service account %s/%s returned no token", ns, name)
	}
	return &rest.Config{
		Host:            "https://" + s.addr,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.serverCA()},
	}
}
