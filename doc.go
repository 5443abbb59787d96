// Package simba runs term-fenced leader tasks: work that runs on exactly one
// node at a time, per election or per partition, with a fencing token that
// lets shared resources reject a deposed leader.
//
// A [Client] wraps a pluggable lease backend (etcd, ZooKeeper, or the
// in-memory backend in package backend/memory). Elections yield [Term]s whose
// tokens fence work; work runs on goroutines cancelled through context.
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
// A task function that runs a command reports how it ended with [Exited]:
// the run history (the simba command, the console) then shows the exit
// status with the run's result, and Exited(0) counts as success.
//
// # Shutting down
//
// [Client.Shutdown] stops every task, waits for the task functions to return
// and the leases to be released, then ends the session, at most until its
// ctx ends, like [net/http.Server.Shutdown]:
//
//	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//	defer cancel()
//	if err := client.Shutdown(ctx); err != nil {
//		log.Print(err) // what still ran; the closing goes on in the background
//	}
//
// When ctx ends first, the error says what was still running, and the
// closing goes on in the same order: no lease is released before its task
// function returned or its term's deadline passed. [Client.Close] is
// Shutdown without a deadline. [LeaderTask.Shutdown] and [GroupTask.Shutdown]
// do the same for one task.
//
// # Events and logs
//
// Typed events ([Elected], [Revoked], [WorkCompleted], …) are delivered to
// handlers registered with [WithEventHandler] or [Client.Subscribe], in
// order and off the election path. Logs go to the [log/slog] logger given
// with [WithLogger], by default [slog.Default]: failed runs at Error, a
// lost session or an unreachable backend at Warn, terms at Info.
//
// # Errors
//
// Sentinel errors ([ErrTermExpired], [ErrAlreadyStarted], [ErrYield], …) are
// prefixed "simba:" and may be wrapped: test them with [errors.Is]. Bad
// input is refused with an error, never a panic.
package simba
