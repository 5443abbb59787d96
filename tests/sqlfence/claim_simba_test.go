package sqlfence_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/fence"
	"github.com/simba-go/simba/internal/await"
	"github.com/simba-go/simba/internal/fencetest"
)

// TestWithClaimKeepsEveryUpdate runs the README's pattern end to end: two
// simba clients lead in turn; each term loads a counter from SQLite and
// increments it in fenced transactions. The first leader is frozen inside a
// transaction that has passed its check and is cut off from the backend,
// so its term ends and the other client's begins; then it wakes up and
// commits. Without simba.WithClaim the new leader has loaded the counter
// before that commit and overwrites it: an update is lost. With it, the
// claim waits for the commit, and every accepted increment is counted.
func TestWithClaimKeepsEveryUpdate(t *testing.T) {
	for _, claimed := range []bool{false, true} {
		name := map[bool]string{false: "without claim", true: "with claim"}[claimed]
		t.Run(name, func(t *testing.T) {
			lost := claimRun(t, claimed)
			switch {
			case !claimed && lost == 0:
				t.Errorf("without the claim no update was lost: the test does not reproduce the window")
			case claimed && lost != 0:
				t.Errorf("with the claim: %d updates lost", lost)
			}
		})
	}
}

func claimRun(t *testing.T, claimed bool) (lost int) {
	ctx := fencetest.Ctx(t)
	d := sqliteDB(t, "immediate")
	counter := newSQLCounter(t, d)
	server := memory.New()
	defer server.Close()

	var mu sync.Mutex
	accepted := 0
	frozen := make(chan struct{})     // closed when the first leader froze
	wake := make(chan struct{})       // closed to wake it
	var woken sync.Once               // the test wakes it, or its clean-up does
	starting := make(chan string, 16) // a term began its claim, or (without one) has loaded
	var freeze sync.Once

	task := func(node string) func(context.Context, *simba.Term) error {
		return func(ctx context.Context, term *simba.Term) error {
			v, err := counter.Load(ctx)
			if err != nil {
				return err
			}
			if !claimed {
				starting <- node // it has loaded its state
			}
			for i := 0; term.Valid(); i++ {
				land, err := counter.Begin(context.WithoutCancel(ctx), term.Token(), v+1)
				if err != nil {
					return err
				}
				if node == "a" && i == 3 {
					freeze.Do(func() { close(frozen); <-wake }) // checked, then frozen
				}
				ok, err := land()
				if err != nil {
					return err
				}
				if !ok {
					return fence.ErrStale
				}
				mu.Lock()
				accepted++
				mu.Unlock()
				v++
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(20 * time.Millisecond):
				}
			}
			return nil
		}
	}
	start := func(node string) *simba.Client {
		var opts []simba.TaskOption
		if claimed {
			opts = append(opts, simba.WithClaim(func(ctx context.Context, term *simba.Term) error {
				starting <- node
				return counter.Claim(ctx, term.Token())
			}))
		}
		c, err := simba.New(server.Node(node), simba.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			woken.Do(func() { close(wake) }) // a frozen task would hold Close up
			c.Close()
		})
		if _, err := c.Election("counter").RunWhileLeader(task(node), opts...); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := start("a")
	if got := await.For(t, starting, fencetest.OpTimeout, "a's first term did not begin"); got != "a" {
		t.Fatalf("%s led first", got)
	}
	z := start("z")
	select {
	case <-frozen:
	case <-ctx.Done():
		t.Fatal("a never froze in its transaction")
	}
	server.Node("a").Partition() // a's renewals stop: its term ends, z's begins
	if got := await.For(t, starting, fencetest.OpTimeout, "z's term did not begin"); got != "z" {
		t.Fatalf("%s led second", got)
	}
	if claimed {
		time.Sleep(50 * time.Millisecond) // let the claim wait on a's lock: it cannot pass it
	}
	woken.Do(func() { close(wake) }) // a commits the write it had begun
	time.Sleep(300 * time.Millisecond)
	server.Node("a").Heal()
	z.Close()
	a.Close()
	final, err := counter.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d increments accepted, counter %d", accepted, final)
	return accepted - final
}
