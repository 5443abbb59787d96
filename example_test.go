package simba_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"time"

	"github.com/simba-go/simba"
	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
)

// A leader task: it runs on one node at a time and passes its term's token
// with every write, so a deposed leader's writes can be rejected.
func Example() {
	b := memory.New()
	defer b.Close()
	client, err := simba.New(b)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	running := make(chan struct{})
	task, err := client.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		fmt.Printf("leading %s with token %d\n", term.Name(), term.Token())
		close(running)
		<-ctx.Done() // hold the term until it ends
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	<-running
	task.Stop()
	<-task.Done() // hand off: the task exits, then the lease is released
	fmt.Println("handed off")
	// Output:
	// leading ingest with token 1
	// handed off
}

// A schedule runs within each term: here every 10ms, three times.
func ExampleElection_Schedule() {
	b := memory.New()
	defer b.Close()
	client, _ := simba.New(b)
	defer client.Close()

	runs := make(chan uint64, 3)
	task, err := client.Election("report").Schedule(simba.FixedRate(10*time.Millisecond),
		func(ctx context.Context, term *simba.Term) error {
			select {
			case runs <- term.Token():
			default:
			}
			return nil
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		fmt.Println("report run with token", <-runs)
	}
	task.Close()
	// Output:
	// report run with token 1
	// report run with token 1
	// report run with token 1
}

// EnsureValid refuses to begin a step that would outlive the term.
func ExampleTerm_EnsureValid() {
	b := memory.New()
	defer b.Close()
	client, _ := simba.New(b, simba.WithTTL(time.Second))
	defer client.Close()

	done := make(chan struct{})
	task, _ := client.Election("export").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		defer close(done)
		if err := term.EnsureValid(time.Hour); errors.Is(err, simba.ErrTermExpired) {
			fmt.Println("not starting an hour-long step on a one-second lease")
		}
		fmt.Println("a short step may start:", term.EnsureValid(time.Millisecond) == nil)
		return nil
	})
	<-done
	task.Close()
	// Output:
	// not starting an hour-long step on a one-second lease
	// a short step may start: true
}

// Invalid input is an error, never a panic.
func ExampleCron() {
	b := memory.New()
	defer b.Close()
	client, _ := simba.New(b)
	defer client.Close()

	_, err := client.Election("nightly").Schedule(simba.Cron("0 3 * *"), func(context.Context, *simba.Term) error { return nil })
	fmt.Println(errors.Is(err, simba.ErrInvalidSchedule))
	// Output: true
}

// Shutdown hands every task off and ends the session, waiting at most until
// its ctx ends: here the task cleans up and returns at once.
func ExampleClient_Shutdown() {
	b := memory.New()
	defer b.Close()
	client, err := simba.New(b)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close() // a no-op once Shutdown has returned nil

	running := make(chan struct{})
	_, err = client.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		close(running)
		<-ctx.Done()
		fmt.Println("cleaning up")
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	<-running
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Shutdown(ctx); err != nil {
		fmt.Println(err) // what still ran; the closing goes on in the background
		return
	}
	fmt.Println("handed off, session ended")
	// Output:
	// cleaning up
	// handed off, session ended
}

// A task function that ignores its cancellation makes Shutdown return its
// ctx's error, saying what still runs. The lease is kept until the function
// returns or its term's deadline passes, whichever comes first, however
// early Shutdown stops waiting.
func ExampleLeaderTask_Shutdown() {
	b := memory.New()
	defer b.Close()
	client, _ := simba.New(b)
	defer client.Close()

	running, release := make(chan struct{}), make(chan struct{})
	task, _ := client.Election("export").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		close(running)
		<-release // ignores ctx: a step that cannot be interrupted
		return nil
	})
	<-running
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := task.Shutdown(ctx)
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	fmt.Println(err)

	close(release) // the step ends
	fmt.Println(task.Shutdown(context.Background()))
	// Output:
	// true
	// simba: shutdown of election "export" stopped waiting with its hand-off not complete (the lease not released yet) and 1 task function running (term 1 of election "export"); the hand-off goes on in the background: context deadline exceeded
	// <nil>
}

// New starts a client on a backend: it opens its session in the background
// (Ready waits for it), and Close hands every task off, then ends the
// session. A bad option is an error, never a panic.
func ExampleNew() {
	b := memory.New()
	defer b.Close()

	_, err := simba.New(b, simba.WithTTL(time.Millisecond))
	fmt.Println(errors.Is(err, simba.ErrInvalidArgument))

	client, err := simba.New(b, simba.WithTTL(2*time.Second), simba.WithMemberID("node-a"))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Ready(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("session live:", client.SessionID() != "")
	fmt.Println(client.Close())
	fmt.Println("session after Close:", client.SessionID() == "")
	// Output:
	// true
	// session live: true
	// <nil>
	// session after Close: true
}

// RunWhileLeader runs the function once per term won. WithClaim runs first
// in every term, before the function reads anything: here it stands for a
// fence's Claim (package fence), which raises the resource's token to the
// term's so that no write of a deposed leader lands after the new leader's
// reads.
func ExampleElection_RunWhileLeader() {
	b := memory.New()
	defer b.Close()
	client, err := simba.New(b)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	var claimed uint64 // the resource's highest token
	running := make(chan struct{})
	task, err := client.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		fmt.Printf("term %d runs; the resource is claimed with token %d\n", term.Token(), claimed)
		close(running)
		<-ctx.Done() // work until the term ends
		return nil
	}, simba.WithClaim(func(ctx context.Context, term *simba.Term) error {
		claimed = term.Token() // f.Claim(ctx, db, "ingest", term.Token())
		return nil
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	<-running
	task.Stop()
	<-task.Done() // the function exits, then the lease is released
	_, _, held := b.Holder("ingest")
	fmt.Println("lease held after the hand-off:", held)
	// Output:
	// term 1 runs; the resource is claimed with token 1
	// lease held after the hand-off: false
}

// A partition group: every partition is an election of its own, run by one
// member at a time. On one client, all of them run here; members that join
// take their share over.
func ExampleGroup_Schedule() {
	b := memory.New()
	defer b.Close()
	client, err := simba.New(b, simba.WithMemberID("node-a"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	ran := make(chan int, 4)
	task, err := client.Group("billing", 4).Schedule(simba.FixedDelay(time.Hour),
		func(ctx context.Context, term *simba.Term, partition int) error {
			ran <- partition // bill the partition, passing term.Token() with every write
			return nil
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	seen := make([]bool, 4)
	for range 4 {
		seen[<-ran] = true
	}
	fmt.Println("every partition ran once:", !slices.Contains(seen, false))
	fmt.Println("partitions held:", task.Partitions())
	task.Stop()
	<-task.Done() // every partition hands off
	// Output:
	// every partition ran once: true
	// partitions held: [0 1 2 3]
}

// RunWhileLeader on a group runs the function once per term of every
// partition this member holds, cancelled when that partition's term ends.
func ExampleGroup_RunWhileLeader() {
	b := memory.New()
	defer b.Close()
	client, err := simba.New(b)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	started := make(chan string, 2)
	task, err := client.Group("orders", 2).RunWhileLeader(func(ctx context.Context, term *simba.Term, partition int) error {
		started <- term.Name() // the partition's lease: "orders.0", "orders.1"
		<-ctx.Done()           // consume the partition until its term ends
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	leases := []string{<-started, <-started}
	slices.Sort(leases)
	fmt.Println(leases)
	task.Stop()
	<-task.Done()
	fmt.Println("partitions after Stop:", len(task.Partitions()))
	// Output:
	// [orders.0 orders.1]
	// partitions after Stop: 0
}

// exitStatus is a command's exit status as an error: its method ExitCode
// is what the run history records (see "Exit codes" in the package doc).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitStatus) ExitCode() int { return int(e) }

// A task that runs a command returns how it ended: the error of os/exec
// for a failure (its exit status is recorded), an error whose ExitCode is 0
// for a success, so that the run history records exit 0 too.
func Example_exitCode() {
	b := memory.New()
	defer b.Close()
	client, _ := simba.New(b)
	defer client.Close()

	ran := make(chan struct{})
	task, err := client.Election("backup").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
		defer close(ran)
		if err := exec.CommandContext(ctx, "sh", "-c", "exit 0").Run(); err != nil {
			return err // an *exec.ExitError, with its exit status
		}
		return exitStatus(0)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	<-ran
	task.Stop()
	<-task.Done() // the hand-off writes the last records

	adm, err := admin.Open(context.Background(), b.Node("admin"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer adm.Close()
	runs, err := adm.History(context.Background(), "backup")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(runs[0].Result, "with exit status", *runs[0].ExitCode)
	// Output:
	// succeeded with exit status 0
}

// A schedule retries a failed run within its term, after a backoff; the
// run's ctx says which attempt it is.
func ExampleSchedule_WithRetry() {
	b := memory.New()
	defer b.Close()
	client, _ := simba.New(b, simba.WithLogger(slog.New(slog.DiscardHandler)))
	defer client.Close()

	done := make(chan struct{})
	s := simba.FixedRate(time.Hour).WithRetry(simba.RetryPolicy{Attempts: 3, Backoff: 10 * time.Millisecond})
	task, err := client.Election("report").Schedule(s, func(ctx context.Context, term *simba.Term) error {
		info, _ := simba.RunInfoFrom(ctx)
		if info.Attempt < 3 {
			fmt.Println("attempt", info.Attempt, "failed")
			return errors.New("database unavailable")
		}
		fmt.Println("attempt", info.Attempt, "succeeded")
		close(done)
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	<-done
	task.Close()
	// Output:
	// attempt 1 failed
	// attempt 2 failed
	// attempt 3 succeeded
}
