package zookeeper_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/backendtest"
	"github.com/simba-go/simba/backend/zookeeper"
	"github.com/simba-go/simba/internal/zktest"
)

// TestConformance runs the backend conformance suite on the shared server,
// each case under a root of its own. The test server grants session
// timeouts from 400ms to 4s; the suite asks for 1s.
func TestConformance(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return newBackend(t)
	}, backendtest.WithTTL(time.Second), backendtest.WithMalformed(zkMalformer), backendtest.WithFingerprint(zkFingerprint))
}

// zkFingerprint describes the tree under the backend's root: every znode
// with its stat (zxids, versions, owner) and data.
func zkFingerprint(t *testing.T, b backend.Backend) string {
	nodes, err := zktest.Snapshot(zktest.Addr(t), b.(*zookeeper.Backend).Root())
	if err != nil {
		t.Fatalf("fingerprint: reading the tree: %v", err)
	}
	var sb strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&sb, "%s %+v %q; ", n.Path, n.Stat, n.Data)
	}
	return sb.String()
}

// zkMalformer plants what another ZooKeeper client could write under the
// backend's root: a record leaf whose data is too short for the token, and
// a member znode whose data is not a member record (ephemeral, of the
// planting connection's session, which ends with the test).
var zkMalformer = backendtest.Malformer{
	SpoilRecord: func(t *testing.T, b backend.Backend, key string) {
		c := zktest.Connect(t, zktest.Addr(t))
		if _, err := c.Set(b.(*zookeeper.Backend).Root()+"/rec/"+key+"/=", []byte("bad"), -1); err != nil {
			t.Fatalf("spoiling record %q: %v", key, err)
		}
	},
	PlantMember: func(t *testing.T, b backend.Backend, group string) string {
		c := zktest.Connect(t, zktest.Addr(t))
		const session = "ffffffffffffffff"
		path := b.(*zookeeper.Backend).Root() + "/group/" + group + "/" + session
		if _, err := c.Create(path, []byte("bad"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("planting member znode %s: %v", path, err)
		}
		return session
	},
}
