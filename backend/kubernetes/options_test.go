package kubernetes_test

import (
	"log/slog"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/simba-go/simba/backend/kubernetes"
)

// TestOptionsRefuseBadValues: each option refuses a bad value, and New
// returns its error instead of correcting it (it never contacts the
// server).
func TestOptionsRefuseBadValues(t *testing.T) {
	cfg := &rest.Config{Host: "http://127.0.0.1:1"} // never contacted
	for _, tc := range []struct {
		opt  kubernetes.Option
		want string
	}{
		{kubernetes.WithNamespace(""), `simba/kubernetes: namespace "" is not a valid namespace name`},
		{kubernetes.WithNamespace("Not_A_Namespace"), "is not a valid namespace name"},
		{kubernetes.WithLogger(nil), "simba/kubernetes: WithLogger: nil logger"},
		{nil, "simba/kubernetes: nil option"},
	} {
		b, err := kubernetes.New(cfg, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with a bad option: %v, want an error containing %q", err, tc.want)
		}
		if b != nil {
			b.Close()
		}
	}
	b, err := kubernetes.New(cfg, kubernetes.WithNamespace("ns-1"), kubernetes.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("New with good options: %v", err)
	}
	defer b.Close()
	if b.Namespace() != "ns-1" {
		t.Errorf("namespace %q: the option was not applied", b.Namespace())
	}
}
