package jobs_test

import (
	"testing"
	"testing/synctest"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/jobstest"
)

// Two clients running the same configuration: each job runs on one of them at
// a time, and when one stops, the other takes every job over. Here on the
// memory backend, in virtual time; the tests module runs it on etcd
// (tests/jobs).
func TestTwoClientsShareTheJobs(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := memory.New()
			t.Cleanup(func() { srv.Close() })
			jobstest.TwoClientsShareTheJobs(t, func(node string) backend.Backend { return srv.Node(node) })
		})
	})
}
