package jobs_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/backend/etcd"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/internal/etcdtest"
)

// A cluster gives each node of a test its own backend connection, all on one
// server.
type cluster struct {
	name string
	// virtual says the backend runs in a synctest bubble (virtual time);
	// otherwise the test runs in real time.
	virtual bool
	// start starts the server and returns a function that connects a
	// node to it. Everything is closed when the test ends.
	start func(t *testing.T) (connect func(node string) backend.Backend)
}

var clusters = []cluster{
	{name: "memory", virtual: true, start: func(t *testing.T) func(string) backend.Backend {
		srv := memory.New()
		t.Cleanup(func() { srv.Close() })
		return func(node string) backend.Backend { return srv.Node(node) }
	}},
	{name: "etcd", start: func(t *testing.T) func(string) backend.Backend {
		if testing.Short() {
			t.Skip("starts an etcd server and runs for several seconds")
		}
		srv := etcdtest.Start(t)
		prefix := "/" + strings.ReplaceAll(t.Name(), "/", ".") + "/"
		return func(string) backend.Backend {
			b, err := etcd.New(srv.Endpoints(), etcd.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}
	}},
}

// Two clients running the same configuration: each job runs on one of them at
// a time, and when one stops, the other takes every job over.
func TestTwoClientsShareTheJobs(t *testing.T) {
	for _, c := range clusters {
		t.Run(c.name, func(t *testing.T) {
			if c.virtual {
				synctest.Test(t, func(t *testing.T) { testTwoClientsShareTheJobs(t, c.start(t)) })
			} else {
				testTwoClientsShareTheJobs(t, c.start(t))
			}
		})
	}
}

func testTwoClientsShareTheJobs(t *testing.T, connect func(node string) backend.Backend) {
	rec := newRecorder(50 * time.Millisecond)
	cfg := loadTestConfig(t)
	a := startRunner(t, "a", connect("a"), rec, cfg)
	b := startRunner(t, "b", connect("b"), rec, cfg)

	// Both run: every job runs, each lease on one node only once the
	// group's view has settled.
	time.Sleep(2 * time.Second)
	settled := time.Now()
	time.Sleep(2 * time.Second)
	ran := rec.ranSince(settled)
	owners := simba.PartitionAssignment("billing", []string{"a", "b"}, 4, simba.Rendezvous)
	for p, owner := range owners {
		lease := fmt.Sprintf("billing.%d", p)
		if len(ran[lease]) != 1 || ran[lease][0] != owner {
			t.Errorf("%s ran on %v while both ran, want on its owner %s", lease, ran[lease], owner)
		}
	}
	if len(ran["report"]) != 1 {
		t.Errorf("report ran on %v while both ran, want on one", ran["report"])
	}

	// a stops: b takes every job over, without waiting for a's TTL.
	a.stop(t)
	if err := a.client.Close(); err != nil {
		t.Error(err)
	}
	time.Sleep(testTTL / 2)
	after := time.Now()
	time.Sleep(time.Second)
	ran = rec.ranSince(after)
	for _, lease := range leases {
		if len(ran[lease]) != 1 || ran[lease][0] != "b" {
			t.Errorf("%s ran on %v after a stopped, want on b", lease, ran[lease])
		}
	}
	b.stop(t)
	if err := b.client.Close(); err != nil {
		t.Error(err)
	}
	rec.checkOneAtATime(t)
}
