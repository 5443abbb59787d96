package etcd_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/etcdtest"
)

// TestConformance runs the conformance suite against one embedded etcd
// server, each case under a key prefix of its own, on a backend that
// creates its own client. The TTL is 2s rather than etcd's minimum of 1s, so
// that the suite's renewals every TTL/3 keep their sessions alive on a busy
// machine under the race detector.
func TestConformance(t *testing.T) {
	srv := etcdtest.Start(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		prefix := fmt.Sprintf("/%s/", strings.ReplaceAll(t.Name(), "/", "."))
		b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return b
	}, backendtest.WithTTL(2*time.Second))
}
