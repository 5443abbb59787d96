package etcd_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/etcdtest"
)

// TestConformance runs the conformance suite against one etcd
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
	}, backendtest.WithTTL(2*time.Second), backendtest.WithMalformed(etcdMalformer), backendtest.WithFingerprint(etcdFingerprint))
}

// etcdFingerprint describes every key under the backend's prefix with its
// revisions and lease: any write under the prefix changes it. (The case
// runs beside the other cases' sessions on one server, whose lease expiries
// move the store's revision; admin's tests compare that on a server of
// their own.)
func etcdFingerprint(t *testing.T, b backend.Backend) string {
	eb := b.(*etcd.Backend)
	resp, err := eb.Client().Get(t.Context(), eb.Prefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("fingerprint: reading %s: %v", eb.Prefix(), err)
	}
	var sb strings.Builder
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&sb, "%s@%d/%d/%d lease %x; ", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return sb.String()
}

// etcdMalformer plants what another etcd client could put under the
// backend's prefix: a record value too short for the token, and a member
// key whose value is not JSON (not bound to any lease, so deleted at the
// end of the test).
var etcdMalformer = backendtest.Malformer{
	SpoilRecord: func(t *testing.T, b backend.Backend, key string) {
		eb := b.(*etcd.Backend)
		if _, err := eb.Client().Put(t.Context(), eb.Prefix()+"rec/"+key, "bad"); err != nil {
			t.Fatalf("spoiling record %q: %v", key, err)
		}
	},
	PlantMember: func(t *testing.T, b backend.Backend, group string) string {
		eb := b.(*etcd.Backend)
		const session = "ffffffffffffffff"
		key := eb.Prefix() + "group/" + group + "/" + session
		if _, err := eb.Client().Put(t.Context(), key, "bad"); err != nil {
			t.Fatalf("planting member key %q: %v", key, err)
		}
		t.Cleanup(func() { eb.Client().Delete(context.Background(), key) })
		return session
	},
}
