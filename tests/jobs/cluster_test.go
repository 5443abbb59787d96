package jobs_test

import (
	"strings"
	"testing"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/internal/etcdtest"
	"github.com/simba-go/simba/internal/jobstest"
)

// Two clients running the same configuration: each job runs on one of them at
// a time, and when one stops, the other takes every job over. Here on a real
// etcd, in real time, each node with its own connection; jobs' own tests run
// it on the memory backend.
func TestTwoClientsShareTheJobs(t *testing.T) {
	t.Run("etcd", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts an etcd server and runs for several seconds")
		}
		srv := etcdtest.Start(t)
		prefix := "/" + strings.ReplaceAll(t.Name(), "/", ".") + "/"
		jobstest.TwoClientsShareTheJobs(t, func(string) backend.Backend {
			b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		})
	})
}
