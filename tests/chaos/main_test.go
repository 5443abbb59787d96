package chaos

import (
	"flag"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/plant"
)

var (
	flagDuration = flag.Duration("chaos.duration", 0,
		"length of each fault schedule (default 20s, Kubernetes 10s, or $"+envDuration+"); make chaos runs 5m")
	flagSeed = flag.Uint64("chaos.seed", 0,
		"seed of the fault schedules (default: random, printed; or $"+envSeed+"); replays a run's schedule")
	flagTimeline = flag.Bool("chaos.timeline", false,
		"log the timeline of every run (faults, sessions, terms), not only of failed ones")
)

// Environment variables that stand in for the flags.
const (
	envDuration = "SIMBA_CHAOS_DURATION"
	envSeed     = "SIMBA_CHAOS_SEED"
)

// defaultDuration is the schedule length of the short run that go test ./...
// plays for each backend.
const defaultDuration = 20 * time.Second

// TestMain runs the test binary as a client process when the harness
// started it as one (see child_test.go), and as the tests otherwise. The bug
// named by $SIMBA_PLANT (see internal/plant), if any, is planted in both: the
// client processes inherit the variable, so their clients run with it.
//
// goleak then looks for goroutines left in the test process, but for one
// that etcd leaks: a member stopped (or crashed) while another member asks
// its peer port for /version (every few seconds) serves the request on a
// backend already closed, and the handler panics on the read transaction
// gone (a nil bolt.Tx) while it holds the transaction's lock, which stays
// locked: net/http recovers the panic (etcd discards the peer server's
// error log), and every later /version request to that member waits for
// the lock for ever, after the member's Close. The restart faults stop
// members in the middle of the run, so this happens now and then.
func TestMain(m *testing.M) {
	plant.ForRun() // the client processes inherit $SIMBA_PLANT
	if os.Getenv(envRole) == roleChild {
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp.newPeerHandler.versionHandler.func1"))
}

// scheduleDuration returns the length of w's fault schedule in this run:
// the one given by flag or environment, or else defaultDuration, or the
// shorter one of w's shortRun if it has one (a backend whose run costs
// more, so that the short run of go test ./... keeps to its share).
func scheduleDuration(t *testing.T, w world) time.Duration {
	if *flagDuration > 0 {
		return *flagDuration
	}
	if s := os.Getenv(envDuration); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 5m", envDuration, s)
		}
		return d
	}
	if s, ok := w.(shortRunner); ok {
		return s.shortRun()
	}
	return defaultDuration
}

// scheduleSeed returns the seed given by flag or environment, or a random
// one.
func scheduleSeed(t *testing.T) uint64 {
	if *flagSeed != 0 {
		return *flagSeed
	}
	if s := os.Getenv(envSeed); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", envSeed, s)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())%1_000_000_000 + 1
}
