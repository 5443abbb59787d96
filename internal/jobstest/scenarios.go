package jobstest

import (
	"fmt"
	"testing"
	"time"

	"github.com/simba-go/simba/backend"
	"github.com/simba-go/simba/internal/assign"
)

// TwoClientsShareTheJobs runs two clients, a and b, on the same
// configuration, each on its own connection from connect: each job runs on
// one of them at a time, and when a stops, b takes every job over without
// waiting for a's TTL. It sleeps for seconds: run it in a synctest bubble
// on a backend that can (memory), in real time on one that cannot.
func TwoClientsShareTheJobs(t *testing.T, connect func(node string) backend.Backend) {
	rec := NewRecorder(50 * time.Millisecond)
	cfg := LoadConfig(t)
	a := StartRunner(t, "a", connect("a"), rec, cfg)
	b := StartRunner(t, "b", connect("b"), rec, cfg)

	// Both run: every job runs, each lease on one node only once the
	// group's view has settled.
	time.Sleep(2 * time.Second)
	settled := time.Now()
	time.Sleep(2 * time.Second)
	ran := rec.RanSince(settled)
	owners := assign.Owners("billing", []string{"a", "b"}, 4, assign.Rendezvous)
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
	a.Stop(t)
	if err := a.Client.Close(); err != nil {
		t.Error(err)
	}
	time.Sleep(TTL / 2)
	after := time.Now()
	time.Sleep(time.Second)
	ran = rec.RanSince(after)
	for _, lease := range Leases {
		if len(ran[lease]) != 1 || ran[lease][0] != "b" {
			t.Errorf("%s ran on %v after a stopped, want on b", lease, ran[lease])
		}
	}
	b.Stop(t)
	if err := b.Client.Close(); err != nil {
		t.Error(err)
	}
	rec.CheckOneAtATime(t)
}
