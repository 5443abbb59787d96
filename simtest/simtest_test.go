package simtest_test

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/simtest"
)

// mistake is a bug planted in counterTask.
type mistake int

const (
	correct         mistake = iota
	readBeforeClaim         // reads before its first fenced write
	noToken                 // writes without its token, as a write that bypasses the fence does
	deaf                    // drops its ctx: writes until the fence refuses it
)

// counterTask is a leader task that counts, the way most leader tasks keep
// state: it claims the counter, loads the count, then adds to it in memory
// and writes it back every 100ms with its token; m plants a mistake.
func counterTask(n *simtest.Node, m mistake) func(context.Context, *simba.Term) error {
	hits := n.Counter("hits")
	return func(ctx context.Context, term *simba.Term) error {
		token := term.Token()
		switch m {
		case noToken:
			token = 0
		case deaf:
			ctx = context.Background()
		}
		if m != readBeforeClaim {
			if err := hits.Claim(ctx, term.Token()); err != nil {
				return err
			}
		}
		v, err := hits.Get(ctx)
		if err != nil {
			return err
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(100 * time.Millisecond):
			}
			v++
			if err := hits.Set(ctx, token, v); err != nil {
				return err // stale: a later term has written
			}
		}
	}
}

func startCounter(m mistake) func(c *simtest.Cluster) {
	return func(c *simtest.Cluster) {
		c.Start(func(n *simtest.Node) error {
			_, err := n.Client().Election("hits").RunWhileLeader(counterTask(n, m))
			return err
		})
	}
}

// firstFailure runs seeds from 0 until one fails, and returns its result.
func firstFailure(t *testing.T, cfg simtest.Config, seeds int, setup func(c *simtest.Cluster)) *simtest.Result {
	t.Helper()
	for seed := range uint64(seeds) {
		if r := simtest.Simulate(t, cfg, seed, setup); r.Failed() {
			t.Logf("caught at seed %d:\n%s", seed, r.Report())
			return r
		}
	}
	return nil
}

func requireCaught(t *testing.T, r *simtest.Result, seeds int, want string) {
	t.Helper()
	if r == nil {
		t.Fatalf("the wrong task went unnoticed in %d seeds", seeds)
	}
	rep := r.Report()
	for _, s := range []string{want, "schedule (", "timeline", "seed "} {
		if !strings.Contains(rep, s) {
			t.Errorf("the report lacks %q:\n%s", s, rep)
		}
	}
}

func TestCorrectCounterPasses(t *testing.T) {
	simtest.Run(t, simtest.Config{Seeds: 20}, startCounter(correct))
}

func TestReadBeforeClaimIsCaught(t *testing.T) {
	const seeds = 100
	r := firstFailure(t, simtest.Config{}, seeds, startCounter(readBeforeClaim))
	requireCaught(t, r, seeds, "lost-update:")
}

func TestWriteWithoutTokenIsCaught(t *testing.T) {
	const seeds = 100
	r := firstFailure(t, simtest.Config{}, seeds, startCounter(noToken))
	requireCaught(t, r, seeds, "I3:")
}

func TestIgnoringCtxIsCaught(t *testing.T) {
	const seeds = 20
	r := firstFailure(t, simtest.Config{}, seeds, startCounter(deaf))
	requireCaught(t, r, seeds, "the task ignores its ctx")
}

// The negative control: the correct task on unfenced resources loses
// updates under the same schedules, which is what its token buys.
func TestUnfencedLosesUpdates(t *testing.T) {
	const seeds = 100
	r := firstFailure(t, simtest.Config{Unfenced: true}, seeds, startCounter(correct))
	if r == nil {
		t.Fatalf("the correct task on an unfenced counter lost nothing in %d seeds: the schedules are too weak", seeds)
	}
	var found bool
	for _, err := range r.Violations {
		if strings.HasPrefix(err.Error(), "lost-update:") || strings.HasPrefix(err.Error(), "I3:") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the unfenced run failed, but not with a lost update or a stale write: %v", r.Violations)
	}
}

var thousand = flag.Bool("simtest.thousand", false, "run TestThousandSeeds: the correct counter task over 1,000 seeds, timed")

// TestThousandSeeds measures how fast seeds run: go test -run
// TestThousandSeeds -simtest.thousand -v ./simtest
func TestThousandSeeds(t *testing.T) {
	if !*thousand {
		t.Skip("a measurement: run it with -simtest.thousand")
	}
	start := time.Now()
	simtest.Run(t, simtest.Config{Seeds: 1000}, startCounter(correct))
	el := time.Since(start)
	t.Logf("1,000 seeds of one virtual minute each in %v: %.0f seeds/s", el.Round(time.Millisecond), 1000/el.Seconds())
}
