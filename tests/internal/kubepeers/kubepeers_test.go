package kubepeers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/kubetest"
	"github.com/simba-go/simba/tests/internal/kubepeers"
)

const (
	leaseDuration = 2 * time.Second
	renewDeadline = 4 * time.Second / 3
	retryPeriod   = 4 * time.Second / 15
	wait          = 20 * time.Second
)

func TestNewRefusesBadConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  kubepeers.Config
		want string
	}{
		{"no client", kubepeers.Config{}, "nil Client"},
		{"fractional lease", kubepeers.Config{Client: &kubernetes.Clientset{}, Identity: "a", LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}, "whole seconds"},
		{"renew deadline too long", kubepeers.Config{Client: &kubernetes.Clientset{}, Identity: "a", LeaseDuration: time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}, "leaseDuration must be greater"},
	} {
		if _, err := kubepeers.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestHandOff: the leader's Run ctx ends, it releases the Lease
// (ReleaseOnCancel), the waiter leads at its next try, and Run returns
// only once OnStartedLeading has.
func TestHandOff(t *testing.T) {
	srv := kubetest.Start(t)
	ns := srv.Namespace(t)
	leads := make(chan *kubepeers.Leadership, 2)
	admin, err := kubernetes.NewForConfig(srv.Admin())
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		cancel context.CancelFunc
		ran    <-chan error
	}
	start := func(id string) run {
		cs, err := kubernetes.NewForConfig(srv.Admin())
		if err != nil {
			t.Fatal(err)
		}
		e, err := kubepeers.New(kubepeers.Config{
			Client: cs, Namespace: ns, Name: "x", Identity: id,
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
			ReleaseOnCancel: true, OnLead: func(l *kubepeers.Leadership) { leads <- l },
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		return run{cancel, await.Returned(func() error { e.Run(ctx); return nil })}
	}
	a := start("a")
	first := await.For(t, leads, wait, "no first leader")
	b := start("b")
	defer func() { b.cancel(); await.For(t, b.ran, wait, "b: Run did not return") }()
	a.cancel()
	await.For(t, a.ran, wait, "a: Run did not return after its ctx ended")
	if first.End().IsZero() {
		t.Error("a's Run returned before its leadership ended")
	}
	// The release cleared the holder (b may have taken it since).
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	l, err := admin.CoordinationV1().Leases(ns).Get(ctx, "x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h == "a" {
		t.Errorf("the Lease still names a as its holder after a's Run returned with ReleaseOnCancel")
	}
	second := await.For(t, leads, wait, "b did not lead after a released")
	if second.Start.Before(first.End()) {
		t.Errorf("b led at %v, before a stopped at %v", second.Start, first.End())
	}
}
