// Command policies runs a scheduled leader job with the run policies a
// scheduler's users expect (docs/SCHEDULING.md): every attempt has a
// timeout, a failed run is retried once, a start that comes while a run is
// still going is skipped and reported, the failures are notified, and after
// two failed runs in a row the job pauses itself. An operator then fixes
// the downstream service, enables the job and triggers one run with an
// argument, as `simba enable export` and `simba trigger export --arg
// day=2026-12-05` would.
//
//	go run ./examples/policies
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/examples/internal/storylog"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "policies:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	start := time.Now()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "[%4.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	server := memory.New()
	defer server.Close()

	schedule := simba.FixedRate(time.Second).
		WithTimeout(300 * time.Millisecond).
		WithRetry(simba.RetryPolicy{Attempts: 2, Backoff: 200 * time.Millisecond}).
		WithOverlap(simba.OverlapSkip).
		WithPauseAfter(2)
	say("the job %q runs on %s", "export", schedule)

	var healthy atomic.Bool // the downstream service: down until the operator fixes it
	paused := make(chan struct{}, 1)
	triggered := make(chan struct{}, 1)
	events := func(e simba.Event) {
		switch e := e.(type) {
		case simba.Paused:
			say("export paused itself after %d failed runs in a row", e.Failures)
			paused <- struct{}{}
		case simba.Skipped:
			say("%d planned start(s) skipped (%s)", e.Count, e.Reason)
		}
	}
	c, err := simba.New(server.Node("node-1"), simba.WithTTL(5*time.Second),
		simba.WithMemberID("node-1"),
		simba.WithEventHandler(events),
		simba.WithLogger(storylog.New(say, slog.LevelError+1)))
	if err != nil {
		return err
	}
	defer c.Close()

	export := func(ctx context.Context, term *simba.Term) error {
		info, _ := simba.RunInfoFrom(ctx)
		if !healthy.Load() {
			// The downstream hangs: the timeout ends the attempt.
			<-ctx.Done()
			say("attempt %d timed out: %v", info.Attempt, context.Cause(ctx))
			return ctx.Err()
		}
		if info.Source == simba.SourceTrigger {
			say("export ran for day %s (%s, token %d)", info.Args["day"], info.Source, term.Token())
			triggered <- struct{}{}
		}
		return nil
	}
	notify := func(_ context.Context, f simba.RunFailure) {
		say("notified: %s failed after %d attempts (%d failed runs in a row): %v", f.Election, f.Attempts, f.Failures, f.Err)
	}
	if _, err := c.Election("export").Schedule(schedule, export, simba.WithFailureHandler(notify)); err != nil {
		return err
	}
	<-paused
	time.Sleep(2500 * time.Millisecond) // the operator takes a while: planned starts pass

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ops, err := admin.Open(ctx, server, admin.WithOperator("alice"))
	if err != nil {
		return err
	}
	defer ops.Close()
	healthy.Store(true)
	say("the operator fixes the downstream service, enables export and triggers it for one day")
	if err := ops.Enable(ctx, "export", "downstream fixed"); err != nil {
		return err
	}
	if err := ops.TriggerWith(ctx, "export", "re-export the day lost", map[string]string{"day": "2026-12-05"}); err != nil {
		return err
	}
	<-triggered
	if err := c.Close(); err != nil {
		return err
	}
	say("done")
	return nil
}
