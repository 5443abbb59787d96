// Package simba runs term-fenced leader tasks: work that runs on exactly one
// node at a time, per election or per partition, with a fencing token that
// lets shared resources reject a deposed leader.
//
// A [Client] wraps a pluggable lease backend (etcd, ZooKeeper, PostgreSQL,
// Kubernetes, or the in-memory backend in package backend/memory). Elections
// yield [Term]s whose tokens fence work; work runs on goroutines cancelled
// through context.
//
//	client, err := simba.New(memory.New())
//	if err != nil { ... }
//	defer client.Close()
//
//	task, err := client.Election("ingest").RunWhileLeader(func(ctx context.Context, term *simba.Term) error {
//		for term.Valid() {
//			batch, err := source.Poll(ctx)
//			if err != nil {
//				return err
//			}
//			if err := sink.Write(ctx, batch, term.Token()); err != nil {
//				return err
//			}
//		}
//		return nil
//	})
//
// # Sessions, leases, terms
//
// A client holds one backend session; every election of the client hangs off
// it, so renewal costs one keep-alive per client every third of the TTL, not
// one per election. An election is won by holding the lease named after it; a
// term is one continuous holding of that lease.
//
// A term is valid only while this process knows, from its own monotonic
// clock, that no other session can hold the lease: its deadline is the send
// time of the last renewal the backend confirmed, plus the granted TTL, minus
// a drift margin ([WithDriftMargin]). When the deadline passes without a
// confirmed renewal, every term of the client is revoked at once, with no
// network answer needed, and the client opens a new session. So no two valid
// terms of one lease exist at any instant, even under pauses, partitions and
// backend restarts.
//
// [Term.Token] is strictly greater than the token of every earlier term of
// the same lease. Pass it with every write to a shared resource: a paused
// node may still write after its term ended, and only a resource that checks
// the token can reject it.
//
// # Tasks
//
// [Election.RunWhileLeader] runs a function once per term; [Election.Schedule]
// runs it on a [Schedule] within each term. When a term ends the function's
// ctx is cancelled and [Term.Revoked] is closed. Stopping a task hands off in
// order: first the task, then the lease, so the next leader starts only after
// the previous run exited or its term's time ran out.
//
// A [Schedule] also says what happens to each run: retries within the term
// ([RetryPolicy]), a timeout, an [OverlapPolicy] for starts that come while
// a run is going, a catch-up window for starts missed across a fail-over or
// a disable, and a pause after failed runs in a row; every start that does
// not run is reported ([Skipped]). [WithFailureHandler] is told of every
// failed run, and a run's ctx says why it runs ([RunInfoFrom]).
//
// # Exit codes
//
// A task function that runs a command reports how the command ended by
// returning an error that has, or wraps an error that has, a method
// ExitCode() int, as an [*os/exec.ExitError] does. The run history (the
// simba command, the console) then records the code with the run's result:
//
//   - A code of 0 is a success: the run is one that returned nil in every
//     way ([ResultSucceeded], a nil [WorkCompleted.Err], the schedule goes
//     on), with exit code 0 recorded.
//   - A code above 0 is recorded, and the run is an error like any other:
//     [ResultFailed], or [ResultCancelled] when its term had already ended.
//   - A negative code stands for a command ended by a signal, as
//     [os.ProcessState.ExitCode] reports it: no code is recorded, and the
//     run is an error like any other.
//
// A code of 0 counts only on the error returned or one it wraps through
// Unwrap() error: joined with a failure (errors.Join) it is neither a
// success nor recorded.
//
// A nil return records no exit code: the library cannot tell a command's
// success from that of any other function. As [os/exec.Cmd.Run] returns
// nil for exit status 0, a function reports that status with an error type
// of its own:
//
//	type exitStatus int
//
//	func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
//	func (e exitStatus) ExitCode() int { return int(e) }
//
// # Stopping: one rule for every handle
//
// A [Client], a [LeaderTask], a [GroupTask], a stream.Task and a jobs.Jobs
// stop the same way, with four methods:
//
//   - Stop() begins the stop and returns at once. It is idempotent, and the
//     one to call from inside: from a task function, a handler, an event
//     handler.
//   - Done() is closed once the stop is over: every task function has
//     returned, every lease is released (task first, then lease: the next
//     leader starts only after the previous run exited or its term's time ran
//     out), and, for a client, the session has ended and the event handlers
//     have been called.
//   - Shutdown(ctx) is Stop, then waits for Done at most until ctx ends, like
//     [net/http.Server.Shutdown]. It returns nil at the moment Done is
//     closed; when ctx ends first, an error that wraps ctx.Err() and says
//     what was still running, while the stop goes on in the background in
//     the same order (no lease is released before its task function
//     returned or its term's deadline passed).
//   - Close() is Shutdown(context.Background()).
//
// For example:
//
//	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//	defer cancel()
//	if err := client.Shutdown(ctx); err != nil {
//		log.Print(err) // what still ran; the closing goes on in the background
//	}
//
// A task function or handler must not wait for its own stop, which waits for
// it: it calls Stop and returns. Shutdown called with the ctx a task
// function was given (or a ctx derived from it) knows it, begins the stop
// and returns an error at once; Close, which has no ctx, would wait for
// itself, as http.Server.Shutdown called from a handler does. An event
// handler that waits for its client's closing delays it 5 seconds, after
// which the handler is abandoned (see [Client.Shutdown]).
//
// # Events and logs
//
// Typed events ([Elected], [Revoked], [WorkCompleted], …) are delivered to
// the handlers given with [WithEventHandler], in order and off the election
// path; past 16,384 undelivered events the oldest are dropped, counted and
// logged (see [Event]). Logs go to the [log/slog] logger given with
// [WithLogger], by default [slog.Default]: failed runs at Error, a lost
// session or an unreachable backend at Warn, terms at Info.
//
// # Errors
//
// Sentinel errors ([ErrTermExpired], [ErrAlreadyStarted], [ErrYield], …) are
// prefixed "simba:" and may be wrapped: test them with [errors.Is]. Bad
// input is refused with an error, never a panic.
package simba
