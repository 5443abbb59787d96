package console_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/console"
	"github.com/simba-go/simba/internal/consoletest"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/tests/internal/etcdclient"
)

// TestPagesListSkippedRecordsOnEtcd plants bad records in a real etcd,
// beside those of a node on it, some of them past the backend's checks.
func TestPagesListSkippedRecordsOnEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	const prefix = "/console-problems/"
	var backends []*etcd.Backend
	open := func() *etcd.Backend {
		b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix(prefix))
		require.NoError(t, err)
		backends = append(backends, b)
		return b
	}
	defer func() {
		for _, b := range backends {
			b.Close()
		}
	}()
	f := consoletest.NewFleet(t)
	f.Start(open(), "a", e2eTTL)
	defer f.StopAll()
	require.Eventually(t, func() bool {
		_, ok := f.Holder("digest")
		return ok && len(f.RunsOf("digest")) > 0
	}, 20*time.Second, 50*time.Millisecond, "a holds digest and ran it")

	consoletest.PlantRecords(t, open(), consoletest.Garbage...)
	cli := etcdclient.New(t, srv)
	for _, kv := range [][2]string{
		{"rec/status/bad key", "\x00\x00\x00\x00\x00\x00\x00\x00{}"},
		{"rec/status/raw", "not valid json at all"}, // 8 bytes of token, then not JSON
	} {
		_, err := cli.Put(t.Context(), prefix+kv[0], kv[1])
		require.NoError(t, err)
	}
	keys := append([]string{"status/bad key"}, consoletest.GarbageKeys...)
	keys = append(keys, "status/raw")

	a, err := admin.Open(t.Context(), open())
	require.NoError(t, err)
	defer a.Close()
	s, err := console.New(a, console.WithReadOnly(true))
	require.NoError(t, err)
	defer s.Close()
	for _, path := range []string{"/elections", "/groups", "/jobs", "/members", "/jobs/digest"} {
		want := keys
		if path == "/jobs" || path == "/jobs/digest" {
			want = append([]string{"history/digest/77"}, keys...)
		}
		consoletest.RequireNotice(t, path, get(s, path), want)
	}
	assert.Contains(t, consoletest.ElectionRows(get(s, "/elections").Body.String()), "digest")
}
